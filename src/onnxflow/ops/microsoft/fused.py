"""The fusions onnxruntime's graph optimizer writes into the models it saves
(``SessionOptions.optimized_model_filepath``) at the extended and higher levels.

===============  ====  ==================================================================
operator         since  meaning
===============  ====  ==================================================================
FusedConv        1     activation(Conv(X, W, B) + Z), Z optional
FusedGemm        1     activation(Gemm(A, B, C))
FusedMatMul      1     alpha * A' @ B', with A' and B' transposed as transA/B and
                       transBatchA/B ask
TransposeMatMul  1     FusedMatMul without the batch transposes (its former name)
NhwcMaxPool      1     MaxPool over (N, H, W, C) 8-bit tensors (the quantized NHWC rewrite)
===============  ====  ==================================================================

Each is the default-domain kernel it fuses (:mod:`onnxflow.ops.conv`, :mod:`~onnxflow.ops.linalg`,
:mod:`~onnxflow.ops.pool`) followed by the default-domain activation kernel it names.
FusedConv (and the NCHWc Conv of :mod:`.nchwc`) name the activation's parameters positionally
in ``activation_params`` as onnxruntime's MLAS activations take them; FusedGemm names them
``activation_alpha``/``_beta``/``_gamma``, the fused node's own attributes renamed.
NhwcConv, NhwcFusedConv and FusedMatMulActivation are not here: onnxruntime's CPU provider
registers no float kernel for them.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence

import numpy as np

from onnxflow.compile.context import NodeContext
from onnxflow.ops import compiled
from onnxflow.ops.conv import conv
from onnxflow.ops.conv_direct import compiled_fused_conv
from onnxflow.ops.linalg import gemm, matmul
from onnxflow.ops.microsoft import MS_DOMAIN
from onnxflow.ops.pool import max_pool
from onnxflow.ops.registry import REGISTRY, op
from onnxflow.traits import Traits, native_form

Activation = Callable[[np.ndarray], np.ndarray]

#: activation -> (the default-domain opset whose kernel computes it, the names of its
#: ``activation_params`` in order): the activations onnxruntime's MLAS fuses into convolutions.
_MLAS_ACTIVATIONS: dict[str, tuple[int, tuple[str, ...]]] = {
    "Relu": (14, ()),
    "Tanh": (13, ()),
    "Sigmoid": (13, ()),
    "LeakyRelu": (16, ("alpha",)),
    "Clip": (6, ("min", "max")),
    "HardSigmoid": (22, ("alpha", "beta")),
    "HardSwish": (22, ()),
}

#: The activations onnxruntime fuses into Gemm, each with the default-domain opset whose
#: kernel computes it; their attributes come as ``activation_<name>``.
_GEMM_ACTIVATIONS: dict[str, int] = {
    "Relu": 14,
    "Tanh": 13,
    "Sigmoid": 13,
    "LeakyRelu": 16,
    "HardSigmoid": 22,
    "Elu": 22,
    "Selu": 22,
    "Softplus": 22,
    "Softsign": 22,
    "ThresholdedRelu": 22,
    "ScaledTanh": 1,
    "ParametricSoftplus": 1,
}


def _kernel(name: str, opset: int, what: str, native: bool = False) -> Callable[..., np.ndarray]:
    """The default-domain kernel ``name`` at ``opset``; with ``native``, its compiled form
    when it declares one."""
    kernel = REGISTRY.lookup("", name, opset)
    if kernel is None or kernel.build:
        raise ValueError(f"{what}: no plain kernel computes {name} at opset {opset}")
    form = kernel.traits.native
    return form.fn if native and form is not None else kernel.fn


def mlas_activation(name: str | None, params: Sequence[float] | None) -> Activation | None:
    """The activation a fused convolution names (None: none), its ``activation_params``
    bound, as the default-domain kernel of that name computes it."""
    if name is None:
        return None
    if name not in _MLAS_ACTIVATIONS:
        raise ValueError(f"activation {name!r} is not one of {', '.join(_MLAS_ACTIVATIONS)}")
    opset, names = _MLAS_ACTIVATIONS[name]
    params = list(params or [])
    if len(params) < len(names):
        raise ValueError(f"activation {name} takes activation_params {list(names)}, found {params}")
    kernel = _kernel(name, opset, "activation")
    bound = dict(zip(names, params))
    return lambda x: kernel(x, **bound)


def _apply(y: np.ndarray, activation: Activation | None) -> np.ndarray:
    return y if activation is None else activation(y)


# -- convolution --------------------------------------------------------------------------------
def fused_conv(
    node: NodeContext,
    *,
    activation: str | None = None,
    activation_params: list[float] | None = None,
    auto_pad: str = "NOTSET",
    dilations: list[int] | None = None,
    group: int = 1,
    kernel_shape: list[int] | None = None,
    pads: list[int] | None = None,
    strides: list[int] | None = None,
) -> Callable[..., np.ndarray]:
    """activation(Conv(X, W, B) + Z): Z (optional) is added before the activation."""
    act = mlas_activation(activation, activation_params)
    geometry = dict(
        auto_pad=auto_pad,
        dilations=dilations,
        group=group,
        kernel_shape=kernel_shape,
        pads=pads,
        strides=strides,
    )

    def run(
        x: np.ndarray, w: np.ndarray, b: np.ndarray | None = None, z: np.ndarray | None = None
    ) -> np.ndarray:
        y = conv(x, w, b, **geometry)
        if z is not None:
            if z.shape != y.shape:
                raise ValueError(f"Z has shape {z.shape}, expected the output's {y.shape}")
            y += z.astype(y.dtype, copy=False)
        return _apply(y, act)

    return run


#: The compiled form runs the convolutions :mod:`onnxflow.ops.conv_direct` takes with the bias,
#: Z and the activation in the loop's pass.
op(
    "FusedConv",
    1,
    domain=MS_DOMAIN,
    build=True,
    traits=Traits(native=native_form(compiled_fused_conv(fused_conv))),
)(fused_conv)


# -- matrix products ----------------------------------------------------------------------------
def _gemm_activation(
    activation: str | None, given: dict[str, float | None], native: bool
) -> Activation | None:
    """FusedGemm's activation (None: none) with the ``given`` attributes it takes bound; with
    ``native``, the activation kernel's compiled form where it has one."""
    if activation is None:
        return None
    if activation not in _GEMM_ACTIVATIONS:
        raise ValueError(f"activation {activation!r} is not one of {', '.join(_GEMM_ACTIVATIONS)}")
    kernel = _kernel(activation, _GEMM_ACTIVATIONS[activation], "activation", native)
    takes = inspect.signature(kernel).parameters
    bound = {k: v for k, v in given.items() if v is not None and k in takes}
    return lambda y: kernel(y, **bound)


def _fused_gemm(native: bool) -> Callable[..., Callable[..., np.ndarray]]:
    """FusedGemm's builder; ``native``: its activation runs the compiled form it declares
    (the NumPy form's activation otherwise)."""

    def build(
        node: NodeContext,
        *,
        activation: str | None = None,
        activation_alpha: float | None = None,
        activation_beta: float | None = None,
        activation_gamma: float | None = None,
        alpha: float = 1.0,
        beta: float = 1.0,
        transA: int = 0,
        transB: int = 0,
    ) -> Callable[..., np.ndarray]:
        """activation(alpha * A' @ B' + beta * C), the activation's attributes those the node
        sets as ``activation_alpha``/``_beta``/``_gamma`` (one the activation does not take is
        ignored, as onnxruntime does)."""
        given = {"alpha": activation_alpha, "beta": activation_beta, "gamma": activation_gamma}
        act = _gemm_activation(activation, given, native)

        def run(a: np.ndarray, b: np.ndarray, c: np.ndarray | None = None) -> np.ndarray:
            y = gemm(a, b, c, alpha=alpha, beta=beta, transA=transA, transB=transB)
            return _apply(y, act)

        return run

    build.__name__ = build.__qualname__ = "fused_gemm_compiled" if native else "fused_gemm"
    return build


#: FusedGemm's compiled form: the same product, its activation's compiled form where one
#: exists (Sigmoid's); none when the compiled math (``_math``) is not built.
_FUSED_GEMM_COMPILED = native_form(compiled.when(compiled.module("_math"), _fused_gemm(True)))

fused_gemm = op(
    "FusedGemm", 1, domain=MS_DOMAIN, build=True, traits=Traits(native=_FUSED_GEMM_COMPILED)
)(_fused_gemm(native=False))


def _operand(x: np.ndarray, trans: int, trans_batch: int) -> np.ndarray:
    """A matrix operand as FusedMatMul reads it: with transBatch, axis 0 moves to just before
    the last (the batch axes come first); with trans, the last two axes swap."""
    if x.ndim < 2:
        if trans or trans_batch:
            raise ValueError(f"cannot transpose an operand of shape {x.shape}")
        return x
    perm = list(range(x.ndim))
    if trans_batch and x.ndim > 2:
        perm = [*perm[1:-1], 0, perm[-1]]
    if trans:
        perm[-2], perm[-1] = perm[-1], perm[-2]
    return x.transpose(perm)


def _fused_matmul(
    a: np.ndarray,
    b: np.ndarray,
    alpha: float,
    trans_a: int,
    trans_b: int,
    trans_batch_a: int = 0,
    trans_batch_b: int = 0,
) -> np.ndarray:
    y = matmul(_operand(a, trans_a, trans_batch_a), _operand(b, trans_b, trans_batch_b))
    if alpha != 1.0:
        y = y * y.dtype.type(alpha)
    return y


_MATMUL_TRAITS = Traits(static_shape=True)


@op("FusedMatMul", 1, domain=MS_DOMAIN, traits=_MATMUL_TRAITS)
def fused_matmul(
    a: np.ndarray,
    b: np.ndarray,
    *,
    alpha: float = 1.0,
    transA: int = 0,
    transB: int = 0,
    transBatchA: int = 0,
    transBatchB: int = 0,
) -> np.ndarray:
    """alpha * A' @ B' (numpy.matmul broadcasting), A' and B' transposed as asked."""
    return _fused_matmul(a, b, alpha, transA, transB, transBatchA, transBatchB)


@op("TransposeMatMul", 1, domain=MS_DOMAIN, traits=_MATMUL_TRAITS)
def transpose_matmul(
    a: np.ndarray, b: np.ndarray, *, alpha: float = 1.0, transA: int = 0, transB: int = 0
) -> np.ndarray:
    """alpha * A' @ B', the last two axes of A and B swapped as transA/transB ask."""
    return _fused_matmul(a, b, alpha, transA, transB)


# -- channels-last pooling ----------------------------------------------------------------------
@op("NhwcMaxPool", 1, domain=MS_DOMAIN, build=True, traits=Traits(selects=True))
def nhwc_max_pool(
    node: NodeContext,
    *,
    auto_pad: str = "NOTSET",
    ceil_mode: int = 0,
    dilations: list[int] | None = None,
    kernel_shape: list[int] | None = None,
    pads: list[int] | None = None,
    strides: list[int] | None = None,
) -> Callable[[np.ndarray], np.ndarray]:
    """MaxPool over a channels-last (N, D1, ..., C) tensor, giving channels-last."""
    pool = max_pool(
        node,
        auto_pad=auto_pad,
        ceil_mode=ceil_mode,
        dilations=dilations,
        kernel_shape=kernel_shape,
        pads=pads,
        strides=strides,
    )

    def run(x: np.ndarray) -> np.ndarray:
        if x.ndim < 3:
            raise ValueError(f"expected (N, D1, ..., C) with a spatial axis, found {x.shape}")
        first = np.moveaxis(x, -1, 1)
        return np.ascontiguousarray(np.moveaxis(pool(first), 1, -1))

    return run
