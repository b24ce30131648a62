"""Profiling: enable_profiling, profile_file_prefix, end_profiling and reading the JSON."""

import json
import os

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper

X = helper.make_tensor_value_info("X", TensorProto.FLOAT, [4])
Y = helper.make_tensor_value_info("Y", TensorProto.FLOAT, [4])
nodes = [
    helper.make_node("Abs", ["X"], ["a"], name="abs_node"),
    helper.make_node("Sqrt", ["a"], ["Y"], name="sqrt_node"),
]
graph = helper.make_graph(nodes, "prof", [X], [Y])
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
model.ir_version = 8

options = ort.SessionOptions()
options.enable_profiling = True
options.profile_file_prefix = "myprofile"
sess = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
for _ in range(3):
    sess.run(None, {"X": np.array([1.0, -4.0, 9.0, -16.0], dtype=np.float32)})
path = sess.end_profiling()
print("file exists:", os.path.exists(path))
print("prefix used:", os.path.basename(path).startswith("myprofile"), path.endswith(".json"))
with open(path) as f:
    events = json.load(f)
print("is a list:", isinstance(events, list))
print(
    "events have ph/name/cat/ts/dur:",
    all({"ph", "name", "cat", "ts", "dur"} <= set(e) for e in events),
)
node_names = {e["name"] for e in events if e["cat"] == "Node"}
print("abs_node profiled:", any(n.startswith("abs_node") for n in node_names))
print("sqrt_node profiled:", any(n.startswith("sqrt_node") for n in node_names))
print("model_run events:", sum(e["name"] == "model_run" for e in events if e["cat"] == "Session"))
