"""Operators given in Python per session: ``InferenceSession(model, custom_ops={...})`` (issue 32).

Each model is built here; the functions that must pickle or be imported back by an exported
module live in ``custom_op_fns``.
"""

from __future__ import annotations

import importlib.util
import pickle
from pathlib import Path
from typing import Any

import cloudpickle
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxflow
from custom_op_fns import CUSTOM_OPS, scale
from onnxflow.cli import main
from onnxflow.observers import Profiler, Trace
from onnxflow.ops.registry import REGISTRY
from onnxflow.traits import Traits

F, I64, B = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL
X = np.array([[1.0, -2.0, 3.0]], np.float32)


def _vi(name: str, elem: int, shape: Any) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem, shape)


def _model(nodes: list, inputs: list, outputs: list, inits: list | None = None, **kw: Any):
    graph = helper.make_graph(nodes, "g", inputs, outputs, inits or [], **kw)
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("com.example", 1)]
    return helper.make_model(graph, opset_imports=opsets)


def _scale_model(alpha: float = 2.0, declared: int = F) -> onnx.ModelProto:
    """y = Relu(Scale(x, alpha)), with Scale's output declared of type ``declared``."""
    nodes = [
        helper.make_node("Scale", ["x"], ["s"], domain="com.example", alpha=alpha, name="sc"),
        helper.make_node("Relu", ["s"], ["y"]),
    ]
    return _model(
        nodes, [_vi("x", F, [1, 3])], [_vi("y", F, [1, 3])], value_info=[_vi("s", declared, None)]
    )


def _want(x: np.ndarray, alpha: float = 2.0) -> np.ndarray:
    return np.maximum(x * np.float32(alpha) + 1, 0)


def test_a_custom_operator_runs_and_is_refused_without_it() -> None:
    model = _scale_model()
    with pytest.raises(onnxflow.UnsupportedOperatorError, match="com.example.Scale"):
        onnxflow.InferenceSession(model)
    sess = onnxflow.InferenceSession(model, custom_ops={"com.example.Scale": scale})
    (y,) = sess.run(None, {"x": X})
    np.testing.assert_array_equal(y, _want(X))


def test_a_bare_name_is_an_operator_of_the_default_domain() -> None:
    node = helper.make_node("Twice", ["x"], ["y"])
    model = _model([node], [_vi("x", F, [1, 3])], [_vi("y", F, [1, 3])])
    sess = onnxflow.InferenceSession(model, custom_ops={"Twice": lambda x: x * 2})
    np.testing.assert_array_equal(sess.run(None, {"x": X})[0], X * 2)


def test_each_session_has_its_own_functions_and_the_registry_is_untouched() -> None:
    model = _scale_model()
    one = onnxflow.InferenceSession(model, custom_ops={"com.example.Scale": scale})
    other = onnxflow.InferenceSession(
        model, custom_ops={"com.example.Scale": lambda x, alpha: x - np.float32(alpha)}
    )
    np.testing.assert_array_equal(one.run(None, {"x": X})[0], _want(X))
    np.testing.assert_array_equal(other.run(None, {"x": X})[0], np.maximum(X - 2, 0))
    assert REGISTRY.lookup("com.example", "Scale", 1) is None
    assert not REGISTRY.has_op("com.example", "Scale")


def _loop_model() -> onnx.ModelProto:
    """A Loop of 4 iterations: h = Scale(h + i) (alpha 0.5), the h of each iteration stacked."""
    body = helper.make_graph(
        [
            helper.make_node("Cast", ["i"], ["i_f"], to=F),
            helper.make_node("Add", ["h", "i_f"], ["hi"]),
            helper.make_node("Scale", ["hi"], ["h_out"], domain="com.example", alpha=0.5),
            helper.make_node("Identity", ["cond"], ["cond_out"]),
            helper.make_node("Identity", ["h_out"], ["row"]),
        ],
        "body",
        [_vi("i", I64, []), _vi("cond", B, []), _vi("h", F, [1, 3])],
        [_vi("cond_out", B, []), _vi("h_out", F, [1, 3]), _vi("row", F, [1, 3])],
    )
    loop = helper.make_node("Loop", ["n", "go", "x"], ["h", "rows"], body=body, name="L")
    n = numpy_helper.from_array(np.array(4, np.int64), "n")
    go = numpy_helper.from_array(np.array(True), "go")
    outs = [_vi("h", F, None), _vi("rows", F, None)]
    return _model([loop], [_vi("x", F, [1, 3])], outs, [n, go])


def _loop_want(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    rows, h = [], x
    for i in range(4):
        h = (h + np.float32(i)) * np.float32(0.5) + 1
        rows.append(h)
    return h, np.stack(rows)


def test_a_custom_operator_runs_inside_a_loop_body_observed_or_not() -> None:
    sess = onnxflow.InferenceSession(_loop_model(), custom_ops={"com.example.Scale": scale})
    want_h, want_rows = _loop_want(X)
    for _ in range(2):  # the second run goes through the generated whole-loop function
        h, rows = sess.run(None, {"x": X})
        np.testing.assert_allclose(h, want_h, rtol=1e-6)
        np.testing.assert_allclose(rows, want_rows, rtol=1e-6)
    trace = Trace()
    h, _ = sess.run(None, {"x": X}, observers=[trace])
    np.testing.assert_allclose(h, want_h, rtol=1e-6)
    assert trace.iterations_of("L") == [0, 1, 2, 3]


def test_a_custom_operator_runs_inside_scan_and_if_bodies() -> None:
    scan_body = helper.make_graph(
        [
            helper.make_node("Scale", ["s", "e"], ["s_out"], domain="com.example", alpha=1.0),
            helper.make_node("Identity", ["s_out"], ["y"]),
        ],
        "scan_body",
        [_vi("s", F, [3]), _vi("e", F, [3])],
        [_vi("s_out", F, [3]), _vi("y", F, [3])],
    )
    then = helper.make_graph(
        [helper.make_node("Scale", ["last"], ["t"], domain="com.example", alpha=3.0)],
        "then",
        [],
        [_vi("t", F, [3])],
    )
    other = helper.make_graph(
        [helper.make_node("Neg", ["last"], ["e"])], "else", [], [_vi("e", F, [3])]
    )
    nodes = [
        helper.make_node("Scan", ["s0", "xs"], ["last", "ys"], body=scan_body, num_scan_inputs=1),
        helper.make_node("If", ["c"], ["z"], then_branch=then, else_branch=other),
    ]
    model = _model(
        nodes,
        [_vi("s0", F, [3]), _vi("xs", F, [2, 3]), _vi("c", B, [])],
        [_vi("ys", F, None), _vi("z", F, None)],
    )

    def add_scaled(s: np.ndarray, e: np.ndarray | None = None, alpha: float = 1.0) -> np.ndarray:
        return (s * np.float32(alpha) + (e if e is not None else 0)).astype(np.float32)

    sess = onnxflow.InferenceSession(model, custom_ops={"com.example.Scale": add_scaled})
    s0, xs = np.ones(3, np.float32), np.arange(6, dtype=np.float32).reshape(2, 3)
    ys, z = sess.run(None, {"s0": s0, "xs": xs, "c": np.array(True)})
    np.testing.assert_array_equal(ys, np.stack([s0 + xs[0], s0 + xs[0] + xs[1]]))
    np.testing.assert_array_equal(z, ys[-1] * 3)
    (_, z) = sess.run(None, {"s0": s0, "xs": xs, "c": np.array(False)})
    np.testing.assert_array_equal(z, -ys[-1])


def _two_outputs(n_outputs: int = 2) -> onnx.ModelProto:
    outs = ["pos", "neg"][:n_outputs]
    node = helper.make_node("SplitSigns", ["x"], outs, domain="com.example", name="split")
    return _model([node], [_vi("x", F, [1, 3])], [_vi(o, F, [1, 3]) for o in outs])


def test_a_function_returns_a_tuple_for_several_outputs() -> None:
    sess = onnxflow.InferenceSession(_two_outputs(), custom_ops=CUSTOM_OPS)
    pos, neg = sess.run(None, {"x": X})
    np.testing.assert_array_equal(pos, np.maximum(X, 0))
    np.testing.assert_array_equal(neg, np.minimum(X, 0))


def test_a_wrong_count_of_outputs_names_the_node_and_both_counts() -> None:
    sess = onnxflow.InferenceSession(_two_outputs(1), custom_ops=CUSTOM_OPS)
    with pytest.raises(onnxflow.RuntimeFailure) as info:
        sess.run(None, {"x": X})
    message = str(info.value)
    assert "com.example.SplitSigns 'split'" in message
    assert "returned a tuple of 2; the node lists 1 output(s) ['pos']" in message
    sess = onnxflow.InferenceSession(_two_outputs(), custom_ops={"com.example.SplitSigns": abs})
    with pytest.raises(onnxflow.RuntimeFailure, match="returned one value; the node lists 2"):
        sess.run(None, {"x": X})


def test_a_dtype_the_model_contradicts_names_the_output_and_both_types() -> None:
    sess = onnxflow.InferenceSession(
        _scale_model(), custom_ops={"com.example.Scale": lambda x, alpha: x.astype(np.float64)}
    )
    with pytest.raises(onnxflow.RuntimeFailure) as info:
        sess.run(None, {"x": X})
    message = str(info.value)
    assert "com.example.Scale 'sc'" in message and "custom_ops['com.example.Scale']" in message
    assert "output 0 's' is declared float32, the function returned float64" in message


def test_an_error_inside_the_function_names_node_op_function_and_iteration() -> None:
    def failing(x: np.ndarray, alpha: float) -> np.ndarray:
        raise ValueError("no such thing")

    sess = onnxflow.InferenceSession(_scale_model(), custom_ops={"com.example.Scale": failing})
    with pytest.raises(onnxflow.RuntimeFailure) as info:
        sess.run(None, {"x": X})
    message = str(info.value)
    assert "com.example.Scale 'sc'" in message
    assert "the function test_custom_ops." in message and "failing raised ValueError" in message
    assert isinstance(info.value.__cause__, ValueError)
    sess = onnxflow.InferenceSession(_loop_model(), custom_ops={"com.example.Scale": failing})
    with pytest.raises(onnxflow.RuntimeFailure, match=r"Loop 'L'.*iteration 0.*no such thing"):
        sess.run(None, {"x": X})


@pytest.mark.parametrize(
    ("key", "value", "match"),
    [
        ("Relu", np.abs, "onnxflow has a kernel for Relu of 'ai.onnx'"),
        ("com.example.Scale", 3, "must be a function or"),
        ("com.example.Scale", (scale, Traits(ufunc=np.add)), "declares ufunc"),
        ("com.example.Scale", (scale, "pure"), "must be an onnxflow.traits.Traits"),
        ("com.example.", scale, "a key is 'domain.OpType'"),
    ],
)
def test_a_bad_custom_op_is_refused_by_name(key: str, value: Any, match: str) -> None:
    with pytest.raises(onnxflow.InputError, match=match):
        onnxflow.InferenceSession(_scale_model(), custom_ops={key: value})


def test_a_pure_function_of_constants_runs_at_load_and_an_impure_one_every_run() -> None:
    calls: list[int] = []

    def counted(x: np.ndarray, alpha: float) -> np.ndarray:
        calls.append(1)
        return scale(x, alpha)

    const = numpy_helper.from_array(X, "c")
    nodes = [
        helper.make_node("Scale", ["c"], ["s"], domain="com.example", alpha=2.0),
        helper.make_node("Add", ["s", "x"], ["y"]),
    ]
    model = _model(nodes, [_vi("x", F, [1, 3])], [_vi("y", F, [1, 3])], [const])
    for traits, per_run in ((Traits(), 0), (Traits(pure=False), 1)):
        calls.clear()
        sess = onnxflow.InferenceSession(model, custom_ops={"com.example.Scale": (counted, traits)})
        at_load = len(calls)
        for _ in range(3):
            np.testing.assert_array_equal(sess.run(None, {"x": X})[0], scale(X, 2.0) + X)
        assert len(calls) - at_load == 3 * per_run


def test_a_session_pickles_with_its_functions() -> None:
    sess = onnxflow.InferenceSession(_loop_model(), custom_ops={"com.example.Scale": scale})
    again = pickle.loads(pickle.dumps(sess))
    np.testing.assert_array_equal(again.run(None, {"x": X})[1], sess.run(None, {"x": X})[1])
    shifted = onnxflow.InferenceSession(
        _scale_model(), custom_ops={"com.example.Scale": lambda x, alpha: x + np.float32(alpha)}
    )
    with pytest.raises((pickle.PicklingError, AttributeError)):  # a lambda: not with pickle
        pickle.dumps(shifted)
    again = cloudpickle.loads(cloudpickle.dumps(shifted))  # as Dask and Ray ship it
    np.testing.assert_array_equal(again.run(None, {"x": X})[0], np.maximum(X + 2, 0))


def test_compare_runs_the_functions_on_both_sides() -> None:
    model = _loop_model()
    report = onnxflow.compare(model, {"x": X}, "reference", custom_ops=CUSTOM_OPS)
    assert report.agree, report.summary()
    report = onnxflow.compare(model, {"x": X}, model, custom_ops=CUSTOM_OPS)
    assert report.agree, report.summary()
    with pytest.raises(onnxflow.OnnxflowError, match="onnxruntime cannot call the Python"):
        onnxflow.compare(model, {"x": X}, "onnxruntime", custom_ops=CUSTOM_OPS)


def test_the_profiler_times_a_custom_operator() -> None:
    sess = onnxflow.InferenceSession(_scale_model(), custom_ops=CUSTOM_OPS)
    profiler = Profiler()
    sess.run(None, {"x": X}, observers=[profiler])
    assert "Scale" in profiler.report(10)


def _import(path: Path) -> Any:
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


def test_an_exported_module_calls_the_users_functions(tmp_path: Path) -> None:
    model = _loop_model()
    sess = onnxflow.InferenceSession(model, custom_ops=CUSTOM_OPS)
    path = onnxflow.export_python(model, tmp_path / "looped.py", custom_ops=CUSTOM_OPS)
    text = path.read_text()
    assert "custom_ops['com.example.Scale'](hi, alpha=0.5)" in text
    assert "'com.example.Scale': ('custom_op_fns', 'scale')" in text
    module = _import(path)
    want = sess.run(None, {"x": X})
    for got in (module.run({"x": X}), module.run({"x": X}, {"com.example.Scale": scale})):
        for a, b in zip(got, want, strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-6)
    with pytest.raises(onnxflow.UnsupportedOperatorError, match="Scale"):
        onnxflow.export_python(model, tmp_path / "without.py")


def test_an_exported_module_asks_for_a_function_it_cannot_import(tmp_path: Path) -> None:
    shift = {"com.example.Scale": lambda x, alpha: x + np.float32(alpha)}
    path = onnxflow.export_python(_scale_model(), tmp_path / "shifted.py", custom_ops=shift)
    module = _import(path)
    with pytest.raises(KeyError, match=r"run\(feeds, custom_ops=\{'com.example.Scale': fn\}\)"):
        module.run({"x": X})
    np.testing.assert_array_equal(module.run({"x": X}, shift)[0], np.maximum(X + 2, 0))


@pytest.fixture
def saved(tmp_path: Path) -> Path:
    path = tmp_path / "looped.onnx"
    onnx.save(_loop_model(), path)
    return path


def test_cli_check_lists_the_operator_as_provided_by_the_user(
    saved: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["check", str(saved)]) == 1
    assert "com.example.Scale" in capsys.readouterr().out
    assert main(["check", str(saved), "--custom-ops", "custom_op_fns:CUSTOM_OPS"]) == 0
    out = capsys.readouterr().out
    assert (
        "com.example.Scale: 1 (opset 1) -> provided by the user: custom_op_fns.scale "
        "(custom_ops['com.example.Scale'])" in out
    )
    assert "problems found: none" in out


def test_cli_commands_take_custom_ops(
    saved: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    given = ["--custom-ops", "custom_op_fns:CUSTOM_OPS"]
    assert main(["run", str(saved), *given]) == 0
    assert main(["profile", str(saved), *given, "--bodies"]) == 0
    assert "Scale" in capsys.readouterr().out
    assert main(["code", str(saved), *given]) == 0
    assert "h_out = Scale(hi)" in capsys.readouterr().out
    assert main(["compare", str(saved), "--against", "reference", *given]) == 0
    assert main(["export-python", str(saved), "-o", str(tmp_path / "m.py"), *given]) == 0
    script = tmp_path / "ops.py"
    script.write_text("import numpy as np\nOPS = {'com.example.Scale': lambda x, alpha: x}\n")
    assert main(["run", str(saved), "--custom-ops", f"{script}:OPS"]) == 0
    capsys.readouterr()
    with pytest.raises(SystemExit):
        main(["run", str(saved), "--custom-ops", "custom_op_fns:NOPE"])
    assert "has no dict 'NOPE'" in capsys.readouterr().err


@pytest.mark.parametrize("rounding", ["each_op", "outputs"])
def test_a_float16_model_checks_the_types_it_declares_not_the_passes(rounding: str) -> None:
    """The float16 pass holds float16 values in float32 and retypes the graph so; a function
    returning the float16 the model declares is right."""
    H = TensorProto.FLOAT16
    nodes = [
        helper.make_node("Add", ["x", "x"], ["a"]),
        helper.make_node("Scale", ["a"], ["s"], domain="com.example", alpha=2.0),
        helper.make_node("Mul", ["s", "x"], ["y"]),
    ]
    model = _model(nodes, [_vi("x", H, [3])], [_vi("y", H, [3])], value_info=[_vi("s", H, None)])
    options = onnxflow.SessionOptions(float16_rounding=rounding)
    half = {"com.example.Scale": lambda a, alpha: (a * alpha).astype(np.float16)}
    x = np.array([1, 2, 3], np.float16)
    (y,) = onnxflow.InferenceSession(model, options, custom_ops=half).run(None, {"x": x})
    assert y.dtype == np.float16
    np.testing.assert_array_equal(y, (x + x) * 2 * x)
