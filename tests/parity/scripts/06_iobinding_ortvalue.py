"""IOBinding with OrtValues: bind_ortvalue_input, bind_input by pointer, preallocated output."""

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper

X = helper.make_tensor_value_info("X", TensorProto.FLOAT, [3])
Y = helper.make_tensor_value_info("Y", TensorProto.FLOAT, [3])
graph = helper.make_graph([helper.make_node("Exp", ["X"], ["Y"])], "exp", [X], [Y])
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
model.ir_version = 8
sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])

x = np.array([0.0, 1.0, 2.0], dtype=np.float32)
x_value = ort.OrtValue.ortvalue_from_numpy(x, "cpu", 0)
binding = sess.io_binding()
binding.bind_ortvalue_input("X", x_value)
binding.bind_output("Y", "cpu")
sess.run_with_iobinding(binding)
print(np.round(binding.copy_outputs_to_cpu()[0], 4).tolist())

y_value = ort.OrtValue.ortvalue_from_shape_and_type([3], np.float32, "cpu", 0)
binding = sess.io_binding()
binding.bind_input(
    name="X",
    device_type=x_value.device_name(),
    device_id=0,
    element_type=np.float32,
    shape=x_value.shape(),
    buffer_ptr=x_value.data_ptr(),
)
binding.bind_output(
    name="Y",
    device_type=y_value.device_name(),
    device_id=0,
    element_type=np.float32,
    shape=y_value.shape(),
    buffer_ptr=y_value.data_ptr(),
)
sess.run_with_iobinding(binding)
print("written in place:", np.round(y_value.numpy(), 4).tolist())
