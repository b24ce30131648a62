"""SessionOptions: threads, execution mode, config entries, read back from the session."""

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper

X = helper.make_tensor_value_info("X", TensorProto.FLOAT, [3])
Y = helper.make_tensor_value_info("Y", TensorProto.FLOAT, [3])
graph = helper.make_graph([helper.make_node("Softplus", ["X"], ["Y"])], "sp", [X], [Y])
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
model.ir_version = 8

so = ort.SessionOptions()
so.intra_op_num_threads = 1
so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
so.log_severity_level = 3
so.add_session_config_entry("session.load_model_format", "ONNX")
print(so.get_session_config_entry("session.load_model_format"))
print(so.intra_op_num_threads, so.execution_mode == ort.ExecutionMode.ORT_SEQUENTIAL)
print(ort.ExecutionMode.ORT_SEQUENTIAL.name, ort.ExecutionMode.ORT_PARALLEL.name)

sess = ort.InferenceSession(
    model.SerializeToString(), sess_options=so, providers=["CPUExecutionProvider"]
)
got = sess.get_session_options()
print(got.intra_op_num_threads, got.log_severity_level, got.execution_mode.name)
print(got.get_session_config_entry("session.load_model_format"))
y = sess.run(None, {"X": np.array([-1.0, 0.0, 1.0], dtype=np.float32)})[0]
print(np.round(y, 5).tolist())
