"""Element types in and out: float16, double, int8, uint8, bool, int32."""

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper

cases = [
    (TensorProto.FLOAT16, np.float16, "Neg"),
    (TensorProto.DOUBLE, np.float64, "Abs"),
    (TensorProto.INT8, np.int8, "Neg"),
    (TensorProto.UINT8, np.uint8, "Identity"),
    (TensorProto.BOOL, np.bool_, "Not"),
    (TensorProto.INT32, np.int32, "Abs"),
]
for elem, dtype, op in cases:
    X = helper.make_tensor_value_info("X", elem, [3])
    Y = helper.make_tensor_value_info("Y", elem, [3])
    graph = helper.make_graph([helper.make_node(op, ["X"], ["Y"])], "g", [X], [Y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    x = np.array([1, 0, 3], dtype=dtype)
    (y,) = sess.run(None, {"X": x})
    print(sess.get_inputs()[0].type, op, y.dtype, y.tolist())
