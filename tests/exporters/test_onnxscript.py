"""Models written in onnxscript run in onnxflow and give onnxscript's own (eager) answers.

onnxscript translates Python control flow into ONNX: a ``for`` over ``range`` becomes Loop with
a trip count (``if stop: break`` becomes the body's condition output), a ``while`` becomes Loop
with no trip count, an ``if`` on a tensor becomes If, and a script function called from another
becomes a model-local function. Called eagerly, the same function runs as Python, its ops
evaluated one by one: that is the expected answer.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import onnx
import pytest

import onnxflow
from onnxflow.cli import count_ops

onnxscript = pytest.importorskip("onnxscript", reason="onnxscript is a test dependency")
from onnxscript import FLOAT, INT64, script, values  # noqa: E402

OPSETS = [13, 18, 23]


def _build(version: int) -> SimpleNamespace:
    """The test's script functions, written against ai.onnx opset ``version``."""
    op = getattr(onnxscript, f"opset{version}")
    local = values.Opset("this.local", 1)

    @script(default_opset=op)
    def prefix_sum_until(x: FLOAT[None], limit: FLOAT) -> FLOAT:
        """Sum x's elements in order, stopping after the first partial sum above limit."""
        total = op.Constant(value_float=0.0)
        for i in range(op.Size(x)):
            total = total + op.Gather(x, i)
            stop = total > limit
            if stop:
                break
        return total

    @script(default_opset=op)
    def collatz_steps(x: INT64) -> INT64:
        """Steps of the Collatz map from x (positive) down to 1."""
        one = op.Constant(value_int=1)
        two = op.Constant(value_int=2)
        steps = op.Constant(value_int=0)
        going = x > one
        while going:
            even = op.Mod(x, two) == op.Constant(value_int=0)
            if even:  # noqa: SIM108 (onnxscript makes If of statements, not of expressions)
                x = x / two
            else:
                x = op.Constant(value_int=3) * x + one
            steps = steps + one
            going = x > one
        return steps

    @script(local, default_opset=op)
    def damped_power_sum(x, n: INT64, damping: float = 0.5):
        """sum_{k=1..n} (damping x)^k; negated and damped once more if its total is negative."""
        acc = op.Mul(x, op.Constant(value_float=0.0))
        term = acc + op.Constant(value_float=1.0)
        for _ in range(n):
            factor = op.Constant(value_float=damping)
            term = term * x * factor
            acc = acc + term
        positive = op.ReduceSum(acc) > op.Constant(value_float=0.0)
        if positive:  # noqa: SIM108
            result = op.Identity(acc)
        else:
            result = op.Neg(acc) * op.Constant(value_float=damping)
        return result

    @script(default_opset=op)
    def two_power_sums(x: FLOAT[3], n: INT64) -> FLOAT[3]:
        """Call the model-local function twice: once with its attribute set, once defaulted."""
        y = damped_power_sum(x, n, damping=0.25)
        return op.Relu(y) + damped_power_sum(y, n)

    return SimpleNamespace(
        prefix_sum_until=prefix_sum_until,
        collatz_steps=collatz_steps,
        two_power_sums=two_power_sums,
    )


def _float(*xs: float) -> np.ndarray:
    return np.array(xs if len(xs) != 1 else xs[0], dtype=np.float32)


X = _float(1.0, 2.0, 3.0, 4.0, 5.0)
# onnxscript turns `for ... range(n)` with `if stop: break` into Loop(M=n, cond="") whose body
# returns `not stop`: it counts on the runtime honouring the body's condition when only M is
# given, as onnxruntime and onnxscript's eager mode do. The spec's table says that condition is
# "ignored" in this mode; onnxflow follows the table by default and warns, and runs such models
# as their authors meant with SessionOptions(loop_condition="always"), which these tests use.
ONNXSCRIPT_LOOPS = onnxflow.SessionOptions(loop_condition="always")
CASES = {
    "prefix_sum_until": [
        ("breaks_midway", [X, _float(4.5)], 6.0),
        ("breaks_on_first", [X, _float(-1.0)], 1.0),
        ("runs_to_the_end", [X, _float(100.0)], 15.0),
        ("zero_iterations", [np.zeros(0, np.float32), _float(0.0)], 0.0),
    ],
    "collatz_steps": [
        ("long_run", [np.array(27)], 111),
        ("no_iteration", [np.array(1)], 0),
        ("powers_of_two", [np.array(64)], 6),
    ],
    "two_power_sums": [
        ("mixed_signs", [_float(0.5, -1.5, 2.0), np.array(3)], None),
        ("negative_total", [_float(-3.0, -1.0, 0.5), np.array(4)], None),
        ("zero_iterations", [_float(0.5, -1.5, 2.0), np.array(0)], None),
    ],
}
CONTROL_FLOW = {
    "prefix_sum_until": {"Loop": 1},
    "collatz_steps": {"Loop": 1, "If": 1},
    "two_power_sums": {"this.local.damped_power_sum": 2},
}


@pytest.fixture(scope="module", params=OPSETS, ids=[f"opset{v}" for v in OPSETS])
def functions(request: pytest.FixtureRequest) -> tuple[int, SimpleNamespace]:
    return request.param, _build(request.param)


@pytest.mark.parametrize(
    ("function", "inputs", "known"),
    [
        pytest.param(name, case[1], case[2], id=f"{name}-{case[0]}", marks=case[3:])
        for name, cases in CASES.items()
        for case in cases
    ],
)
def test_script_function_matches_eager(
    functions: tuple[int, SimpleNamespace], function: str, inputs: list, known: float | None
) -> None:
    version, namespace = functions
    fn = getattr(namespace, function)
    model = fn.to_model_proto()
    assert {o.domain: o.version for o in model.opset_import}[""] == version
    counts = count_ops(model.graph)
    for op_type, count in CONTROL_FLOW[function].items():
        assert counts[op_type] == count, f"{function} should hold {count} {op_type}"

    sess = onnxflow.InferenceSession(model, ONNXSCRIPT_LOOPS)
    names = [a.name for a in sess.get_inputs()]
    (found,) = sess.run(None, dict(zip(names, inputs, strict=True)))
    expected = np.asarray(fn(*inputs))
    assert found.dtype == expected.dtype and found.shape == expected.shape
    np.testing.assert_allclose(found, expected, rtol=1e-6, atol=1e-6)
    if known is not None:
        np.testing.assert_allclose(found, known)


def test_spec_mode_warns_and_ignores_the_break() -> None:
    model = _build(18).prefix_sum_until.to_model_proto()
    with pytest.warns(onnxflow.OnnxflowWarning, match="loop_condition='always'"):
        sess = onnxflow.InferenceSession(model)
    names = [a.name for a in sess.get_inputs()]
    (found,) = sess.run(None, dict(zip(names, [X, _float(4.5)], strict=True)))
    assert found == 15.0  # all five iterations, as the Loop table says for (M, "")


def test_local_function_holds_loop_and_if_reading_its_attribute() -> None:
    model = _build(18).two_power_sums.to_model_proto()
    (function,) = model.functions
    assert (function.domain, function.name) == ("this.local", "damped_power_sum")
    assert [(a.name, a.f) for a in function.attribute_proto] == [("damping", 0.5)]
    counts = count_ops(onnx.GraphProto(node=function.node))
    assert (counts["Loop"], counts["If"]) == (1, 1)
    calls = [n for n in model.graph.node if n.domain == "this.local"]
    assert [[(a.name, a.f) for a in n.attribute] for n in calls] == [[("damping", 0.25)], []]
