"""Symbolic dimensions: the same session with several batch sizes."""

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper

X = helper.make_tensor_value_info("X", TensorProto.FLOAT, ["batch", "seq", 4])
Y = helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["batch", "seq"])
graph = helper.make_graph(
    [helper.make_node("ReduceSum", ["X"], ["Y"], keepdims=0, axes=[2])], "rs", [X], [Y]
)
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11)])
model.ir_version = 6
sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
print(sess.get_inputs()[0].shape, sess.get_outputs()[0].shape)
for batch, seq in ((1, 1), (2, 3), (5, 0)):
    x = np.ones((batch, seq, 4), dtype=np.float32)
    y = sess.run(None, {"X": x})[0]
    print(batch, seq, y.shape, float(y.sum()))
