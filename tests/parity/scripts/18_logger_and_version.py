"""Logger severity, version strings, build info where offered."""

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper

ort.set_default_logger_severity(3)
print("version is a string:", isinstance(ort.__version__, str) and ort.__version__.count(".") >= 1)
print("version string matches:", ort.get_version_string() == ort.__version__)
if hasattr(ort, "get_build_info"):
    print("build info is a string:", isinstance(ort.get_build_info(), str))
else:
    print("build info is a string:", True)

X = helper.make_tensor_value_info("X", TensorProto.FLOAT, [1])
Y = helper.make_tensor_value_info("Y", TensorProto.FLOAT, [1])
graph = helper.make_graph([helper.make_node("Identity", ["X"], ["Y"])], "g", [X], [Y])
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
model.ir_version = 8
so = ort.SessionOptions()
so.log_severity_level = 0 + 3
so.logid = "parity"
sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
print(sess.run(None, {"X": np.array([7.0], dtype=np.float32)})[0].tolist())
ort.set_default_logger_severity(2)
