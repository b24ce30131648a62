"""What a kernel promises is declared on its registration, and what reads it reads only that."""

from __future__ import annotations

import functools

import numpy as np
from onnx import TensorProto, helper

import onnxflow
from onnxflow.compile.passes.hoist import split_body
from onnxflow.export import support
from onnxflow.ops import load_all, numpy_forms
from onnxflow.ops.registry import REGISTRY
from onnxflow.traits import Traits, bind_attributes

F = TensorProto.FLOAT

#: The function attributes kernels used to carry before traits lived on the registration.
_OLD_ATTRIBUTES = (
    "inline_ufunc",
    "broadcast_ufunc",
    "inline_call",
    "inline_guard",
    "fresh",
    "in_place",
    "static_shape",
)


def test_relus_registration_says_what_the_code_generator_assumes() -> None:
    load_all()
    relu = REGISTRY.lookup("", "Relu", 14)
    assert relu is not None
    traits = relu.traits
    assert traits.fresh and traits.static_shape and traits.elementwise and traits.pure
    x = np.array([-1.0, 2.0], np.float32)
    assert traits.in_place(x) is x  # type: ignore[misc]
    np.testing.assert_array_equal(x, [0.0, 2.0])


def test_no_kernel_carries_promises_as_function_attributes() -> None:
    load_all()
    carrying = [
        f"{k.domain or 'ai.onnx'}.{k.op_type}-{k.since}"
        for k in REGISTRY.all()
        if any(hasattr(k.fn, name) for name in _OLD_ATTRIBUTES)
    ]
    assert carrying == []


def test_a_built_kernel_refines_its_registration() -> None:
    """MatMul of two matrices (static types say so) is np.dot behind a rank guard."""
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["a", "b"], ["y"])],
        "g",
        [
            helper.make_tensor_value_info("a", F, [2, 3]),
            helper.make_tensor_value_info("b", F, [3, 4]),
        ],
        [helper.make_tensor_value_info("y", F, [2, 4])],
    )
    sess = onnxflow.InferenceSession(
        helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    )
    (traits,) = sess.plan.traits
    assert traits.call is np.dot and traits.guard is not None
    assert traits.fresh and traits.rows is not None  # kept from the registration


def test_plain_kernels_get_their_attributes_bound_into_the_in_place_form() -> None:
    def over(x: np.ndarray, *, k: int = 1) -> np.ndarray:
        x += k
        return x

    bound = bind_attributes(Traits(in_place=over), {"k": 5})
    assert isinstance(bound.in_place, functools.partial)
    assert bound.in_place(np.zeros(2))[0] == 5
    assert bind_attributes(Traits(), {"k": 5}) == Traits()


def test_hoisting_batches_any_kernel_declared_elementwise() -> None:
    """Acos was never on a list of op names: its registration's ``elementwise`` is what lets
    a Scan run it over the whole sequence at once."""
    load_all()
    assert REGISTRY.lookup("", "Acos", 22).traits.elementwise  # type: ignore[union-attr]
    body = helper.make_graph(
        [helper.make_node("Acos", ["x"], ["y"]), helper.make_node("Add", ["s", "y"], ["s2"])],
        "body",
        [helper.make_tensor_value_info("s", F, [3]), helper.make_tensor_value_info("x", F, [3])],
        [helper.make_tensor_value_info("s2", F, [3])],
    )
    split = split_body(body, ["x"], lambda name: 1, 22, REGISTRY)
    assert split is not None and split.batched == ("y",)


def test_random_kernels_are_never_moved_out_of_a_body() -> None:
    load_all()
    assert not REGISTRY.lookup("", "RandomUniformLike", 22).traits.pure  # type: ignore[union-attr]
    body = helper.make_graph(
        [
            helper.make_node("RandomUniformLike", ["w"], ["r"]),
            helper.make_node("Add", ["s", "r"], ["s2"]),
        ],
        "body",
        [helper.make_tensor_value_info("s", F, [3]), helper.make_tensor_value_info("x", F, [3])],
        [helper.make_tensor_value_info("s2", F, [3])],
    )
    assert split_body(body, ["x"], lambda name: 1, 22, REGISTRY) is None


def _kernels_with_a_numpy_form() -> list:
    load_all()
    return [k for k in REGISTRY.all() if isinstance(k.traits.numpy, str)]


def _inputs(op_type: str, shapes: tuple, dtype: type, rng: np.random.Generator) -> list:
    """Inputs of ``shapes``: no zero divisor for Div, a boolean condition for Where, small
    powers of positive numbers for Pow."""
    ins = [rng.standard_normal(s).astype(dtype) * 3 for s in shapes]
    if op_type == "Div":
        ins[1] = np.where(ins[1] == 0, 1, ins[1]).astype(dtype)
    if op_type == "Where":
        ins[0] = ins[0] > 0
    if op_type == "Pow":  # a positive base; integer exponents from -2 to 3 (4 for a scalar)
        ins[0] = (np.abs(ins[0]) + 1).astype(dtype)
        ins[1] = (np.round(ins[1]) % 6 - 2).astype(dtype) if ins[1].ndim else np.array(4, dtype)
    return ins


def test_every_declared_numpy_form_gives_the_kernels_values() -> None:
    """A kernel's ``numpy`` form written as a format string (what export-python writes, with
    :mod:`onnxflow.ops.numpy_forms` copied in) equals running the kernel, on inputs of several
    ranks and types, for every version that declares one. The forms written by a function of
    the node are compared on the whole node suite (tests/conformance/test_exported_modules.py)."""
    kernels = _kernels_with_a_numpy_form()
    assert {k.op_type for k in kernels} >= {"MatMul", "Relu", "Div", "Where"}
    rng = np.random.default_rng(0)
    pairs = [((3, 4), (3, 4)), ((2, 3, 4), (4,)), ((), (3,))]
    shapes = {
        "MatMul": [((3, 4), (4, 5)), ((2, 3, 4), (4, 5)), ((4,), (4, 2)), ((4,), (4,))],
        "Relu": [((3, 4),), ((),)],
        "Sigmoid": [((3, 4),), ((),)],
        "HardSwish": [((3, 4),), ((),)],
        "Erf": [((3, 4),), ((),)],
        "GlobalAveragePool": [((2, 3, 4, 5),), ((1, 2, 3),)],
        "GlobalMaxPool": [((2, 3, 4, 5),), ((1, 2, 3),)],
        "Div": pairs,
        "Pow": pairs,
        "Where": [((3, 4), (3, 4), (4,)), ((), (2, 3), ())],
        "Expand": [],  # its second input is a shape: the node suite's cases compare it
    }
    for kernel in kernels:
        floats_only = kernel.op_type in ("Sigmoid", "HardSwish", "Erf")  # float operators
        for dtype in (
            (np.float32, np.float64) if floats_only else (np.float32, np.float64, np.int32)
        ):
            for shape in shapes[kernel.op_type]:
                ins = _inputs(kernel.op_type, shape, dtype, rng)
                if kernel.build:
                    got = support.kernel("", kernel.op_type, kernel.since)(*ins)
                else:
                    got = kernel.fn(*ins)
                form = kernel.traits.numpy.format(*(f"ins[{i}]" for i in range(len(ins))))
                scope = {**vars(numpy_forms), "np": np, "ins": ins}
                expected = eval(form, scope)  # the exported module's text
                np.testing.assert_array_equal(got, expected, err_msg=f"{kernel.op_type} {shape}")
                assert np.asarray(got).dtype == np.asarray(expected).dtype
