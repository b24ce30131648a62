"""Graph optimization levels and saving the optimized model, which loads and agrees."""

import os

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper

X = helper.make_tensor_value_info("X", TensorProto.FLOAT, [2, 3])
Y = helper.make_tensor_value_info("Y", TensorProto.FLOAT, [2, 3])
w = helper.make_tensor("w", TensorProto.FLOAT, [3], [1.0, 2.0, 3.0])
nodes = [
    helper.make_node("Add", ["X", "w"], ["t"]),
    helper.make_node("Identity", ["t"], ["u"]),
    helper.make_node("Mul", ["u", "w"], ["Y"]),
]
graph = helper.make_graph(nodes, "opt", [X], [Y], initializer=[w])
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
model.ir_version = 8
data = model.SerializeToString()
x = np.arange(6, dtype=np.float32).reshape(2, 3)

print(
    [
        level.name
        for level in (
            ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
            ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
            ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
            ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
        )
    ]
)
results = []
for level in (
    ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
    ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
):
    so = ort.SessionOptions()
    so.graph_optimization_level = level
    print(so.graph_optimization_level == level)
    sess = ort.InferenceSession(data, so, providers=["CPUExecutionProvider"])
    results.append(sess.run(None, {"X": x})[0])
print(np.array_equal(results[0], results[1]), results[0].tolist())

so = ort.SessionOptions()
so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
so.optimized_model_filepath = "optimized.onnx"
ort.InferenceSession(data, so, providers=["CPUExecutionProvider"])
print("saved:", os.path.exists("optimized.onnx"))
reloaded = ort.InferenceSession("optimized.onnx", providers=["CPUExecutionProvider"])
print("same result:", np.allclose(reloaded.run(None, {"X": x})[0], results[0]))
