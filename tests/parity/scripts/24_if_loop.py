"""Control flow: If choosing a branch and Loop accumulating, run through the Python API."""

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper

C = helper.make_tensor_value_info("C", TensorProto.BOOL, [])
N = helper.make_tensor_value_info("N", TensorProto.INT64, [])
Y = helper.make_tensor_value_info("Y", TensorProto.FLOAT, [2])
Z = helper.make_tensor_value_info("Z", TensorProto.FLOAT, [2])

then_g = helper.make_graph(
    [helper.make_node("Constant", [], ["t"], value_floats=[1.0, 2.0])],
    "then",
    [],
    [helper.make_tensor_value_info("t", TensorProto.FLOAT, [2])],
)
else_g = helper.make_graph(
    [helper.make_node("Constant", [], ["e"], value_floats=[-1.0, -2.0])],
    "else",
    [],
    [helper.make_tensor_value_info("e", TensorProto.FLOAT, [2])],
)
body = helper.make_graph(
    [
        helper.make_node("Identity", ["cond_in"], ["cond_out"]),
        helper.make_node("Add", ["acc_in", "Y"], ["acc_out"]),
    ],
    "body",
    [
        helper.make_tensor_value_info("i", TensorProto.INT64, []),
        helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
        helper.make_tensor_value_info("acc_in", TensorProto.FLOAT, [2]),
    ],
    [
        helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
        helper.make_tensor_value_info("acc_out", TensorProto.FLOAT, [2]),
    ],
)
zero = helper.make_tensor("zero", TensorProto.FLOAT, [2], [0.0, 0.0])
nodes = [
    helper.make_node("If", ["C"], ["Y"], then_branch=then_g, else_branch=else_g),
    helper.make_node("Loop", ["N", "", "zero"], ["Z"], body=body),
]
graph = helper.make_graph(nodes, "cf", [C, N], [Y, Z], initializer=[zero])
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
model.ir_version = 8
sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
for cond, n in ((True, 3), (False, 0), (False, 2)):
    y, z = sess.run(None, {"C": np.array(cond), "N": np.array(n, dtype=np.int64)})
    print(cond, n, y.tolist(), z.tolist())
