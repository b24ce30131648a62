"""Build a model with onnx.helper, save it, run it from its path with a dict feed."""

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper

X = helper.make_tensor_value_info("X", TensorProto.FLOAT, ["N", 3])
Y = helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["N", 3])
graph = helper.make_graph([helper.make_node("Relu", ["X"], ["Y"])], "relu_graph", [X], [Y])
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
model.ir_version = 8
onnx.save(model, "relu.onnx")

sess = ort.InferenceSession("relu.onnx", providers=["CPUExecutionProvider"])
x = np.array([[-1.0, 0.0, 2.5], [3.0, -4.0, 0.5]], dtype=np.float32)
(y,) = sess.run(None, {"X": x})
print(y.tolist(), y.dtype, y.shape)
