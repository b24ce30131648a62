"""onnxflow compare (issue 21): the first divergence between two runs, bodies included."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import parser

import onnxflow
from onnxflow import InferenceSession
from onnxflow.cli import main

ROOT = Path(__file__).parent.parent
EXAMPLES = sorted((ROOT / "examples").glob("*.onnx"))
EXPORTED = ROOT / "tests" / "exporters" / "data"


def _loop_model(body_op: str) -> onnx.ModelProto:
    """A Loop of 3 iterations whose body computes y = x + 1 then ``body_op``(y, x)."""
    return parser.parse_model(
        f"""
        <ir_version: 8, opset_import: ["": 17]>
        g (float[2] x0) => (float[2] x_final, float[N, 2] ys) {{
            m = Constant <value = int64 {{3}}> ()
            x_final, ys = Loop <body = body (int64 i, bool c, float[2] x) =>
                                         (bool c_out, float[2] x_out, float[2] y) {{
                one = Constant <value = float {{1.0}}> ()
                y = Add (x, one)
                x_out = {body_op} (y, x)
                c_out = Identity (c)
            }}> (m, , x0)
        }}
        """
    )


def _named(model: onnx.ModelProto) -> onnx.ModelProto:
    model.graph.node[1].name = "L"
    return model


def test_one_node_differs_in_a_loop_body_names_it_at_iteration_0(tmp_path: Path) -> None:
    ours, other = _named(_loop_model("Mul")), _named(_loop_model("Sub"))
    x0 = {"x0": np.array([1.0, 2.0], np.float32)}
    report = onnxflow.compare(ours, x0, against=other)
    div = report.first_divergence
    assert not report.agree and div is not None
    assert (div.node, div.op_type, div.output) == ("x_out", "Mul", "x_out")
    assert div.graph_path == ["L", "body"] and div.iteration == [0]
    assert div.agreeing_inputs == ["y", "x"]
    assert div.max_abs_err == pytest.approx(5.0)  # y = [2, 3]: y * x = [2, 6], y - x = [1, 1]


def test_trip_count_with_body_condition_against_onnxruntime_explains_the_counts() -> None:
    model = parser.parse_model(
        """
        <ir_version: 8, opset_import: ["": 17]>
        g (float x0) => (float x_final) {
            m = Constant <value = int64 {5}> ()
            x_final = Loop <body = body (int64 i, bool c, float x) => (bool c_out, float x_out) {
                one = Constant <value = float {1.0}> ()
                x_out = Add (x, one)
                three = Constant <value = float {3.0}> ()
                c_out = Less (x_out, three)
            }> (m, , x0)
        }
        """
    )
    model.graph.node[1].name = "L"
    with pytest.warns(onnxflow.OnnxflowWarning, match="cond is omitted"):
        report = onnxflow.compare(model, {"x0": np.array(0.0, np.float32)}, against="onnxruntime")
    assert not report.agree
    (count,) = report.iteration_counts
    assert (count["node"], count["ours"], count["theirs"]) == ("L", 5, 3)
    assert "Loop 'L': onnxflow ran 5 iterations, onnxruntime 3" in count["note"]
    assert "spec's Loop table" in count["note"] and "loop_condition='always'" in count["note"]
    assert "spec's Loop table" in report.summary()
    div = report.first_divergence
    assert div is not None and (div.node, div.iteration) == ("L", [])


def _add_to_sub(path: Path) -> tuple[Path, Path]:
    text = """
        <ir_version: 8, opset_import: ["": 17]>
        g (float[3] a, float[3] b) => (float[3] z) {
            s = Mul (a, b)
            t = OP (s, a)
            z = Relu (t)
        }
        """
    ours, other = path / "ours.onnx", path / "other.onnx"
    onnx.save(parser.parse_model(text.replace("OP", "Add")), ours)
    onnx.save(parser.parse_model(text.replace("OP", "Sub")), other)
    return ours, other


def test_main_graph_divergence_names_the_node_and_its_agreeing_inputs(tmp_path: Path) -> None:
    ours, other = _add_to_sub(tmp_path)
    feeds = {"a": np.array([1, 2, 3], np.float32), "b": np.array([4, 5, 6], np.float32)}
    report = onnxflow.compare(str(ours), feeds, against=str(other))
    div = report.first_divergence
    assert div is not None
    assert (div.node, div.op_type, div.graph_path, div.iteration) == ("t", "Add", [], [])
    assert div.agreeing_inputs == ["s", "a"]
    assert div.ours.shape == [3] and div.ours.dtype == "float32" and div.ours.max == 21.0
    assert "first divergence: Add 't' at main graph" in report.summary()


def test_cli_json_report_fields_and_exit_codes(tmp_path: Path) -> None:
    ours, other = _add_to_sub(tmp_path)
    out = tmp_path / "report.json"
    assert main(["compare", str(ours), "--against", str(other), "--json", str(out)]) == 1
    data = json.loads(out.read_text())
    assert data["agree"] is False
    div = data["first_divergence"]
    types = {"node": str, "op_type": str, "graph_path": list, "iteration": list, "output": str}
    for key, kind in {**types, "max_abs_err": float, "max_rel_err": float}.items():
        assert isinstance(div[key], kind), key
    assert set(div["ours"]) == {"shape", "dtype", "min", "max", "mean", "nan", "inf"}
    assert main(["compare", str(ours), "--against", str(ours)]) == 0
    assert main(["compare", str(tmp_path / "missing.onnx")]) == 2


@pytest.mark.parametrize("against", ["onnxruntime", "reference"])
@pytest.mark.parametrize("model", EXAMPLES, ids=lambda p: p.stem)
def test_examples_agree(model: Path, against: str, capsys: pytest.CaptureFixture[str]) -> None:
    dims = ["--dim", "B=2", "--dim", "S=3"] if model.stem == "rnn_scan" else []
    assert main(["compare", str(model), "--against", against, *dims]) == 0
    assert "agree" in capsys.readouterr().out


@pytest.mark.parametrize("against", ["onnxruntime", "reference"])
@pytest.mark.parametrize(
    "name",
    [
        "scripted_loops_torchscript_opset13",
        "scan_rnn_cell_dynamo_default",
        "gru_dynamo_default",
        "while_counter_dynamo_default",  # onnx.reference stacks its 2-d body values flat
    ],
)
def test_exported_models_agree(name: str, against: str) -> None:
    model = onnx.load(EXPORTED / f"{name}.onnx")
    data = np.load(EXPORTED / f"{name}.npz")
    names = [i.name for i in model.graph.input]
    feeds = {n: data[f"in0_{k}"] for k, n in enumerate(names) if f"in0_{k}" in data}
    report = onnxflow.compare(model, feeds, against=against)
    assert report.agree, report.summary()
    assert report.compared > 0


def _nested(inner_op: str = "Add") -> onnx.ModelProto:
    """Loop 'outer' (n iterations, state x): y = If 'choose' (i even) x * 2 else x + 1, then
    Loop 'inner' (2 iterations) applies ``inner_op``(s, 1) to y."""
    return parser.parse_model(
        f"""
        <ir_version: 8, opset_import: ["": 17]>
        g (int64 n, float[2] x0) => (float[2] x_final, float[N, 2] ys) {{
            x_final, ys = Loop <body = outer_body (int64 i, bool c, float[2] x) =>
                                               (bool c_out, float[2] z, float[2] y) {{
                two = Constant <value = int64 {{2}}> ()
                zero = Constant <value = int64 {{0}}> ()
                m = Mod (i, two)
                even = Equal (m, zero)
                y = If <then_branch = then () => (float[2] rt) {{
                            k2 = Constant <value = float {{2.0}}> ()
                            rt = Mul (x, k2)
                        }}, else_branch = els () => (float[2] re) {{
                            k1 = Constant <value = float {{1.0}}> ()
                            re = Add (x, k1)
                        }}> (even)
                tc = Constant <value = int64 {{2}}> ()
                z = Loop <body = inner_body (int64 j, bool d, float[2] s) =>
                                            (bool d_out, float[2] s2) {{
                    one = Constant <value = float {{1.0}}> ()
                    s2 = {inner_op} (s, one)
                    d_out = Identity (d)
                }}> (tc, , y)
                c_out = Identity (c)
            }}> (n, , x0)
        }}
        """
    )


def _names(model: onnx.ModelProto) -> onnx.ModelProto:
    """Name the control-flow nodes outer, choose, inner (scopes are keyed by node names)."""
    outer = model.graph.node[0]
    outer.name = "outer"
    for node in outer.attribute[0].g.node:
        node.name = {"If": "choose", "Loop": "inner"}.get(node.op_type, node.name)
    return model


NESTED_FEEDS = {"n": np.array(3, np.int64), "x0": np.array([1.0, 2.0], np.float32)}


def test_nested_bodies_and_if_branches_are_seen_on_onnxruntimes_side() -> None:
    """Every value onnxflow records, in every body at every depth and in the branch that ran,
    comes back from onnxruntime's run of the exposed copy, under the same scope."""
    from onnxflow.compare.sides import exposed_copy, run_onnxflow, run_onnxruntime

    model = _names(_nested())
    ours = run_onnxflow(model, NESTED_FEEDS)
    theirs = run_onnxruntime(exposed_copy(model), NESTED_FEEDS)
    inner_scopes = [s for s in ours if len(s) == 2 and s[1][0] == "inner"]
    branch_scopes = [s for s in ours if len(s) == 2 and s[1][0] == "choose"]
    assert len(inner_scopes) == 6 and len(branch_scopes) == 3
    assert [s[1][1] for s in branch_scopes] == ["then_branch", "else_branch", "then_branch"]
    for scope in inner_scopes + branch_scopes:
        node_values = {n: v for n, v in ours[scope].items() if n in theirs.get(scope, {})}
        assert node_values, scope
        for name, value in node_values.items():
            np.testing.assert_array_equal(theirs[scope][name], value, err_msg=f"{scope} {name}")
    assert "rt" in theirs[(("outer", 0), ("choose", "then_branch"))]
    assert "re" not in theirs.get((("outer", 0), ("choose", "else_branch")), {})
    report = onnxflow.compare(model, NESTED_FEEDS, against="onnxruntime")
    assert report.agree and not report.not_compared, report.summary()


def test_divergence_in_a_loop_nested_in_a_loop_names_both_iterations() -> None:
    report = onnxflow.compare(_names(_nested("Add")), NESTED_FEEDS, against=_names(_nested("Sub")))
    div = report.first_divergence
    assert div is not None
    assert div.op_type == "Add" and div.graph_path == ["outer", "body", "inner", "body"]
    assert div.iteration == [0, 0] and div.agreeing_inputs == ["s", "one"]


def test_divergence_in_an_if_branch_names_the_branch(tmp_path: Path) -> None:
    ours = _names(_nested())
    other = _names(_nested())
    branch = other.graph.node[0].attribute[0].g.node[4].attribute[1].g  # else_branch
    branch.node[1].op_type = "Sub"
    div = onnxflow.compare(ours, NESTED_FEEDS, against=other).first_divergence
    assert div is not None and div.node == "re"
    assert div.graph_path == ["outer", "body", "choose", "else_branch"] and div.iteration == [1]


def test_when_onnxruntime_refuses_nested_stacking_fewer_levels_are_exposed() -> None:
    """An inner Loop whose trip count changes with the outer iteration: its stacked values
    have unequal shapes, so onnxruntime refuses the fully exposed copy; compare exposes the
    outer body only and says what it left out."""
    model = _names(_nested())
    body = model.graph.node[0].attribute[0].g
    trip = next(n for n in body.node if n.output[0] == "tc")
    trip.op_type, trip.input[:] = "Add", ["i", "two"]  # 2 + i inner iterations
    del trip.attribute[:]
    body.node.remove(trip)
    body.node.insert(1, trip)  # after 'two'
    report = onnxflow.compare(model, NESTED_FEEDS, against="onnxruntime")
    assert report.agree, report.summary()
    assert any("bodies within bodies" in n for n in report.not_compared)
    assert any(n.startswith("outer/inner/*") for n in report.not_compared)


def test_scan8_iterations_are_batch_and_step() -> None:
    def scan8(op: str) -> onnx.ModelProto:
        return parser.parse_model(
            f"""
            <ir_version: 3, opset_import: ["": 8]>
            g (float[2] s0, float[2, 3] xs) => (float[2] s_final, float[2, 3] ys) {{
                s_final, ys = Scan <num_scan_inputs = 1, body = b (float s, float x) =>
                                                             (float s2, float y) {{
                    s2 = {op} (s, x)
                    y = Identity (s2)
                }}> (, s0, xs)
            }}
            """
        )

    feeds = {"s0": np.zeros(2, np.float32), "xs": np.arange(6, dtype=np.float32).reshape(2, 3)}
    div = onnxflow.compare(scan8("Add"), feeds, against=scan8("Max")).first_divergence
    assert div is not None and div.graph_path == ["s_final", "body"]
    # batch 0 scans [0, 1, 2]: sums 0, 1, 3 and maxima 0, 1, 2 first differ at step 2
    assert div.iteration == [0, 2]


def test_values_shape_inference_cannot_type_are_typed_by_onnxflows_run() -> None:
    """TorchScript's scripted loops hold an If inside a Loop whose branch values have no
    inferred shape: the shapes onnxflow's run saw make the placeholders stack, so every body
    and branch is compared and nothing is refused."""
    name = "scripted_loops_torchscript_opset13"
    model = onnx.load(EXPORTED / f"{name}.onnx")
    data = np.load(EXPORTED / f"{name}.npz")
    feeds = {i.name: data[f"in0_{k}"] for k, i in enumerate(model.graph.input)}
    report = onnxflow.compare(model, feeds, against="onnxruntime")
    assert report.agree, report.summary()
    assert not [n for n in report.not_compared if "refused" in n or "not exposed" in n]


def test_branch_values_whose_shape_changes_per_iteration_leave_only_loop_branches_out() -> None:
    """A then-branch value of shape [i + 1] inside a Loop cannot be stacked over iterations:
    onnxruntime refuses that copy, and compare leaves out only the branches inside loops."""
    model = parser.parse_model(
        """
        <ir_version: 8, opset_import: ["": 17]>
        g (float[2] x0) => (float[2] x_final) {
            n = Constant <value = int64 {3}> ()
            x_final = Loop <body = body (int64 i, bool c, float[2] x) => (bool c_out, float[2] z) {
                two = Constant <value = int64 {2}> ()
                zero = Constant <value = int64 {0}> ()
                m = Mod (i, two)
                even = Equal (m, zero)
                z = If <then_branch = then () => (float[2] rt) {
                        one = Constant <value = int64 {1}> ()
                        end = Add (i, one)
                        r = Range (zero, end, one)
                        total = ReduceSum (r)
                        k = Cast <to = 1> (total)
                        rt = Add (x, k)
                    }, else_branch = els () => (float[2] re) {
                        re = Identity (x)
                    }> (even)
                c_out = Identity (c)
            }> (n, , x0)
        }
        """
    )
    feeds = {"x0": np.array([1.0, 2.0], np.float32)}
    report = onnxflow.compare(model, feeds, against="onnxruntime")
    assert report.agree, report.summary()
    refused = [n for n in report.not_compared if "refused the copy" in n]
    assert len(refused) == 1 and refused[0].startswith("values of If branches inside loops")
    assert report.compared >= 3 * 4  # the loop body's values, every iteration


SAVED = ROOT / "tests" / "microsoft" / "data" / "saved"


def _generated_feeds(path: Path) -> dict[str, np.ndarray]:
    from onnxflow.cli import generate_input

    rng = np.random.default_rng(0)
    return {a.name: generate_input(a, {}, rng) for a in InferenceSession(str(path)).get_inputs()}


def test_onnxruntimes_own_operators_are_compared_with_the_types_onnxflow_saw() -> None:
    """onnx's shape inference does not type the outputs of com.microsoft operators (a model
    onnxruntime saved fully optimized); the types onnxflow's run saw expose them anyway."""
    model = SAVED / "mlp_all.onnx"
    assert any(n.domain == "com.microsoft" for n in onnx.load(model).graph.node)
    report = onnxflow.compare(str(model), _generated_feeds(model), against="onnxruntime")
    assert report.agree and not report.not_compared, report.summary()
    assert report.compared == len(onnx.load(model).graph.node)


def test_nchwc_blocked_tensors_are_listed_and_the_outputs_compared() -> None:
    """onnxruntime holds NCHWc tensors as (N, C/b, H, W, b), onnxflow in NCHW order: those
    are listed as not compared; ReorderOutput's NCHW results are compared."""
    model = SAVED / "resnet_all.onnx"
    report = onnxflow.compare(str(model), _generated_feeds(model), against="onnxruntime")
    assert report.agree, report.summary()
    assert report.not_compared and all("NCHWc blocked layout" in n for n in report.not_compared)
    assert report.compared >= len(onnx.load(model).graph.output)


def test_main_graph_sequences_are_compared() -> None:
    """A main-graph sequence comes out as a sequence-typed graph output; only the sequence
    carried inside the loop body is listed as not compared."""
    name = "scripted_loops_torchscript_opset13"
    model = onnx.load(EXPORTED / f"{name}.onnx")
    data = np.load(EXPORTED / f"{name}.npz")
    feeds = {i.name: data[f"in0_{k}"] for k, i in enumerate(model.graph.input)}
    report = onnxflow.compare(model, feeds, against="onnxruntime")
    assert report.agree and report.not_compared == ["Loop_74/90"], report.summary()
    assert isinstance(_theirs(model, feeds)[()]["products.1"], list)


def _theirs(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> dict:
    from onnxflow.compare.expose import observed_types
    from onnxflow.compare.sides import exposed_copy, run_onnxflow, run_onnxruntime

    observed = observed_types(run_onnxflow(model, feeds))
    return run_onnxruntime(exposed_copy(model, observed=observed), feeds)
