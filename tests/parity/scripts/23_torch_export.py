"""Export a small torch model and run it, as in onnxruntime's PyTorch tutorial."""

import warnings

import numpy as np
import onnxruntime
import torch

torch.manual_seed(0)
net = torch.nn.Sequential(
    torch.nn.Linear(6, 5), torch.nn.ReLU(), torch.nn.Linear(5, 3), torch.nn.Softmax(dim=1)
)
net.eval()
x = torch.randn(4, 6)
with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)  # torch's notice about its legacy exporter
    torch.onnx.export(
        net,
        (x,),
        "net.onnx",
        input_names=["input"],
        output_names=["output"],
        dynamic_axes={"input": {0: "batch"}, "output": {0: "batch"}},
        opset_version=17,
        dynamo=False,
    )

ort_session = onnxruntime.InferenceSession("net.onnx", providers=["CPUExecutionProvider"])


def to_numpy(tensor):
    return tensor.detach().cpu().numpy() if tensor.requires_grad else tensor.cpu().numpy()


ort_inputs = {ort_session.get_inputs()[0].name: to_numpy(x)}
ort_outs = ort_session.run(None, ort_inputs)
print(ort_session.get_inputs()[0].shape, ort_session.get_outputs()[0].shape)
print(np.round(ort_outs[0], 3).tolist())
np.testing.assert_allclose(to_numpy(net(x)), ort_outs[0], rtol=1e-03, atol=1e-05)
print("Exported model has been tested with ONNXRuntime, and the result looks good!")
