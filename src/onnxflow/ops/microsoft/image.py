"""com.microsoft image operators that are the contrib twins of onnx ones.

============================  =====  ==================================================
operator                      since  meaning
============================  =====  ==================================================
ConvTransposeWithDynamicPads  1      ConvTranspose whose ``pads`` come as an input
GridSample                    1      onnx GridSample-16 (4-D, bilinear/nearest/bicubic)
============================  =====  ==================================================
"""

from __future__ import annotations

import numpy as np

from onnxflow.ops.conv import conv_transpose
from onnxflow.ops.microsoft import MS_DOMAIN
from onnxflow.ops.registry import op
from onnxflow.ops.resize import grid_sample_16


@op("ConvTransposeWithDynamicPads", 1, domain=MS_DOMAIN)
def conv_transpose_with_dynamic_pads(
    x: np.ndarray,
    w: np.ndarray,
    pads: np.ndarray | None = None,
    b: np.ndarray | None = None,
    *,
    auto_pad: str = "NOTSET",
    dilations: list[int] | None = None,
    group: int = 1,
    kernel_shape: list[int] | None = None,
    output_padding: list[int] | None = None,
    strides: list[int] | None = None,
) -> np.ndarray:
    """onnx ConvTranspose with the ``pads`` attribute given as an int64 input (all begins,
    then all ends; omitted means no padding)."""
    return conv_transpose(
        x,
        w,
        b,
        auto_pad=auto_pad,
        dilations=dilations,
        group=group,
        kernel_shape=kernel_shape,
        output_padding=output_padding,
        pads=None if pads is None else [int(p) for p in pads.reshape(-1)],
        strides=strides,
    )


@op("GridSample", 1, domain=MS_DOMAIN)
def grid_sample_ms(
    x: np.ndarray,
    grid: np.ndarray,
    *,
    align_corners: int = 0,
    mode: str = "bilinear",
    padding_mode: str = "zeros",
) -> np.ndarray:
    """onnx GridSample-16: the 4-D ``x`` sampled at the normalized positions of ``grid``."""
    return grid_sample_16(
        x, grid, mode=mode, padding_mode=padding_mode, align_corners=align_corners
    )
