"""Providers, device, and asking for one this machine lacks."""

import warnings

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper

print("device:", ort.get_device())
available = ort.get_available_providers()
print("CPU available:", "CPUExecutionProvider" in available, available[-1])
print("all providers include CPU:", "CPUExecutionProvider" in ort.get_all_providers())

X = helper.make_tensor_value_info("X", TensorProto.FLOAT, [2])
Y = helper.make_tensor_value_info("Y", TensorProto.FLOAT, [2])
graph = helper.make_graph([helper.make_node("Sign", ["X"], ["Y"])], "g", [X], [Y])
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
model.ir_version = 8
data = model.SerializeToString()

sess = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
print(sess.get_providers())
print(sorted(sess.get_provider_options()))
sess.disable_fallback()
sess.enable_fallback()

with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    sess = ort.InferenceSession(data, providers=["CUDAExecutionProvider", "CPUExecutionProvider"])
print("warned about CUDA:", any("CUDAExecutionProvider" in str(w.message) for w in caught))
print(sess.get_providers())
print(sess.run(None, {"X": np.array([-3.0, 2.0], dtype=np.float32)})[0].tolist())
