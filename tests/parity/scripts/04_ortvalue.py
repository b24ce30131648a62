"""OrtValue: from numpy, inspect, run_with_ort_values."""

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper

X = helper.make_tensor_value_info("X", TensorProto.FLOAT, [None, 2])
Y = helper.make_tensor_value_info("Y", TensorProto.FLOAT, [None, 2])
graph = helper.make_graph([helper.make_node("Neg", ["X"], ["Y"])], "neg", [X], [Y])
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
model.ir_version = 8

x = np.array([[1.5, -2.0], [0.0, 4.0]], dtype=np.float32)
value = ort.OrtValue.ortvalue_from_numpy(x)
print(value.shape(), value.data_type(), value.element_type(), value.device_name())
print(value.is_tensor(), value.has_value(), np.array_equal(value.numpy(), x))

sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
outs = sess.run_with_ort_values(["Y"], {"X": value})
print(outs[0].numpy().tolist(), outs[0].shape(), outs[0].data_type())

ints = ort.OrtValue.ortvalue_from_numpy(np.array([1, 2, 3], dtype=np.int64), "cpu", 0)
print(ints.data_type(), ints.element_type(), ints.shape())
