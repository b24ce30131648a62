"""The benchmark harness runs and reports every workload; no test here ever asserts a time."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from onnxflow.bench.cli import NAMES, parse_args, select
from onnxflow.bench.harness import Report, Row
from onnxflow.bench.report import render


def _bench(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    code = f"from onnxflow.bench.cli import main; raise SystemExit(main({list(args)!r}))"
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)


def _table_rows(text: str) -> dict[str, list[str]]:
    rows = {}
    for line in text.splitlines():
        if line.startswith("| "):
            cells = [c.strip() for c in line.strip("|").split("|")]
            rows[cells[0]] = cells
    return rows


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, dict]:
    path = tmp_path_factory.mktemp("bench") / "rows.json"
    proc = _bench("--quick", "--json", str(path))
    assert proc.returncode == 0, proc.stderr
    return proc.stdout, json.loads(path.read_text())


def test_quick_run_prints_a_table_with_every_workload(quick_run: tuple[str, dict]) -> None:
    out, _ = quick_run
    assert out.startswith("Machine: ") and "numpy" in out and "onnxruntime" in out
    rows = _table_rows(out)
    assert rows["workload"][2:5] == ["onnxflow", "onnxruntime", "onnx.reference"]
    assert set(NAMES) <= set(rows)
    assert "Loop linearity" in out and "peak_memory: peak RSS" in out


def test_quick_run_measures_loop_linearity_with_sizes_interleaved(quick_run) -> None:
    out, data = quick_run
    (row,) = [r for r in data["rows"] if r["name"] == "loop_linearity"]
    assert row["kind"] == "ratio" and row["values"]["onnxflow"] > 0
    assert row["failures"]["onnx.reference"] == "not measured"
    assert "sampled alternately): onnxflow" in out


def test_quick_run_checks_onnxflow_against_onnxruntime(quick_run: tuple[str, dict]) -> None:
    _, data = quick_run
    assert [r["name"] for r in data["rows"]] == NAMES
    timed = [r for r in data["rows"] if r["kind"] == "time"]
    assert all(r["match"] in ("✓", "✗", "—") or r["match"].endswith("(vs ref)") for r in timed)
    assert all("onnxflow" in r["values"] for r in timed if not r["note"].startswith("skipped"))


def test_only_takes_names_and_prefixes_in_bench_order() -> None:
    assert select(["loop_spec,dispatch"]) == ["dispatch", "loop_spec"]
    assert select(["rnn"]) == ["rnn_long", "rnn_short"]
    assert select([]) == NAMES
    with pytest.raises(SystemExit, match="unknown workload"):
        select(["nope"])


def test_optional_packages_missing_are_skipped_with_a_note(tmp_path: Path) -> None:
    # The engines run in processes of their own: the packages are hidden from every process
    # by stand-ins on PYTHONPATH that fail to import.
    for package in ("onnxruntime", "sklearn", "skl2onnx"):
        (tmp_path / package).mkdir()
        (tmp_path / package / "__init__.py").write_text(
            f"raise ModuleNotFoundError('hidden', name={package!r})\n"
        )
    path = os.pathsep.join([str(tmp_path), *sys.path])
    proc = _bench("--quick", "--only", "dispatch,knn", env={**os.environ, "PYTHONPATH": path})
    assert proc.returncode == 0, proc.stderr
    rows = _table_rows(proc.stdout)
    assert rows["dispatch"][3] == "skipped: not installed"
    assert rows["knn"][-1].startswith("skipped: needs scikit-learn and skl2onnx")


def test_render_shows_failures_and_ratios() -> None:
    row = Row("w", "tiny", values={"onnxflow": 2e-6, "onnx.reference": 2e-5}, units=2, unit="node")
    row.failures["onnxruntime"] = "Fail: rejected | model"
    text = render(Report({"cpus": "2", "load": "0.0", "platform": "x"}, 3, False, [row]))
    cells = _table_rows(text)["w"]
    assert cells[2:8] == [
        "2 µs (1 µs/node)",
        "fails: Fail: rejected / model",
        "20 µs (10 µs/node)",
        "—",
        "10.00x",
        "—",
    ]


def test_json_rows_read_back(quick_run: tuple[str, dict]) -> None:
    from onnxflow.bench.harness import report_from_json

    _, data = quick_run
    report = report_from_json(data)
    assert len(report.rows) == len(NAMES) and report.quick
    assert "| dispatch |" in render(report)


def test_a_known_wrong_reference_is_named_in_the_match_column() -> None:
    from onnxflow.bench.harness import _match

    ours = [np.array([12, -6], np.int32)]
    ref = [np.array([[12], [-6]], np.int32)]
    assert _match({"onnxflow": ours, "onnx.reference": ref}, (1e-3, 1e-4)) == "✗ (vs ref)"
    why = "stacked with an extra axis"
    got = _match({"onnxflow": ours, "onnx.reference": ref}, (1e-3, 1e-4), why)
    assert got == f"✗ (vs ref, expected: {why})"
    assert _match({"onnxflow": ours, "onnx.reference": ours}, (1e-3, 1e-4), why) == "✓ (vs ref)"


def test_the_machine_line_names_numpys_blas_not_scipys() -> None:
    """scikit-learn brings SciPy, whose BLAS is another library; the bench times NumPy's."""
    pytest.importorskip("threadpoolctl", reason="the BLAS is named through threadpoolctl")
    pytest.importorskip("scipy.linalg", reason="needs a second BLAS loaded to choose between")
    from onnxflow.bench.harness import _blas

    built = np.__config__.CONFIG["Build Dependencies"]["blas"]
    if built.get("name") != "scipy-openblas":
        pytest.skip(f"NumPy built with {built.get('name')}, not the OpenBLAS wheel")
    assert f" {built['version']} " in f"{_blas()} "


PIN = {"OPENBLAS_CORETYPE": "Haswell", "OPENBLAS_L2_SIZE": "1048576"}


def test_engine_processes_run_without_the_openblas_pin(monkeypatch: pytest.MonkeyPatch) -> None:
    """The child's environment loses both variables; this process (the tests, CI) keeps them."""
    from onnxflow.bench.process import engine_env, run_engine

    for name, value in PIN.items():
        monkeypatch.setenv(name, value)
    code = "import json, os; print(json.dumps(dict(os.environ)))"
    child = json.loads(run_engine(["-c", code]).stdout)
    assert not set(PIN) & set(child)
    assert child["PATH"] == os.environ["PATH"]  # the rest is passed on
    assert all(os.environ[name] == value for name, value in PIN.items())
    assert engine_env({"A": "1", **PIN}) == {"A": "1"}


def test_the_machine_line_reports_the_blas_of_an_engine_process() -> None:
    pytest.importorskip("threadpoolctl", reason="the BLAS is named through threadpoolctl")
    from onnxflow.bench.process import BLAS_KEYS, blas_text, engine_blas

    info = engine_blas()
    assert {"library", "internal_api", "version", "num_threads"} <= set(info)
    assert set(info) <= {"library", *BLAS_KEYS}
    text = blas_text(info)
    assert text.startswith(f"{info['internal_api']} {info['version']} (")
    assert "without OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE" in text


def test_the_bench_takes_a_thread_count() -> None:
    assert parse_args(["--threads", "1"]).threads == 1
    assert parse_args(["--zoo", "--threads", "2"]).threads == 2
    assert parse_args([]).threads == 0
    from onnxflow.bench.cli import main

    with pytest.raises(SystemExit, match="--threads"):
        main(["--threads", "-1", "--only", "dispatch"])


def test_the_zoo_times_either_kernel_form_on_chosen_engines() -> None:
    args = parse_args(["--zoo", "--kernels", "numpy", "--engines", "onnxflow"])
    assert (args.kernels, args.engines) == ("numpy", "onnxflow")
    assert parse_args(["--zoo"]).kernels == "native"
    with pytest.raises(SystemExit):
        parse_args(["--zoo", "--kernels", "fast"])


def test_each_engines_process_reports_its_own_row(quick_run: tuple[str, dict]) -> None:
    """Merged rows: every engine's time, from its process; none says another's failure."""
    _, data = quick_run
    (row,) = [r for r in data["rows"] if r["name"] == "dispatch"]
    assert set(row["values"]) == {"onnxflow", "onnxruntime", "onnx.reference"}
    assert row["failures"] == {} and row["match"] == "✓"
