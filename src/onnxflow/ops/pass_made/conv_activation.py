"""Kernels of the nodes the compile passes make: a Conv with its bias Add and activation, as
one node (:mod:`onnxflow.compile.passes.fuse_conv_activation`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from onnxflow.ops.conv_direct import compiled_fused_conv
from onnxflow.ops.microsoft.fused import fused_conv
from onnxflow.ops.pass_made import CONV_ACTIVATION, FUSED_DOMAIN
from onnxflow.ops.registry import op
from onnxflow.traits import Traits, native_form


def _flat_bias(build: Callable[..., Callable[..., np.ndarray]]) -> Callable[..., Any]:
    """FusedConv's builder ``build`` taking B as any shape of one value per output channel
    (the pass moves a bias Add's constant there, (1, M, 1, 1) say) by reading it flat."""

    def conv_activation(node: Any, **attrs: Any) -> Callable[..., np.ndarray]:
        run = build(node, **attrs)

        def step(x: np.ndarray, w: np.ndarray, b: np.ndarray | None = None) -> np.ndarray:
            return run(x, w, None if b is None else b.reshape(-1))

        return step

    return conv_activation


_CONV_ACTIVATION_COMPILED = compiled_fused_conv(fused_conv, flat_bias=True)


#: A Conv with the bias Add and the activation after it
#: (:mod:`~onnxflow.compile.passes.fuse_conv_activation`): onnxruntime's FusedConv, whose NumPy
#: form runs the Conv's kernel then the activation's, and whose compiled form applies the bias
#: and the activation in the convolution's own pass.
op(
    CONV_ACTIVATION,
    1,
    domain=FUSED_DOMAIN,
    build=True,
    traits=Traits(native=native_form(_CONV_ACTIVATION_COMPILED)),
)(_flat_bias(fused_conv))
