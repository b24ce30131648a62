"""StringNormalizer lower-casing and dropping stop words, as a text-pipeline user runs it."""

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper

S = helper.make_tensor_value_info("S", TensorProto.STRING, [None])
T = helper.make_tensor_value_info("T", TensorProto.STRING, [None])
node = helper.make_node(
    "StringNormalizer",
    ["S"],
    ["T"],
    case_change_action="LOWER",
    stopwords=["the"],
    is_case_sensitive=0,
)
graph = helper.make_graph([node], "norm", [S], [T])
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
model.ir_version = 8
sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
(t,) = sess.run(None, {"S": np.array(["The", "Quick", "FOX"], dtype=object)})
print(t.tolist())
