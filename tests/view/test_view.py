"""``onnxflow view``: the page, rendered in a real headless chromium, shows every node of every
graph, a clicked node's attributes, the statistics a run computes, the node ``compare`` names,
and works with the network cut.

Screenshots for the README and the guide (docs/images/) are made here:
``ONNXFLOW_WRITE_SCREENSHOTS=1 pytest tests/view`` writes them again.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxflow
from onnxflow import spec_models
from onnxflow.cli import main
from onnxflow.compare.expose import node_key
from onnxflow.observers import Trace

ROOT = Path(__file__).resolve().parents[2]
IMAGES = ROOT / "docs" / "images"
SCREENSHOTS = {"rnn": IMAGES / "view_rnn.png", "transformer": IMAGES / "view_transformer.png"}
F, I64, B = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL


def _show(browser: Any, page: onnxflow.View, path: Path) -> None:
    """Load the page from disk; wait until its script has drawn the main graph."""
    page.save(path)
    browser.get(path.resolve().as_uri())
    for _ in range(200):
        if browser.execute_script("return document.body.getAttribute('data-ready')") == "1":
            return
        time.sleep(0.05)
    logs = browser.get_log("browser") if hasattr(browser, "get_log") else []
    raise AssertionError(f"the page did not finish drawing; browser log: {logs}")


def _graphs(graph: onnx.GraphProto, gid: str = "main") -> dict[str, list[str]]:
    """Every graph of a model, by the page's ids, with its nodes' keys: built from the model,
    not from the page's document."""
    found = {gid: [node_key(n) for n in graph.node]}
    for node in graph.node:
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                found |= _graphs(attr.g, f"{gid}/{node_key(node)}.{attr.name}")
    return found


def _drawn(browser: Any, gid: str) -> list[str]:
    """Open graph ``gid`` section by section; the node keys drawn in the DOM."""
    keys: list[str] = []
    sections = browser.execute_script(f"return window.onnxflowView.sections({gid!r})")
    for section in range(sections):
        browser.execute_script(f"window.onnxflowView.open({gid!r}, null, {section})")
        keys += browser.execute_script(
            "return [...document.querySelectorAll('#viewport g.node')].map(e => e.dataset.node)"
        )
    return keys


def loop_if_function() -> onnx.ModelProto:
    """A Loop whose body holds an If (negate on even iterations), and a call to a model-local
    function (``local.Double``: x + x) on the loop's result."""
    then = helper.make_graph(
        [helper.make_node("Neg", ["acc"], ["flipped"], name="negate")],
        "then",
        [],
        [helper.make_tensor_value_info("flipped", F, [2])],
    )
    other = helper.make_graph(
        [helper.make_node("Identity", ["acc"], ["kept"], name="keep")],
        "else",
        [],
        [helper.make_tensor_value_info("kept", F, [2])],
    )
    body = helper.make_graph(
        [
            helper.make_node("Mod", ["i", "two"], ["parity"], name="parity"),
            helper.make_node("Equal", ["parity", "zero"], ["even"], name="is_even"),
            helper.make_node("If", ["even"], ["chosen"], name="choose", then_branch=then,
                             else_branch=other),
            helper.make_node("Add", ["chosen", "step"], ["acc_out"], name="add_step"),
            helper.make_node("Identity", ["cond_in"], ["cond_out"], name="go_on"),
        ],
        "body",
        [
            helper.make_tensor_value_info("i", I64, []),
            helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
            helper.make_tensor_value_info("acc", F, [2]),
        ],
        [
            helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
            helper.make_tensor_value_info("acc_out", F, [2]),
        ],
    )  # fmt: skip
    double = helper.make_function(
        "local", "Double", ["x"], ["y"], [helper.make_node("Add", ["x", "x"], ["y"])],
        [helper.make_opsetid("", 21)],
    )  # fmt: skip
    graph = helper.make_graph(
        [
            helper.make_node("Loop", ["trips", "", "start"], ["final"], name="outer", body=body),
            helper.make_node("Double", ["final"], ["doubled"], name="twice", domain="local"),
        ],
        "loop_if_function",
        [helper.make_tensor_value_info("start", F, [2])],
        [helper.make_tensor_value_info("doubled", F, [2])],
        [
            numpy_helper.from_array(np.array(4, np.int64), "trips"),
            numpy_helper.from_array(np.array(2, np.int64), "two"),
            numpy_helper.from_array(np.array(0, np.int64), "zero"),
            numpy_helper.from_array(np.array([0.5, -1.0], np.float32), "step"),
        ],
    )
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid("local", 1)],
        functions=[double],
    )
    model.ir_version = 10
    return model


def nested_loops() -> onnx.ModelProto:
    """A Loop in a Loop: the inner one adds the outer iteration number to its state, M times."""
    inner = helper.make_graph(
        [helper.make_node("Add", ["acc2", "i"], ["acc2_out"], name="inner_add")],
        "inner",
        [
            helper.make_tensor_value_info(n, t, [])
            for n, t in (("j", I64), ("c2", B), ("acc2", I64))
        ],
        [helper.make_tensor_value_info(n, t, []) for n, t in (("c2", B), ("acc2_out", I64))],
    )
    outer = helper.make_graph(
        [helper.make_node("Loop", ["M", "", "acc"], ["acc_out"], body=inner, name="inner")],
        "outer",
        [helper.make_tensor_value_info(n, t, []) for n, t in (("i", I64), ("c", B), ("acc", I64))],
        [helper.make_tensor_value_info(n, t, []) for n, t in (("c", B), ("acc_out", I64))],
    )
    graph = helper.make_graph(
        [helper.make_node("Loop", ["M", "", "zero"], ["total"], body=outer, name="outer")],
        "nested",
        [helper.make_tensor_value_info("M", I64, [])],
        [helper.make_tensor_value_info("total", I64, [])],
        [numpy_helper.from_array(np.array(0, np.int64), "zero")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])


def rnn_feeds(steps: int = 6) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(1)
    return {
        "X": rng.standard_normal((steps, 2, 4)).astype(np.float32),
        "H_0": np.zeros((2, 8), np.float32),
    }


@pytest.mark.parametrize(
    "make", [spec_models.rnn_scan, spec_models.loop_trip_count, loop_if_function, nested_loops]
)
def test_every_node_of_every_graph_is_in_the_dom(browser: Any, tmp_path: Path, make) -> None:
    model = make()
    page = onnxflow.view(model)
    _show(browser, page, tmp_path / "page.html")
    for gid, keys in _graphs(model.graph).items():
        assert sorted(_drawn(browser, gid)) == sorted(keys), gid
    for f in model.functions:  # a local function's body opens from its call
        drawn = _drawn(browser, f"fn:{f.domain}.{f.name}")
        assert sorted(drawn) == sorted(node_key(n) for n in f.node)


def test_clicking_a_node_shows_its_attributes_kernel_and_code(browser: Any, tmp_path: Path) -> None:
    _show(browser, onnxflow.view(spec_models.rnn_scan()), tmp_path / "page.html")
    browser.find_element("css selector", "#viewport g.node[data-node='rnn']").click()
    panel = browser.find_element("id", "panel")
    assert panel.find_element("css selector", "td[data-attr='num_scan_inputs']").text == "1"
    assert "ai.onnx.Scan since_version 21" in panel.text
    # drill down: the body's MatMul, its traits and the line of generated code that runs it
    browser.execute_script("window.onnxflowView.open('main/rnn.body')")
    browser.find_element("css selector", "#viewport g.node[data-node='t2']").click()
    assert "static_shape" in panel.find_element("css selector", ".traits").text
    assert panel.find_element("css selector", "pre.code").text.startswith("v")
    assert browser.find_element("id", "crumbs").text.startswith("rnn-encoding")


def _shown_stats(browser: Any, value: str) -> dict[str, float]:
    box = browser.find_element("css selector", f"#panel .value[data-value='{value}']")
    cells = box.find_elements("css selector", "table.stats td[data-stat]")
    return {
        c.get_attribute("data-stat"): float(c.text)
        for c in cells
        if c.get_attribute("data-stat") not in ("shape", "dtype")
    }


def _expected(value: np.ndarray) -> dict[str, float]:
    data = value.astype(np.float64)
    return {
        "min": data.min(), "max": data.max(), "mean": data.mean(), "std": data.std(),
        "nan": 0, "inf": 0,
    }  # fmt: skip


def test_run_statistics_shown_equal_numpys(browser: Any, tmp_path: Path) -> None:
    model, feeds = spec_models.rnn_scan(), rnn_feeds()
    sess = onnxflow.InferenceSession(model)
    trace = Trace()
    y, y_h = sess.run(None, feeds, observers=[trace])
    page = onnxflow.view(model, feeds, run=True)
    _show(browser, page, tmp_path / "page.html")
    browser.find_element("css selector", "#viewport g.node[data-node='rnn']").click()
    for name, value in {"Y": y, "Y_h": y_h, "X": feeds["X"]}.items():
        assert _shown_stats(browser, name) == pytest.approx(_expected(value), rel=1e-5, abs=1e-6)
    # in the body: one sparkline per statistic; clicking iteration 2 shows iteration 2's values
    browser.execute_script("window.onnxflowView.open('main/rnn.body')")
    browser.find_element("css selector", "#viewport g.node[data-node='H_t']").click()
    box = "#panel .value[data-value='H_t']"
    sparks = browser.find_elements("css selector", f"{box} svg.spark")
    assert [s.get_attribute("data-stat") for s in sparks] == ["min", "max", "mean", "std"]
    assert len(sparks[0].find_elements("css selector", "rect.it")) == len(feeds["X"])
    sparks[0].find_element("css selector", "rect.it[data-iteration='2']").click()
    expected = _expected(trace.at("rnn", 2)["H_t"])
    assert _shown_stats(browser, "H_t") == pytest.approx(expected, rel=1e-5, abs=1e-6)
    browser.execute_script("window.onnxflowView.open('main')")  # a graph input's own panel
    browser.find_element("css selector", "#viewport g.io[data-value='X']").click()
    assert _shown_stats(browser, "X") == pytest.approx(_expected(feeds["X"]), rel=1e-5)
    slowest = browser.find_elements("css selector", "#overview .row.top")
    assert slowest and all(row.text.split()[1] == "ms" for row in slowest)


def test_against_highlights_the_node_compare_names(browser: Any, tmp_path: Path) -> None:
    model, feeds = spec_models.rnn_scan(), rnn_feeds()
    other = onnx.ModelProto()
    other.CopyFrom(model)
    body = other.graph.node[0].attribute[0].g
    (t4,) = [n for n in body.node if n.output[0] == "t4"]
    t4.op_type = "Sub"  # the other side subtracts a bias this one adds: t4 is the origin
    report = onnxflow.compare(model, feeds, against=other)
    page = onnxflow.view(model, feeds, against=other)
    _show(browser, page, tmp_path / "page.html")
    (origin,) = report.origins
    first = report.first_divergence
    assert first is not None
    gid = "main/" + ".".join(origin.graph_path)
    browser.execute_script(f"window.onnxflowView.open({gid!r})")
    marked = browser.find_elements("css selector", "#viewport g.node.origin")
    assert [e.get_attribute("data-node") for e in marked] == [origin.node]
    firsts = browser.find_elements("css selector", "#viewport g.node.first")
    assert [e.get_attribute("data-node") for e in firsts] == [first.node]
    on_path = {e.get_attribute("data-node") for e in browser.find_elements(
        "css selector", "#viewport g.node.onpath")}  # fmt: skip
    assert {"t4", "t5", "H_t", "Accumulate"} <= on_path and "t1" not in on_path
    browser.find_element("css selector", "#viewport g.node[data-node='t4']").click()
    error = browser.find_element("css selector", "#panel [data-error='t4']").text
    assert "beyond tolerance" in error
    browser.execute_script("window.onnxflowView.open('main')")  # the Scan holding it, marked
    assert browser.find_elements("css selector", "#viewport g.node.first[data-node='rnn']")


def test_the_page_works_with_the_network_cut(browser: Any, tmp_path: Path) -> None:
    page = onnxflow.view(spec_models.rnn_scan(), rnn_feeds(), run=True)
    assert "http://" not in page.html and "https://" not in page.html
    browser.execute_cdp_cmd("Network.enable", {})
    browser.execute_cdp_cmd(
        "Network.emulateNetworkConditions",
        {"offline": True, "latency": 0, "downloadThroughput": 0, "uploadThroughput": 0},
    )
    try:
        _show(browser, page, tmp_path / "page.html")
        assert browser.find_elements("css selector", "#viewport g.node[data-node='rnn']")
    finally:
        online = {"offline": False, "latency": 0, "downloadThroughput": -1, "uploadThroughput": -1}
        browser.execute_cdp_cmd("Network.emulateNetworkConditions", online)


def test_search_finds_a_value_inside_a_body(browser: Any, tmp_path: Path) -> None:
    _show(browser, onnxflow.view(spec_models.rnn_scan()), tmp_path / "page.html")
    box = browser.find_element("id", "search")
    box.send_keys("t5")
    browser.find_element("css selector", "#results div[data-hit]").click()
    assert browser.find_element("id", "canvas").get_attribute("data-graph") == "main/rnn.body"
    selected = browser.find_element("css selector", "#viewport g.node.selected")
    assert selected.get_attribute("data-node") == "t5"


def big_transformer(layers: int = 60) -> onnx.ModelProto:
    """The zoo's transformer stand-in with ``layers`` layers (60: about 3,600 nodes, the size
    of a 12-layer export)."""
    from onnxflow.bench.zoo import transformer

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(transformer, "LAYERS", layers)
        return transformer.transformer_standin()


def test_a_3600_node_transformer_opens_section_by_section(browser: Any, tmp_path: Path) -> None:
    model = big_transformer()
    page = onnxflow.view(model)
    start = time.perf_counter()
    _show(browser, page, tmp_path / "page.html")
    opened = time.perf_counter() - start
    timing = browser.execute_script("return window.onnxflowView.timing['main#0']")
    print(
        f"{len(model.graph.node)} nodes, {len(page.html) / 1e6:.2f} MB page: opened in "
        f"{opened:.2f} s (load + first section: layout {timing['layout']:.0f} ms, "
        f"draw {timing['draw']:.0f} ms)"
    )  # recorded, not asserted: the machine is shared
    assert sorted(_drawn(browser, "main")) == sorted(node_key(n) for n in model.graph.node)


def _screenshot(browser: Any, name: str) -> None:
    if os.environ.get("ONNXFLOW_WRITE_SCREENSHOTS") == "1":
        IMAGES.mkdir(parents=True, exist_ok=True)
        browser.save_screenshot(str(SCREENSHOTS[name]))


def test_screenshots_of_the_spec_rnn_and_a_transformer(browser: Any, tmp_path: Path) -> None:
    """The README's and the guide's pictures (written with ONNXFLOW_WRITE_SCREENSHOTS=1)."""
    model = spec_models.rnn_scan()
    other = onnx.ModelProto()
    other.CopyFrom(model)
    (t4,) = [n for n in other.graph.node[0].attribute[0].g.node if n.output[0] == "t4"]
    t4.op_type = "Sub"
    browser.set_window_size(1280, 760)
    _show(browser, onnxflow.view(model, rnn_feeds(), run=True, against=other), tmp_path / "a.html")
    browser.execute_script("window.onnxflowView.open('main/rnn.body')")
    browser.find_element("css selector", "#viewport g.node[data-node='H_t']").click()
    browser.find_element("css selector", "#overview details summary").click()  # fold the list
    _screenshot(browser, "rnn")
    from onnxflow.bench.zoo.transformer import transformer_standin, transformer_standin_feeds

    page = onnxflow.view(transformer_standin(), transformer_standin_feeds(), run=True)
    _show(browser, page, tmp_path / "b.html")
    browser.execute_script("window.onnxflowView.reveal('main', 'l0_probs')")
    _screenshot(browser, "transformer")
    browser.set_window_size(1400, 900)
    for path in SCREENSHOTS.values():
        assert path.exists(), (
            f"{path} is missing: run ONNXFLOW_WRITE_SCREENSHOTS=1 pytest {__file__}"
        )
        assert path.stat().st_size < 150_000, f"{path} is over 150 kB"


def test_the_command_writes_the_page(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    path = tmp_path / "rnn.onnx"
    onnx.save(spec_models.rnn_scan(), path)
    assert main(["view", str(path), "--run", "--dim", "S=3", "-o", str(tmp_path / "r.html")]) == 0
    assert "wrote" in capsys.readouterr().out
    text = (tmp_path / "r.html").read_text()
    assert '"stats"' in text and "dagre" in text
    other = tmp_path / "other.onnx"
    onnx.save(spec_models.rnn_scan(seed=1), other)  # other weights: the outputs differ
    out = tmp_path / "c.html"
    assert main(["view", str(path), "--against", str(other), "-o", str(out)]) == 0
    assert "compared with" in capsys.readouterr().out and '"origins"' in out.read_text()
    assert main(["view", str(path)]) == 0  # no run: the graph only, beside the model
    assert '"stats"' not in path.with_suffix(".html").read_text()


def test_nested_loops_show_each_inner_run_by_both_iterations(browser: Any, tmp_path: Path) -> None:
    page = onnxflow.view(nested_loops(), {"M": np.array(3, np.int64)}, run=True)
    runs = page.document["iterations"]["main/outer.body/inner.body"]
    assert runs["labels"] == [f"{i}/{j}" for i in range(3) for j in range(3)]
    _show(browser, page, tmp_path / "page.html")
    browser.execute_script("window.onnxflowView.open('main/outer.body/inner.body')")
    browser.find_element("css selector", "#viewport g.node[data-node='inner_add']").click()
    box = "#panel .value[data-value='acc2_out']"
    browser.find_element("css selector", f"{box} svg.spark rect.it[data-iteration='7']").click()
    # outer iteration 2, inner iteration 1: acc2 = 3 + 2, acc2_out = 3 + 4 (tests/test_observers)
    assert browser.find_element("css selector", f"{box} b[data-iteration]").text == "2/1"
    assert _shown_stats(browser, "acc2_out")["max"] == 7
    # ``i``, read from the outer body, shows the outer body's three runs
    outer = browser.find_elements("css selector", "#panel .value[data-value='i'] svg.spark")
    assert outer[0].get_attribute("data-graph") == "main/outer.body"
    assert len(outer[0].find_elements("css selector", "rect.it")) == 3


def test_values_are_kept_only_when_asked() -> None:
    model, feeds = spec_models.rnn_scan(), rnn_feeds()
    plain = onnxflow.view(model, feeds, run=True).document
    assert "data" not in plain["stats"]["main"]["Y"]
    kept = onnxflow.view(model, feeds, run=True, values=True).document
    (y, _) = onnxflow.InferenceSession(model).run(None, feeds)
    np.testing.assert_array_equal(kept["stats"]["main"]["Y"]["data"], y.ravel())


def test_every_value_has_statistics_even_where_the_compiler_fuses_nodes() -> None:
    from onnxflow.bench.zoo.transformer import transformer_standin, transformer_standin_feeds

    model = transformer_standin()
    document = onnxflow.view(model, transformer_standin_feeds(), run=True).document
    outputs = {o for n in model.graph.node for o in n.output}
    assert outputs <= set(document["stats"]["main"])  # the values run as written
    assert len(document["times"]["main"]) < len(model.graph.node)  # times: as compiled


def test_a_model_onnxflow_cannot_compile_is_still_shown(browser: Any, tmp_path: Path) -> None:
    graph = helper.make_graph(
        [helper.make_node("Frobnicate", ["x"], ["y"], name="mystery", domain="example.custom")],
        "custom",
        [helper.make_tensor_value_info("x", F, [2])],
        [helper.make_tensor_value_info("y", F, [2])],
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid("example.custom", 1)]
    )
    page = onnxflow.view(model)
    _show(browser, page, tmp_path / "page.html")
    assert "Frobnicate" in browser.find_element("id", "overview").text
    browser.find_element("css selector", "#viewport g.node[data-node='mystery']").click()
    assert "none registered" in browser.find_element("id", "panel").text
    with pytest.raises(onnxflow.OnnxflowError, match="Frobnicate"):
        onnxflow.view(model, run=True)


def test_jupyter_shows_the_page_in_an_iframe() -> None:
    page = onnxflow.view(spec_models.loop_trip_count())
    shown = page._repr_html_()
    assert shown.startswith("<iframe srcdoc=") and "&lt;script" in shown
