"""Build net.onnx and net_io.npz for scripts/23_torch_export.py: the small network of
onnxruntime's PyTorch tutorial, exported by torch 2.13 as the tutorial does, with torch's own
output for the input (the tests never import torch). Run from this directory."""

import warnings

import numpy as np
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
with torch.no_grad():
    np.savez("net_io.npz", x=x.numpy(), torch_out=net(x).numpy())
