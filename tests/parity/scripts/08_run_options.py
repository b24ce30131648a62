"""RunOptions: logid (the run tag), log_severity_level, config entries, terminate."""

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper
from onnxruntime.capi.onnxruntime_pybind11_state import Fail

X = helper.make_tensor_value_info("X", TensorProto.FLOAT, [2])
Y = helper.make_tensor_value_info("Y", TensorProto.FLOAT, [2])
graph = helper.make_graph([helper.make_node("Floor", ["X"], ["Y"])], "floor", [X], [Y])
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
model.ir_version = 8
sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
x = np.array([1.7, -0.2], dtype=np.float32)

ro = ort.RunOptions()
ro.logid = "parity-run"
ro.log_severity_level = 3
ro.add_run_config_entry("memory.enable_memory_arena_shrinkage", "cpu:0")
print(ro.logid, ro.log_severity_level, ro.terminate)
print(ro.get_run_config_entry("memory.enable_memory_arena_shrinkage"))
print(sess.run(None, {"X": x}, ro)[0].tolist())

ro.terminate = True
try:
    sess.run(None, {"X": x}, ro)
    print("ran")
except Fail as e:
    print(
        "terminated, caught as Fail:", "terminate" in str(e).lower() or "cancel" in str(e).lower()
    )
ro.terminate = False
print(sess.run(None, {"X": x}, run_options=ro)[0].tolist())
