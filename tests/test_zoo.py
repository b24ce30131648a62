"""The bench's real-model tier (onnxflow.bench.zoo): its harness, on the stand-in built in code
(no network), and the stand-in's correctness against onnxruntime. No test asserts a time."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

import onnxflow
from onnxflow.bench.zoo import BY_NAME, ROWS, ZOO, ZooModel, at_rows
from onnxflow.bench.zoo.models import streaming_standin, streaming_standin_feeds
from onnxflow.bench.zoo.run import ZooRow, geomean, render, run_zoo, select
from onnxflow.bench.zoo.sources import Built, Unavailable, model_path
from onnxflow.bench.zoo.transformer import transformer_standin, transformer_standin_feeds


@pytest.fixture(autouse=True)
def _cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ONNXFLOW_ZOO_CACHE", str(tmp_path / "cache"))


def test_the_streaming_standin_matches_onnxruntime() -> None:
    model = streaming_standin()
    for sr in (16000, 8000):  # both branches of the If
        feeds = {**streaming_standin_feeds(), "sr": np.array(sr, np.int64)}
        got = onnxflow.InferenceSession(model).run(None, feeds)
        want = ort.InferenceSession(model.SerializeToString()).run(None, feeds)
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("optimize", [True, False])
def test_the_transformer_standin_matches_onnxruntime_as_shapes_change(optimize: bool) -> None:
    # Dynamic batch and sequence: the shape arithmetic's memo must follow every change.
    model = transformer_standin()
    sess = onnxflow.InferenceSession(model, onnxflow.SessionOptions(optimize=optimize))
    reference = ort.InferenceSession(model.SerializeToString())
    for batch, sequence in [(1, 24), (2, 10), (2, 10), (1, 24), (3, 7)]:
        feeds = transformer_standin_feeds(batch, sequence)
        (got,) = sess.run(None, feeds)
        (want,) = reference.run(None, feeds)
        assert got.shape == (batch, sequence, 96)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_the_tier_measures_each_engine_in_its_own_process() -> None:
    (row,) = run_zoo([BY_NAME["streaming_standin"]], 0.2, ("onnxflow", "onnxruntime"))
    assert set(row.values) == {"onnxflow", "onnxruntime"}, row.failures
    assert all(v > 0 for v in row.values.values())
    assert row.match == "✓"
    # session creation + first run, in a fresh process, for the first-run columns
    assert set(row.first) == {"onnxflow", "onnxruntime"} and all(row.first.values())
    table = render([row])
    assert "| streaming_standin | streaming |" in table
    assert "first run: flow | first run: ort" in table
    assert "Geometric mean onnxflow / onnxruntime" in table


def test_an_engine_that_fails_is_reported_not_fatal(tmp_path: Path) -> None:
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"not a model")
    feeds = tmp_path / "feeds.npz"
    np.savez(feeds, x=np.zeros(1, np.float32))
    out = tmp_path / "out.json"
    cmd = [
        sys.executable,
        "-m",
        "onnxflow.bench.zoo.engine",
        "onnxflow",
        str(bad),
        str(feeds),
        str(out),
    ]
    assert subprocess.run(cmd, capture_output=True).returncode == 0
    assert "ModelParseError" in json.loads(out.read_text())["error"]  # a ModelLoadError


def test_a_model_whose_framework_is_missing_is_unavailable() -> None:
    def needs_missing(target: Path) -> None:
        import a_package_that_is_not_installed  # noqa: F401

    with pytest.raises(Unavailable, match="a_package_that_is_not_installed"):
        model_path("missing", Built(needs_missing))
    source = Built(needs_missing)
    (row,) = run_zoo([ZooModel("missing", "trees", source, dict, "-")], 0.1, ("onnxflow",))
    assert row.failures["onnxflow"].startswith("not made")


def test_selection_and_summary() -> None:
    assert [m.name for m in select(["ppocr_cls"])] == [
        "ppocr_cls",
        "ppocr_cls_fp16",
        "ppocr_cls_fp16_f32",
        "ppocr_cls_qdq",
        "ppocr_cls_dynamic",
        "ppocr_cls_qop",
        "ppocr_cls_ort_fused",
    ]
    assert select([]) == list(ZOO)
    assert geomean([2.0, 8.0]) == pytest.approx(4.0)
    rows = [
        ZooRow("a", "conv", "-", {"onnxflow": 2.0, "onnxruntime": 1.0}),
        ZooRow("b", "trees", "-", {"onnxflow": 8.0, "onnxruntime": 1.0}),
    ]
    assert "**4.00x** over 2 models (conv 2.00x, trees 8.00x)" in render(rows)


def test_every_kind_the_issue_names_has_a_model() -> None:
    kinds = {m.kind for m in ZOO}
    assert {"streaming", "conv", "transformer", "float16", "quantized", "trees"} <= kinds


def test_a_saved_zoo_run_renders_into_the_readme_section(tmp_path) -> None:
    import json
    import sys
    from dataclasses import asdict
    from pathlib import Path

    from onnxflow.bench.zoo.run import rows_from_json, zoo_text

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
    from bench_readme import ZOO_END, ZOO_START, write_section

    rows = [ZooRow("a", "conv", "-", {"onnxflow": 2.0, "onnxruntime": 1.0}, {"tract": "no"})]
    machine = {"cpus": "2", "load": "0.1", "platform": "Linux", "blas": "openblas X"}
    data = json.loads(json.dumps({"machine": machine, "seconds": 2, "rows": [asdict(rows[0])]}))
    assert rows_from_json(data) == rows
    text = zoo_text(rows_from_json(data), data["machine"], data["seconds"])
    assert text.startswith("Machine: 2 CPUs (load 0.1), Linux; blas openblas X.")
    readme = tmp_path / "README.md"
    readme.write_text(f"head\n{ZOO_START}\nold\n{ZOO_END}\ntail\n")
    write_section(text, readme, (ZOO_START, ZOO_END))
    content = readme.read_text()
    assert "old" not in content and "| a | conv |" in content and content.endswith("tail\n")


def test_a_zoo_models_options_reach_onnxflows_session(tmp_path: Path) -> None:
    """ZooModel.options go to onnxflow's engine process as SessionOptions (a bad one says so)."""
    feeds = tmp_path / "feeds.npz"
    np.savez(feeds, **streaming_standin_feeds())
    model = tmp_path / "m.onnx"
    model.write_bytes(streaming_standin().SerializeToString())
    out = tmp_path / "out.json"
    cmd = [sys.executable, "-m", "onnxflow.bench.zoo.engine", "onnxflow", str(model)]
    cmd += [str(feeds), str(out), "--seconds", "0", "--options", '{"float16_rounding": "x"}']
    assert subprocess.run(cmd, capture_output=True).returncode == 0
    assert "float16_rounding" in json.loads(out.read_text())["error"]
    assert dict(BY_NAME["ppocr_cls_fp16_f32"].options) == {"float16_rounding": "outputs"}


def test_the_zoo_runs_onnxflows_numpy_forms_when_asked() -> None:
    """run_zoo(kernels="numpy") gives onnxflow's engine SessionOptions(kernels="numpy"): the
    row still runs and agrees with onnxruntime."""
    (row,) = run_zoo(
        [BY_NAME["streaming_standin"]], 0.1, ("onnxflow", "onnxruntime"), kernels="numpy"
    )
    assert not row.failures and row.match == "✓"


#: The models issue 30 adds, and their kinds.
ADDED = {
    "sklearn_forest_pipeline": "trees",
    "xgboost_regressor": "trees",
    "ppocr_cls_qop": "quantized",
    "ppocr_cls_ort_fused": "conv",
    "gpt2_tiny_ts_fp16": "float16",
    "transformer_standin_fp16": "float16",
    "transformer_standin_past": "transformer",
    "transformer_standin_generate": "transformer",
}


def test_the_zoo_knows_the_kinds_that_are_slow_today() -> None:
    assert {name: BY_NAME[name].kind for name in ADDED} == ADDED
    kinds = {"quantized", "float16", "transformer", "conv", "streaming", "trees"}
    assert {m.kind for m in ZOO} == kinds


def test_the_zoo_lists_its_models() -> None:
    code = "from onnxflow.bench.cli import main; raise SystemExit(main(['--zoo', '--list']))"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    listed = {line.split()[0]: line.split()[1] for line in proc.stdout.splitlines()}
    assert listed == {m.name: m.kind for m in ZOO}


def test_a_builder_whose_package_is_missing_says_which(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "xgboost", None)
    with pytest.raises(Unavailable, match="needs xgboost"):
        BY_NAME["xgboost_regressor"].path()


def test_the_float16_standin_is_float16_throughout_and_matches_onnxruntime() -> None:
    from onnxflow.bench.zoo.transformer import transformer_standin_fp16

    model = transformer_standin_fp16()
    f32 = [t.name for t in model.graph.initializer if t.data_type == onnx.TensorProto.FLOAT]
    assert f32 == []
    feeds = transformer_standin_feeds()
    (got,) = onnxflow.InferenceSession(model).run(None, feeds)
    assert got.dtype == np.float16
    try:
        (want,) = ort.InferenceSession(model.SerializeToString()).run(None, feeds)
    except Exception as exc:  # an operator onnxruntime's CPU provider lacks in float16
        pytest.skip(f"onnxruntime cannot run it: {exc}")
    np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32), 2e-2, 2e-2)


def test_the_standin_with_past_decodes_as_the_full_sequence_does(tmp_path: Path) -> None:
    """Token by token with the cache fed back, the logits are the full model's."""
    from onnxflow.bench.zoo import transformer as t
    from onnxflow.bench.zoo.engine import generation

    full = onnxflow.InferenceSession(t.transformer_standin())
    ids = np.random.default_rng(1).integers(0, t.VOCAB, (1, 6)).astype(np.int64)
    (want,) = full.run(None, {"input_ids": ids, "attention_mask": np.ones_like(ids)})
    model = t.transformer_standin_past()
    step = onnxflow.InferenceSession(model)
    names = [o.name for o in model.graph.output]
    empty = np.zeros((1, t.HEADS, 0, t.HIDDEN // t.HEADS), np.float32)
    past = {n.replace("present", "past"): empty for n in names[1:]}
    for i in range(ids.shape[1]):
        feeds = {"input_ids": ids[:, i : i + 1], "attention_mask": np.ones((1, i + 1), np.int64)}
        outputs = dict(zip(names, step.run(None, {**feeds, **past}), strict=True))
        np.testing.assert_allclose(outputs["logits"][:, -1], want[:, i], rtol=1e-4, atol=1e-4)
        past = {n.replace("present", "past"): v for n, v in outputs.items() if n != "logits"}
    feeds = t.transformer_standin_past_feeds()
    onnx.save(model, tmp_path / "past.onnx")
    loop = generation(lambda f: step.run(None, f), str(tmp_path / "past.onnx"), 3)
    assert loop(feeds)[1].shape[2] == t.PAST + 3  # three steps grew the cache by three
    got = step.run(None, feeds)
    want = ort.InferenceSession(model.SerializeToString()).run(None, feeds)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)


def test_building_the_catboost_model_leaves_no_training_logs_behind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("catboost", reason="catboost is in the 'test' extra")
    from onnxflow.bench.zoo.builders import catboost_classifier

    workdir = tmp_path / "workdir"
    workdir.mkdir()
    monkeypatch.chdir(workdir)  # catboost writes ./catboost_info unless told where
    catboost_classifier(tmp_path / "catboost.onnx", trees=2)
    assert onnx.load(tmp_path / "catboost.onnx").graph.node
    assert list(workdir.iterdir()) == []


def test_a_tree_model_is_timed_at_other_row_counts() -> None:
    """at_rows cycles a rows model's feeds to the count asked, names the row ``name@rows`` and
    keeps the model file; a model without a rows axis says so."""
    model = BY_NAME["xgboost_regressor"]
    one, many = at_rows(model, 1), at_rows(model, 2500)
    (x,) = model.feeds().values()
    (x1,) = one.feeds().values()
    (xm,) = many.feeds().values()
    assert (one.name, many.name) == ("xgboost_regressor@1", "xgboost_regressor@2500")
    assert one.size.endswith("1 row") and many.size.endswith("2,500 rows")
    np.testing.assert_array_equal(x1, x[:1])
    np.testing.assert_array_equal(xm[:ROWS], x)
    np.testing.assert_array_equal(xm[ROWS : 2 * ROWS], x)
    assert xm.shape == (2500, x.shape[1])
    assert one.path() == model.path()
    assert {m.name for m in ZOO if "rows" in m.tags} == {m.name for m in ZOO if m.kind == "trees"}
    with pytest.raises(ValueError, match="streaming_standin.*no rows axis"):
        at_rows(BY_NAME["streaming_standin"], 10)


def test_the_bench_times_tree_models_by_rows_into_their_readme_section(tmp_path: Path) -> None:
    """``--zoo --rows`` times each rows model at each count (a bad count is refused), and
    bench_readme's ``--rows-from-json`` writes that run between the rows markers."""
    code = "from onnxflow.bench.cli import main; raise SystemExit(main({}))"
    bad = subprocess.run(
        [sys.executable, "-c", code.format(["--zoo", "--rows", "0,x"])],
        capture_output=True,
        text=True,
    )
    assert bad.returncode != 0 and "--rows takes row counts" in bad.stderr
    out = tmp_path / "rows.json"
    args = ["--zoo", "--only", "xgboost_regressor", "--rows", "1,3", "--seconds", "0.1"]
    args += ["--engines", "onnxflow,onnxruntime", "--json", str(out)]
    proc = subprocess.run([sys.executable, "-c", code.format(args)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    names = [row["name"] for row in json.loads(out.read_text())["rows"]]
    assert names == ["xgboost_regressor@1", "xgboost_regressor@3"]
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
    from bench_readme import ROWS_END, ROWS_START, write_zoo

    readme = tmp_path / "README.md"
    readme.write_text(f"head\n{ROWS_START}\nold\n{ROWS_END}\ntail\n")
    write_zoo(out, (ROWS_START, ROWS_END), readme)
    content = readme.read_text()
    assert "old" not in content and "| xgboost_regressor@3 | trees |" in content
