"""IOBinding: bind_cpu_input, bind_output by name, run_with_iobinding, copy_outputs_to_cpu."""

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper

X = helper.make_tensor_value_info("X", TensorProto.FLOAT, [2, 2])
Y = helper.make_tensor_value_info("Y", TensorProto.FLOAT, [2, 2])
graph = helper.make_graph([helper.make_node("Sigmoid", ["X"], ["Y"])], "sig", [X], [Y])
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
model.ir_version = 8
sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])

x = np.array([[0.0, 1.0], [-1.0, 2.0]], dtype=np.float32)
io_binding = sess.io_binding()
io_binding.bind_cpu_input("X", x)
io_binding.bind_output("Y")
sess.run_with_iobinding(io_binding)
y = io_binding.copy_outputs_to_cpu()[0]
print(np.round(y, 5).tolist(), y.dtype)
outs = io_binding.get_outputs()
print(len(outs), outs[0].shape(), outs[0].device_name(), outs[0].data_type())
