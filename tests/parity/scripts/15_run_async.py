"""run_async with a callback, waited on with an Event."""

import threading

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper

X = helper.make_tensor_value_info("X", TensorProto.FLOAT, [3])
Y = helper.make_tensor_value_info("Y", TensorProto.FLOAT, [3])
graph = helper.make_graph([helper.make_node("Reciprocal", ["X"], ["Y"])], "rec", [X], [Y])
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
model.ir_version = 8
sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


class Result:
    def __init__(self):
        self.event = threading.Event()
        self.outputs = None
        self.err = None


def callback(outputs, user_data, err):
    user_data.outputs = outputs
    user_data.err = err
    user_data.event.set()


result = Result()
sess.run_async(["Y"], {"X": np.array([1.0, 2.0, 4.0], dtype=np.float32)}, callback, result)
print("finished:", result.event.wait(30))
print("error message empty:", not result.err)
print(len(result.outputs), np.round(result.outputs[0], 4).tolist())
