"""Run a model torch exported and check it against torch's output, as in onnxruntime's PyTorch
tutorial. The export itself (torch.onnx.export with the tutorial's settings) was done by
tests/parity/data/make_torch_net.py: net.onnx and torch's output beside it in net_io.npz."""

import numpy as np
import onnxruntime

ort_session = onnxruntime.InferenceSession("net.onnx", providers=["CPUExecutionProvider"])
saved = np.load("net_io.npz")
x, torch_out = saved["x"], saved["torch_out"]

ort_inputs = {ort_session.get_inputs()[0].name: x}
ort_outs = ort_session.run(None, ort_inputs)
print(ort_session.get_inputs()[0].shape, ort_session.get_outputs()[0].shape)
print(np.round(ort_outs[0], 3).tolist())
np.testing.assert_allclose(torch_out, ort_outs[0], rtol=1e-03, atol=1e-05)
print("Exported model has been tested with ONNXRuntime, and the result looks good!")
