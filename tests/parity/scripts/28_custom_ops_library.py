"""register_custom_ops_library: an app guards it, as users do when the library may be absent."""

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper

so = ort.SessionOptions()
print("offered:", callable(getattr(so, "register_custom_ops_library", None)))
try:
    so.register_custom_ops_library("./libmissing_custom_ops.so")
    print("registered")
except Exception as e:
    print("missing library refused:", "libmissing_custom_ops" in str(e))

X = helper.make_tensor_value_info("X", TensorProto.FLOAT, [2])
Y = helper.make_tensor_value_info("Y", TensorProto.FLOAT, [2])
graph = helper.make_graph([helper.make_node("Relu", ["X"], ["Y"])], "g", [X], [Y])
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
model.ir_version = 8
sess = ort.InferenceSession(
    model.SerializeToString(), ort.SessionOptions(), providers=["CPUExecutionProvider"]
)
print(sess.run(None, {"X": np.array([-1.0, 1.0], dtype=np.float32)})[0].tolist())
