"""SessionOptions.add_initializer replaces a model initializer with the caller's OrtValue."""

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper

X = helper.make_tensor_value_info("X", TensorProto.FLOAT, [2])
W = helper.make_tensor_value_info("W", TensorProto.FLOAT, [2])
Y = helper.make_tensor_value_info("Y", TensorProto.FLOAT, [2])
w = helper.make_tensor("W", TensorProto.FLOAT, [2], [1.0, 1.0])
graph = helper.make_graph(
    [helper.make_node("Mul", ["X", "W"], ["Y"])], "scale", [X, W], [Y], initializer=[w]
)
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
model.ir_version = 8
data = model.SerializeToString()
x = np.array([3.0, 4.0], dtype=np.float32)

sess = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
print([i.name for i in sess.get_inputs()], [i.name for i in sess.get_overridable_initializers()])
print(sess.run(None, {"X": x})[0].tolist())
print(sess.run(None, {"X": x, "W": np.array([2.0, 3.0], dtype=np.float32)})[0].tolist())

weights = ort.OrtValue.ortvalue_from_numpy(np.array([10.0, -1.0], dtype=np.float32))
so = ort.SessionOptions()
so.add_initializer("W", weights)
sess = ort.InferenceSession(data, so, providers=["CPUExecutionProvider"])
print(sess.run(None, {"X": x})[0].tolist())
