"""A sequence output (SplitToSequence) comes back as a list of arrays."""

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper

X = helper.make_tensor_value_info("X", TensorProto.FLOAT, [4, 2])
S = helper.make_tensor_sequence_value_info("S", TensorProto.FLOAT, None)
graph = helper.make_graph(
    [helper.make_node("SplitToSequence", ["X"], ["S"], axis=0, keepdims=0)], "seq", [X], [S]
)
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
model.ir_version = 8
sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
print(sess.get_outputs()[0].name, sess.get_outputs()[0].type)
(seq,) = sess.run(None, {"X": np.arange(8, dtype=np.float32).reshape(4, 2)})
print(type(seq).__name__, len(seq), [s.tolist() for s in seq])
