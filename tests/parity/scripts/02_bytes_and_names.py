"""InferenceSession from bytes; run with explicit output names; inputs/outputs metadata."""

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper

A = helper.make_tensor_value_info("A", TensorProto.FLOAT, ["batch", 4])
B = helper.make_tensor_value_info("B", TensorProto.FLOAT, [4, 2])
S = helper.make_tensor_value_info("S", TensorProto.FLOAT, ["batch", 2])
T = helper.make_tensor_value_info("T", TensorProto.FLOAT, ["batch", 2])
nodes = [helper.make_node("MatMul", ["A", "B"], ["S"]), helper.make_node("Tanh", ["S"], ["T"])]
graph = helper.make_graph(nodes, "mm", [A, B], [S, T])
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
model.ir_version = 7

sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
for arg in sess.get_inputs() + sess.get_outputs():
    print(arg.name, arg.shape, arg.type)
rng = np.random.default_rng(0)
a = rng.standard_normal((3, 4)).astype(np.float32)
b = rng.standard_normal((4, 2)).astype(np.float32)
(t,) = sess.run(["T"], {"A": a, "B": b})
print(np.round(t, 4).tolist())
both = sess.run(None, {"A": a, "B": b})
print(len(both), [o.shape for o in both])
