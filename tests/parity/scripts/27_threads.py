"""One session shared by several Python threads, as a serving app does."""

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper

X = helper.make_tensor_value_info("X", TensorProto.FLOAT, [None, 3])
Y = helper.make_tensor_value_info("Y", TensorProto.FLOAT, [None, 1])
w = helper.make_tensor("w", TensorProto.FLOAT, [3, 1], [0.5, -1.0, 2.0])
graph = helper.make_graph(
    [helper.make_node("MatMul", ["X", "w"], ["Y"])], "lin", [X], [Y], initializer=[w]
)
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
model.ir_version = 8
so = ort.SessionOptions()
so.intra_op_num_threads = 1
sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])


def score(i):
    x = np.full((i + 1, 3), float(i), dtype=np.float32)
    return sess.run(None, {"X": x})[0]


with ThreadPoolExecutor(max_workers=4) as pool:
    results = list(pool.map(score, range(8)))
print([(r.shape, float(r.sum())) for r in results])
