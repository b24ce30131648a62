"""An IR-3 model lists its initializers among its inputs; none is overridable."""

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper

X = helper.make_tensor_value_info("X", TensorProto.FLOAT, [2])
B = helper.make_tensor_value_info("B", TensorProto.FLOAT, [2])
Y = helper.make_tensor_value_info("Y", TensorProto.FLOAT, [2])
b = helper.make_tensor("B", TensorProto.FLOAT, [2], [0.5, -0.5])
graph = helper.make_graph(
    [helper.make_node("Add", ["X", "B"], ["Y"])], "ir3", [X, B], [Y], initializer=[b]
)
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 8)])
model.ir_version = 3
sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
print([i.name for i in sess.get_inputs()], len(sess.get_overridable_initializers()))
print(sess.run(None, {"X": np.array([1.0, 1.0], dtype=np.float32)})[0].tolist())
# Feeding B differs on purpose: onnxruntime refuses it (Invalid input name), onnxflow follows
# the ONNX IR 3 rule that an initializer listed as a graph input is a default the feed overrides.
