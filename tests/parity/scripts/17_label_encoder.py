"""ai.onnx.ml LabelEncoder mapping strings to ints and back."""

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper

S = helper.make_tensor_value_info("S", TensorProto.STRING, [None])
I = helper.make_tensor_value_info("I", TensorProto.INT64, [None])
back = helper.make_tensor_value_info("B", TensorProto.STRING, [None])
nodes = [
    helper.make_node(
        "LabelEncoder",
        ["S"],
        ["I"],
        domain="ai.onnx.ml",
        keys_strings=["cat", "dog", "bird"],
        values_int64s=[0, 1, 2],
        default_int64=-1,
    ),
    helper.make_node(
        "LabelEncoder",
        ["I"],
        ["B"],
        domain="ai.onnx.ml",
        keys_int64s=[0, 1, 2],
        values_strings=["CAT", "DOG", "BIRD"],
        default_string="?",
    ),
]
graph = helper.make_graph(nodes, "le", [S], [I, back])
model = helper.make_model(
    graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.ml", 2)]
)
model.ir_version = 8
sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
ids, names = sess.run(None, {"S": np.array(["dog", "fish", "cat", "bird"], dtype=object)})
print(ids.tolist(), ids.dtype, names.tolist())
