"""The status exceptions an onnxruntime user catches, from their module path."""

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper
from onnxruntime.capi.onnxruntime_pybind11_state import (
    Fail,
    InvalidArgument,
    InvalidProtobuf,
    NoSuchFile,
)

X = helper.make_tensor_value_info("X", TensorProto.FLOAT, [2])
Y = helper.make_tensor_value_info("Y", TensorProto.FLOAT, [2])
graph = helper.make_graph([helper.make_node("Relu", ["X"], ["Y"])], "g", [X], [Y])
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
model.ir_version = 8
sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


def attempt(label, fn, *classes):
    try:
        fn()
        print(label, "no error")
    except Exception as e:
        print(label, "caught as", [c.__name__ for c in classes if isinstance(e, c)])


attempt("missing file:", lambda: ort.InferenceSession("no_such_model.onnx"), NoSuchFile)
attempt("garbage bytes:", lambda: ort.InferenceSession(b"not a model at all"), InvalidProtobuf)
attempt("wrong input name:", lambda: sess.run(None, {"Z": np.zeros(2, np.float32)}), ValueError)
attempt("wrong dtype:", lambda: sess.run(None, {"X": np.zeros(2, np.int64)}), InvalidArgument)
attempt("wrong rank:", lambda: sess.run(None, {"X": np.zeros((2, 2), np.float32)}), InvalidArgument)
attempt(
    "wrong output name:",
    lambda: sess.run(["nope"], {"X": np.zeros(2, np.float32)}),
    InvalidArgument,
)
attempt("missing feed:", lambda: sess.run(None, {}), ValueError)

bad = helper.make_graph([helper.make_node("Relu", ["undefined"], ["Y"])], "bad", [X], [Y])
bad_model = helper.make_model(bad, opset_imports=[helper.make_opsetid("", 17)])
bad_model.ir_version = 8
attempt(
    "invalid graph:", lambda: ort.InferenceSession(bad_model.SerializeToString()), InvalidArgument
)
print(issubclass(InvalidArgument, Exception), issubclass(Fail, Exception))
