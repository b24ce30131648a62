"""String tensors in and out (object arrays and numpy str arrays)."""

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper

S = helper.make_tensor_value_info("S", TensorProto.STRING, [None])
T = helper.make_tensor_value_info("T", TensorProto.STRING, [None])
L = helper.make_tensor_value_info("L", TensorProto.INT64, [1])
nodes = [
    helper.make_node("Identity", ["S"], ["T"]),
    helper.make_node("Shape", ["S"], ["L"]),
]
graph = helper.make_graph(nodes, "strings", [S], [T, L])
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
model.ir_version = 8
sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
print(sess.get_inputs()[0].type, sess.get_outputs()[0].type)

for words in (np.array(["alpha", "béta", ""], dtype=object), np.array(["x", "yz"])):
    t, n = sess.run(None, {"S": words})
    print(t.tolist(), t.dtype, n.tolist())
