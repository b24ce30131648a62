"""onnxflow.export.export_python: the exported module agrees with the session."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from onnxflow import InferenceSession
from onnxflow.export import export_python

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "exporters" / "data"


def _exported(model: Path, tmp_path: Path):
    path = export_python(model, tmp_path / "model.py")
    spec = importlib.util.spec_from_file_location("exported_model", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return path, module


def _agree(model: Path, module, feeds: dict) -> None:
    expected = InferenceSession(str(model)).run(None, feeds)
    got = module.run(feeds)
    assert len(got) == len(expected)
    for g, e in zip(got, expected, strict=True):
        np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-6)


def test_loop_trip_count_example(tmp_path: Path) -> None:
    model = ROOT / "examples" / "loop_trip_count.onnx"
    path, module = _exported(model, tmp_path)
    assert path.with_suffix(".npz").exists()
    _agree(model, module, {"b": np.array(7, np.int32)})


@pytest.mark.parametrize(
    "name",
    [
        "scripted_loops_torchscript_default",
        "while_counter_dynamo_default",
        "cond_linear_dynamo_default",
        "nested_cond_dynamo_default",
        "lstm_torchscript_default",
        "scan_cumulative_dynamo_default",
        "scan_rnn_cell_dynamo_default",
        "scan_two_carries_dynamo_default",
        "cond_in_scan_dynamo_default",
    ],
)
def test_torch_exported(name: str, tmp_path: Path) -> None:
    model = DATA / f"{name}.onnx"
    _, module = _exported(model, tmp_path)
    session = InferenceSession(str(model))
    with np.load(DATA / f"{name}.npz") as archive:
        names = [i.name for i in session.get_inputs()]
        feeds = {n: archive[f"in0_{k}"] for k, n in enumerate(names)}
    _agree(model, module, feeds)


def test_nodes_with_a_numpy_form_are_written_as_numpy(tmp_path: Path) -> None:
    """MatMul, Relu and Shape declare their NumPy form: the module calls NumPy, not kernels."""
    text = _exported(DATA / "transformer_dynamo_default.onnx", tmp_path)[0].read_text()
    assert "np.matmul(" in text and "np.maximum(" in text
    assert '"MatMul"' not in text and '"Relu"' not in text


def test_module_imports_only_numpy_and_onnxflow(tmp_path: Path) -> None:
    path, _ = _exported(DATA / "cond_linear_dynamo_default.onnx", tmp_path)
    imports = re.findall(r"^(?:from|import) (\w+)", path.read_text(), re.M)
    assert set(imports) <= {"numpy", "onnxflow", "pathlib", "ml_dtypes"}


def test_cli_writes_module_and_weights(tmp_path: Path, capsys) -> None:
    from onnxflow.cli import main

    out = tmp_path / "new" / "dir" / "model.py"  # directories made as needed
    model = str(ROOT / "examples" / "loop_trip_count.onnx")
    assert main(["export-python", model, "-o", str(out)]) == 0
    assert out.exists() and out.with_suffix(".npz").exists()
    assert "plain NumPy" in capsys.readouterr().out
    blocked = tmp_path / "file"
    blocked.write_text("")  # a file where a directory should be: an error, no traceback
    assert main(["export-python", model, "-o", str(blocked / "model.py")]) == 1
    assert "error:" in capsys.readouterr().err


def test_rnn_scan_example(tmp_path: Path) -> None:
    model = ROOT / "examples" / "rnn_scan.onnx"
    _, module = _exported(model, tmp_path)
    rng = np.random.default_rng(0)
    feeds = {
        "H_0": rng.standard_normal((2, 8)).astype(np.float32),
        "X": rng.standard_normal((5, 2, 4)).astype(np.float32),
    }
    _agree(model, module, feeds)


def _scan_model(in_axis: int, in_dir: int, out_axis: int, out_dir: int, opset: int = 21):
    """A running sum over the scan input's ``in_axis``, stacked along ``out_axis``."""
    f = TensorProto.FLOAT
    body = helper.make_graph(
        [helper.make_node("Add", ["s", "x"], ["s2"]), helper.make_node("Identity", ["s2"], ["y"])],
        "body",
        [helper.make_tensor_value_info("s", f, [3]), helper.make_tensor_value_info("x", f, [3])],
        [helper.make_tensor_value_info("s2", f, [3]), helper.make_tensor_value_info("y", f, [3])],
    )
    node = helper.make_node(
        "Scan", ["s0", "xs"], ["sf", "ys"], name="sum", body=body, num_scan_inputs=1,
        scan_input_axes=[in_axis], scan_input_directions=[in_dir],
        scan_output_axes=[out_axis], scan_output_directions=[out_dir],
    )  # fmt: skip
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("s0", f, [3]), helper.make_tensor_value_info("xs", f, None)],
        [helper.make_tensor_value_info("sf", f, [3]), helper.make_tensor_value_info("ys", f, None)],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


@pytest.mark.parametrize(
    ("in_axis", "in_dir", "out_axis", "out_dir"),
    [(0, 0, 0, 0), (1, 0, 0, 0), (1, 1, 0, 0), (-1, 0, 1, 0), (0, 1, -1, 1), (1, 0, 1, 1)],
)
def test_scan_axes_and_directions(
    in_axis: int, in_dir: int, out_axis: int, out_dir: int, tmp_path: Path
) -> None:
    model = tmp_path / "scan.onnx"
    onnx.save(_scan_model(in_axis, in_dir, out_axis, out_dir), model)
    _, module = _exported(model, tmp_path)
    xs = np.arange(12, dtype=np.float32).reshape(3, 4) if in_axis else np.ones((4, 3), np.float32)
    _agree(model, module, {"s0": np.zeros(3, np.float32), "xs": xs})


def _scan8_model(lens: bool, direction: int) -> onnx.ModelProto:
    """Scan 8: a running sum over axis 1 of xs [B, T, 3], per batch entry (axis 0)."""
    m = _scan_model(0, 0, 0, 0, opset=8)
    node = m.graph.node[0]
    for a in list(node.attribute):
        if a.name not in ("body", "num_scan_inputs"):
            node.attribute.remove(a)
    node.attribute.append(helper.make_attribute("directions", [direction]))
    node.input[:] = ["lens" if lens else "", "s0", "xs"]
    f = TensorProto.FLOAT
    del m.graph.input[:], m.graph.output[:]
    m.graph.input.extend(
        [
            helper.make_tensor_value_info("s0", f, ["B", 3]),
            helper.make_tensor_value_info("xs", f, ["B", "T", 3]),
        ]
        + ([helper.make_tensor_value_info("lens", TensorProto.INT32, ["B"])] if lens else [])
    )
    m.graph.output.extend(
        [
            helper.make_tensor_value_info("sf", f, ["B", 3]),
            helper.make_tensor_value_info("ys", f, ["B", "T", 3]),
        ]
    )
    return m


@pytest.mark.parametrize(("lens", "direction"), [(False, 0), (True, 0), (True, 1)])
def test_scan_8_batch_sequence_lens_and_direction(
    lens: bool, direction: int, tmp_path: Path
) -> None:
    model = tmp_path / "scan8.onnx"
    onnx.save(_scan8_model(lens, direction), model)
    _, module = _exported(model, tmp_path)
    feeds = {
        "s0": np.zeros((3, 3), np.float32),
        "xs": np.arange(36, dtype=np.float32).reshape(3, 4, 3),
    }
    if lens:
        feeds["lens"] = np.array([4, 2, 0], np.int32)  # padded rows, and an empty sequence
    _agree(model, module, feeds)


def test_sequence_map_over_a_sequence_and_a_tensor(tmp_path: Path) -> None:
    f = TensorProto.FLOAT
    body = helper.make_graph(
        [helper.make_node("Mul", ["x", "k"], ["y"]), helper.make_node("Shape", ["x"], ["n"])],
        "body",
        [helper.make_tensor_value_info("x", f, None), helper.make_tensor_value_info("k", f, [])],
        [helper.make_tensor_value_info("y", f, None),
         helper.make_tensor_value_info("n", TensorProto.INT64, [1])],
    )  # fmt: skip
    graph = helper.make_graph(
        [
            helper.make_node("SplitToSequence", ["xs", "sizes"], ["seq"]),
            helper.make_node("SequenceMap", ["seq", "k"], ["ys", "ns"], name="map", body=body),
            helper.make_node("ConcatFromSequence", ["ys"], ["y"], axis=0),
            helper.make_node("ConcatFromSequence", ["ns"], ["n"], axis=0),
        ],
        "g",
        [helper.make_tensor_value_info("xs", f, [6]), helper.make_tensor_value_info("k", f, [])],
        [helper.make_tensor_value_info("y", f, [6]),
         helper.make_tensor_value_info("n", TensorProto.INT64, [3])],
        [helper.make_tensor("sizes", TensorProto.INT64, [3], [1, 2, 3])],
    )  # fmt: skip
    model = tmp_path / "map.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), model)
    path, module = _exported(model, tmp_path)
    assert "for t in range(len(seq)):" in path.read_text()
    _agree(model, module, {"xs": np.arange(6, dtype=np.float32), "k": np.array(2, np.float32)})


def test_loops_that_run_no_iteration_give_typed_empty_scan_outputs(tmp_path: Path) -> None:
    """Zero iterations: the scan outputs are empty arrays of the body output's element type
    and static dimensions, as the session gives them."""
    m = _scan_model(0, 0, 0, 0)
    m.graph.node[0].attribute[0].g.output[1].type.tensor_type.elem_type = TensorProto.FLOAT
    model = tmp_path / "scan.onnx"
    onnx.save(m, model)
    _, module = _exported(model, tmp_path)
    feeds = {"s0": np.zeros(3, np.float32), "xs": np.zeros((0, 3), np.float32)}
    got = module.run(feeds)[1]
    expected = InferenceSession(str(model)).run(None, feeds)[1]
    assert got.shape == expected.shape == (0, 3) and got.dtype == expected.dtype
    loop = tmp_path / "loop.onnx"
    onnx.save(
        onnx.parser.parse_model(
            """
            <ir_version: 8, opset_import: ["": 17]>
            g (int64 m) => (int32[N, 2, 5] ys) {
                t = Constant <value = bool {1}> ()
                ys = Loop <body = b (int64 i, bool c) => (bool c_out, int32[2, 5] y) {
                    y = Constant <value = int32[2, 5] {1, 1, 1, 1, 1, 1, 1, 1, 1, 1}> ()
                    c_out = Identity (c)
                }> (m, t)
            }
            """
        ),
        loop,
    )
    _, module = _exported(loop, tmp_path)
    got = module.run({"m": np.array(0, np.int64)})[0]
    expected = InferenceSession(str(loop)).run(None, {"m": np.array(0, np.int64)})[0]
    assert got.shape == expected.shape == (0, 2, 5) and got.dtype == expected.dtype == np.int32


def test_loop_without_cond_ignores_the_body_condition(tmp_path: Path) -> None:
    """The spec's table: a trip count and no cond input run every iteration, whatever the
    body's condition says (onnxflow warns that the body computes one)."""
    i64, f = TensorProto.INT64, TensorProto.FLOAT
    body = helper.make_graph(
        [
            helper.make_node("Add", ["x", "one"], ["x2"]),
            helper.make_node("Less", ["x2", "three"], ["go"]),
        ],
        "body",
        [
            helper.make_tensor_value_info("i", i64, []),
            helper.make_tensor_value_info("c", TensorProto.BOOL, []),
            helper.make_tensor_value_info("x", f, []),
        ],
        [helper.make_tensor_value_info("go", TensorProto.BOOL, []),
         helper.make_tensor_value_info("x2", f, [])],
        [helper.make_tensor("one", f, [], [1.0]), helper.make_tensor("three", f, [], [3.0])],
    )  # fmt: skip
    node = helper.make_node("Loop", ["n", "", "x0"], ["xf"], name="count", body=body)
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("n", i64, []), helper.make_tensor_value_info("x0", f, [])],
        [helper.make_tensor_value_info("xf", f, [])],
    )
    model = tmp_path / "loop.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)]), model)
    _, module = _exported(model, tmp_path)
    (xf,) = module.run({"n": np.array(6, np.int64), "x0": np.array(0.0, np.float32)})
    assert xf == 6.0  # not 3.0, where the body's condition turns false


def test_skl2onnx_knn(tmp_path: Path) -> None:
    from skl2onnx import to_onnx
    from sklearn.datasets import load_iris
    from sklearn.neighbors import KNeighborsRegressor

    x, y = load_iris(return_X_y=True)
    x = x.astype(np.float32)
    knn = KNeighborsRegressor(n_neighbors=3).fit(x, y)
    model = tmp_path / "knn.onnx"
    model.write_bytes(to_onnx(knn, x[:1], target_opset=18).SerializeToString())
    _, module = _exported(model, tmp_path)
    _agree(model, module, {"X": x[::10]})
    np.testing.assert_allclose(
        module.run({"X": x[::10]})[0].ravel(), knn.predict(x[::10]), rtol=1e-5
    )


def test_tuple_results_inf_values_and_ml_dtypes_weights(tmp_path: Path) -> None:
    """MaxPool's kernel returns (Y, Indices) where the node lists only Y; an attribute and a
    scalar constant of inf; a bfloat16 and an int4 weight, stored as bytes and viewed back."""
    f = TensorProto.FLOAT
    bf16 = helper.make_tensor("w16", TensorProto.BFLOAT16, [2], [1.5, -2.0])
    i4 = helper.make_tensor("w4", TensorProto.INT4, [3], [-8, 7, 3])
    nodes = [
        helper.make_node("MaxPool", ["x"], ["p"], kernel_shape=[2]),
        helper.make_node("Constant", [], ["lo"], value_float=float("-inf")),
        helper.make_node("Max", ["p", "lo"], ["m"]),
        helper.make_node("Shrink", ["m"], ["s"], lambd=float("inf")),
        helper.make_node("Cast", ["w16"], ["w16f"], to=f),
        helper.make_node("Cast", ["w4"], ["w4f"], to=f),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", f, [1, 1, 4])],
        [helper.make_tensor_value_info(n, f, None) for n in ("m", "s", "w16f", "w4f")],
        [bf16, i4],
    )
    model = tmp_path / "m.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)]), model)
    path, module = _exported(model, tmp_path)
    text = path.read_text()
    assert 'float("-inf")' in text and 'float("inf")' in text and "import ml_dtypes" in text
    _agree(model, module, {"x": np.array([[[-3.0, 5.0, 1e30, 2.0]]], np.float32)})


GENERATION = ROOT / "tests" / "microsoft" / "data"


@pytest.mark.parametrize(
    ("name", "extra"),
    [
        ("gpt2_greedy.onnx", {}),
        ("gpt2_beam.onnx", {"num_beams": np.array([3], np.int32),
                            "num_return_sequences": np.array([2], np.int32),
                            "length_penalty": np.array([1.0], np.float32), "masked": True}),
    ],
)  # fmt: skip
def test_generation_ops_run_their_stored_decoder(name: str, extra: dict, tmp_path: Path) -> None:
    """A contrib operator holding a subgraph calls its kernel with the decoder, kept serialized
    in the weights: the exported module generates the session's tokens."""
    model = GENERATION / name
    path, module = _exported(model, tmp_path)
    assert "from onnxflow.export.support import kernel, subgraph" in path.read_text()
    prompts = np.load(GENERATION / "gpt2_prompts.npz")
    feeds = {
        "prompt_ids": prompts["two"],
        "max_length": np.array([12], np.int32),
        "min_length": np.array([1], np.int32),
        "repetition_penalty": np.array([1.0], np.float32),
        **extra,
    }
    if feeds.pop("masked", False):
        feeds["prompt_mask"] = prompts["two_mask"]
    session = InferenceSession(str(model))
    feeds = {k: v for k, v in feeds.items() if k in {i.name for i in session.get_inputs()}}
    for got, want in zip(module.run(feeds), session.run(None, feeds), strict=True):
        np.testing.assert_array_equal(got, want)
