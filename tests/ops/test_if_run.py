"""If's run cost: a scalar condition read without a helper call, the branch's captured values
picked by a slice or one itemgetter; the results are those of the branch, whichever values of
the node's captures each branch reads (all, some, none, out of order)."""

from __future__ import annotations

import sys

import numpy as np
import pytest
from onnx import TensorProto, helper

import onnxflow

#: Python-level calls an If of a one-node branch makes per run: its own run, the runner lookup
#: (which reads whether an observer or RunOptions watches from their ContextVars: no call), the
#: lowered function's failure-naming wrapper, the generated branch function and the branch's
#: kernel (Sum's).
IF_CALLS = 6


def _branch(name: str, op: str, sources: list[str]) -> object:
    """A branch of one ``op`` node over outer-scope values ``sources``."""
    node = helper.make_node(op, sources, [f"{name}_y"])
    out = helper.make_tensor_value_info(f"{name}_y", TensorProto.FLOAT, None)
    return helper.make_graph([node], name, [], [out])


def _model(then: tuple[str, list[str]], other: tuple[str, list[str]], ifs: int = 1) -> bytes:
    """``ifs`` If nodes on condition ``c``, each's branches (op, outer values read) over x, y and
    z; the outputs summed into ``out``."""
    nodes, outs = [], []
    for i in range(ifs):
        nodes.append(
            helper.make_node(
                "If",
                ["c"],
                [f"r{i}"],
                then_branch=_branch(f"t{i}", *then),
                else_branch=_branch(f"e{i}", *other),
            )
        )
        outs.append(f"r{i}")
    nodes.append(helper.make_node("Sum", outs, ["out"]))
    inputs = [helper.make_tensor_value_info("c", TensorProto.BOOL, None)] + [
        helper.make_tensor_value_info(n, TensorProto.FLOAT, [3]) for n in "xyz"
    ]
    out = helper.make_tensor_value_info("out", TensorProto.FLOAT, [3])
    graph = helper.make_graph(nodes, "g", inputs, [out])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


FEEDS = {n: np.arange(3, dtype=np.float32) * (i + 2) - 3 for i, n in enumerate("xyz")}


@pytest.mark.parametrize(
    "then, other, want_then, want_else",
    [
        (("Sum", ["x", "y"]), ("Sum", ["x", "y"]), "x + y", "x + y"),  # all, in order
        (("Sum", ["x", "y"]), ("Neg", ["y"]), "x + y", "-y"),  # one, not the first
        (("Sub", ["z", "x"]), ("Sub", ["y", "x"]), "z - x", "y - x"),  # out of order
        (("Sum", ["x", "z"]), ("Abs", ["y"]), "x + z", "abs(y)"),  # a gap between them
        (("Sum", ["x", "y", "z"]), ("Neg", ["z"]), "x + y + z", "-z"),  # the last
    ],
)
@pytest.mark.parametrize("cond_shape", [(), (1,), (1, 1)])
def test_branch_reads_its_captures(then, other, want_then, want_else, cond_shape):
    """Each branch gets the outer values it reads, for a scalar condition and one-element ones."""
    sess = onnxflow.InferenceSession(_model(then, other))
    names = {"abs": np.abs, **FEEDS}
    for cond, want in ((True, want_then), (False, want_else)):
        feeds = {"c": np.full(cond_shape, cond), **FEEDS}
        np.testing.assert_array_equal(sess.run(None, feeds)[0], eval(want, names))


def test_condition_of_several_elements_is_named():
    """A condition of more than one element is refused, naming the node's condition."""
    sess = onnxflow.InferenceSession(_model(("Neg", ["x"]), ("Abs", ["x"])))
    with pytest.raises(Exception, match="condition must hold exactly one element"):
        sess.run(None, {"c": np.array([True, False]), **FEEDS})


def _python_calls(sess: onnxflow.InferenceSession, feeds: dict) -> int:
    """How many Python functions one run of ``sess`` calls."""
    sess.run(None, feeds)
    count = [0]

    def profile(frame, event, arg):  # type: ignore[no-untyped-def]
        count[0] += event == "call"

    sys.setprofile(profile)
    try:
        sess.run(None, feeds)
    finally:
        sys.setprofile(None)
    return count[0]


@pytest.mark.parametrize("then, other", [(["x"], ["x"]), (["y"], ["x", "z"]), (["z", "x"], ["y"])])
@pytest.mark.parametrize("cond_shape", [(), (1,), (1, 1)])
def test_if_run_makes_few_python_calls(then, other, cond_shape):
    """Ten more If nodes (one-node branches) cost at most IF_CALLS Python calls each per run:
    no call to read a condition of one element (a scalar, or the [1] an exported Equal of
    shapes gives) or to pick the branch's captured values."""
    few, many = (_model(("Sum", then), ("Sum", other), ifs=n) for n in (2, 12))
    feeds = {"c": np.full(cond_shape, True), **FEEDS}
    extra = _python_calls(onnxflow.InferenceSession(many), feeds) - _python_calls(
        onnxflow.InferenceSession(few), feeds
    )
    assert extra <= 10 * IF_CALLS, extra
