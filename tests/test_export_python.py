"""onnxflow.export.export_python: the exported module agrees with the session."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from typing import Any

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
        assert np.shape(g) == np.shape(e), f"shape {np.shape(g)}, expected {np.shape(e)}"


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
    path, module = _exported(model, tmp_path)
    assert "onnxflow" not in re.findall(r"^(?:from|import) (\w+)", path.read_text(), re.M)
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


def _one_node_model(node: onnx.NodeProto, inputs: dict, outputs: list[str], opset: int, inits=()):
    """A model of ``node`` alone: float inputs of the given shapes, float outputs."""
    f = TensorProto.FLOAT
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info(n, f, s) for n, s in inputs.items()],
        [helper.make_tensor_value_info(o, f, None) for o in outputs],
        list(inits),
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


@pytest.mark.parametrize(("opset", "spatial"), [(7, 1), (9, 1), (7, 0)])
def test_batch_normalization_with_one_output_is_inference(
    opset: int, spatial: int, tmp_path: Path
) -> None:
    """Issue 32: BatchNormalization 7-13 listing only Y normalizes with the stored statistics.
    The exported module built its one-node model with all five outputs, so the kernel took
    the batch's statistics (off by 22 here). spatial=0 (statistics per activation) has no NumPy
    form: it runs onnxflow's kernel through a one-node model listing exactly Y."""
    rng = np.random.default_rng(0)
    stats = (3,) if spatial else (3, 4)
    inits = [
        onnx.numpy_helper.from_array(v.astype(np.float32), n)
        for n, v in (
            ("s", rng.random(stats) + 0.5),
            ("b", rng.standard_normal(stats)),
            ("m", rng.standard_normal(stats) + 5),
            ("v", rng.random(stats) + 0.5),
        )
    ]
    attrs = {} if opset >= 9 else {"spatial": spatial}
    node = helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"], **attrs)
    model = tmp_path / "bn.onnx"
    onnx.save(_one_node_model(node, {"x": [2, 3, 4]}, ["y"], opset, inits), model)
    path, module = _exported(model, tmp_path)
    assert ("kernel(" in path.read_text()) == (not spatial)
    _agree(model, module, {"x": rng.standard_normal((2, 3, 4)).astype(np.float32)})


def test_a_kernel_call_lists_the_nodes_outputs_omitted_ones_kept_empty(tmp_path: Path) -> None:
    """BatchNormalization in training mode listing Y and the running variance, not the
    running mean: the one-node model lists the same outputs, the empty one kept empty."""
    rng = np.random.default_rng(1)
    inits = [
        onnx.numpy_helper.from_array(rng.random(3).astype(np.float32) + 0.5, n)
        for n in ("s", "b", "m", "v")
    ]
    node = helper.make_node(
        "BatchNormalization", ["x", "s", "b", "m", "v"], ["y", "", "rv"], training_mode=1
    )
    model = tmp_path / "bn.onnx"
    onnx.save(_one_node_model(node, {"x": [2, 3, 4]}, ["y", "rv"], 15, inits), model)
    path, module = _exported(model, tmp_path)
    assert "_omitted=(1,)" in path.read_text()
    _agree(model, module, {"x": rng.standard_normal((2, 3, 4)).astype(np.float32)})


def _small_cnn() -> onnx.ModelProto:
    """A classifier using the common ops that have a NumPy form: Conv, BatchNormalization,
    Relu, MaxPool, AveragePool, GlobalAveragePool, Flatten, Gemm, Softmax, and the shape ops
    around them (Shape, Gather, Unsqueeze, Concat, Reshape, Transpose, Slice, Squeeze, Cast,
    ReduceMean, Sigmoid, Div, Clip, Where)."""
    rng = np.random.default_rng(0)

    def w(name: str, *shape: int) -> TensorProto:
        return onnx.numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), name)

    def i64(name: str, *values: int) -> TensorProto:
        return onnx.numpy_helper.from_array(np.array(values, np.int64), name)

    inits = [
        w("W", 4, 3, 3, 3), w("B", 4), w("W2", 8, 2, 3, 3),
        *(w(n, 8) for n in ("s", "bb", "m")),
        onnx.numpy_helper.from_array(rng.random(8).astype(np.float32) + 0.5, "v"),
        w("G", 10, 8), w("GB", 10),
        onnx.numpy_helper.from_array(np.array(0, np.int64), "zero"),
        i64("axes0", 0), i64("start", 1), i64("end", 3), i64("minus1", -1),
        onnx.numpy_helper.from_array(np.array(-1.0, np.float32), "lo"),
        onnx.numpy_helper.from_array(np.array(4.0, np.float32), "hi"),
    ]  # fmt: skip
    make = helper.make_node
    nodes = [
        make("Conv", ["x", "W", "B"], ["c1"], pads=[1, 1, 1, 1]),
        make("Relu", ["c1"], ["r1"]),
        make("Conv", ["r1", "W2"], ["c2"], group=2, strides=[2, 2], auto_pad="SAME_UPPER"),
        make("BatchNormalization", ["c2", "s", "bb", "m", "v"], ["n2"]),
        make("Clip", ["n2", "lo", "hi"], ["k2"]),
        make("MaxPool", ["k2"], ["p2"], kernel_shape=[2, 2], ceil_mode=1),
        make("AveragePool", ["k2"], ["a2"], kernel_shape=[2, 2], pads=[1, 1, 0, 0]),
        make("GlobalAveragePool", ["p2"], ["g2"]),
        make("Flatten", ["g2"], ["f2"]),
        make("Gemm", ["f2", "G", "GB"], ["logits"], transB=1, alpha=0.5),
        make("Softmax", ["logits"], ["probs"], axis=-1),
        make("Shape", ["a2"], ["shape"]),
        make("Gather", ["shape", "zero"], ["batch"], axis=0),  # [N]
        make("Unsqueeze", ["batch", "axes0"], ["batch1"]),
        make("Concat", ["batch1", "minus1"], ["flat_shape"], axis=0),
        make("Reshape", ["a2", "flat_shape"], ["flat"]),
        make("Transpose", ["a2"], ["t2"], perm=[0, 2, 3, 1]),
        make("Slice", ["t2", "start", "end", "start"], ["sl"]),
        make("ReduceMean", ["sl"], ["mean"], axes=[1, 2], keepdims=0),
        make("Sigmoid", ["mean"], ["sig"]),
        make("Cast", ["batch"], ["batchf"], to=TensorProto.FLOAT),
        make("Div", ["sig", "batchf"], ["scaled"]),
        make("Greater", ["scaled", "sig"], ["more"]),
        make("Where", ["more", "scaled", "sig"], ["picked"]),
        make("Squeeze", ["g2"], ["sq"]),
    ]
    f = TensorProto.FLOAT
    graph = helper.make_graph(
        nodes,
        "small_cnn",
        [helper.make_tensor_value_info("x", f, ["N", 3, 9, 9])],
        [helper.make_tensor_value_info(n, f, None) for n in ("probs", "flat", "picked", "sq")],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


#: Run in a fresh interpreter: import the exported module with onnxflow and onnx
#: unimportable, run it on the saved feeds and save its outputs.
_BLOCKED_RUN = """
import importlib.abc, importlib.util, sys
import numpy as np

class Blocker(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("onnxflow", "onnx"):
            raise ImportError(f"{name} is blocked: the exported module must stand alone")
        return None

sys.meta_path.insert(0, Blocker())
module_path, feeds_path, out_path = sys.argv[1:]
spec = importlib.util.spec_from_file_location("exported", module_path)
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
feeds = dict(np.load(feeds_path))
outputs = module.run(feeds)
np.savez(out_path, *outputs)
"""


@pytest.mark.parametrize(
    "model",
    [
        pytest.param(_small_cnn(), id="small_cnn"),
        pytest.param(DATA / "transformer_dynamo_default.onnx", id="transformer_dynamo"),
    ],
)
def test_a_module_of_numpy_forms_stands_alone(model: Any, tmp_path: Path) -> None:
    """Every node has a NumPy form: the module imports NumPy only, says so, and runs in an
    interpreter where onnxflow and onnx cannot be imported, giving the session's outputs."""
    import subprocess
    import sys

    path = export_python(model, tmp_path / "model.py")
    text = path.read_text()
    assert "Every node is plain NumPy" in text and "kernel(" not in text
    assert set(re.findall(r"^(?:from|import) (\w+)", text, re.M)) == {"numpy", "pathlib"}
    session = InferenceSession(model if isinstance(model, onnx.ModelProto) else str(model))
    if isinstance(model, Path):
        with np.load(model.with_suffix(".npz")) as archive:
            names = [i.name for i in session.get_inputs()]
            feeds = {n: archive[f"in0_{k}"] for k, n in enumerate(names)}
    else:
        feeds = {"x": np.random.default_rng(1).standard_normal((2, 3, 9, 9)).astype(np.float32)}
    np.savez(tmp_path / "feeds.npz", **feeds)
    script = tmp_path / "blocked_run.py"
    script.write_text(_BLOCKED_RUN)
    args = [sys.executable, str(script), str(path), str(tmp_path / "feeds.npz")]
    done = subprocess.run([*args, str(tmp_path / "out.npz")], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    with np.load(tmp_path / "out.npz") as out:
        got = [out[f"arr_{k}"] for k in range(len(out.files))]
    expected = session.run(None, feeds)
    for g, e in zip(got, expected, strict=True):
        np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-6)
        assert g.dtype == e.dtype


def test_the_header_names_the_ops_that_call_onnxflow(tmp_path: Path) -> None:
    """An op without a NumPy form (Hardmax, here) calls onnxflow's kernel: the module's header
    names it, and the module imports onnxflow's support for it."""
    node = helper.make_node("Hardmax", ["x"], ["y"])
    model = tmp_path / "hardmax.onnx"
    onnx.save(_one_node_model(node, {"x": [2, 4]}, ["y"], 13), model)
    path, module = _exported(model, tmp_path)
    text = path.read_text()
    header = text.split('"""')[1]
    assert "call onnxflow's kernels:\nHardmax." in header
    assert "from onnxflow.export.support import kernel" in text
    _agree(model, module, {"x": np.arange(8, dtype=np.float32).reshape(2, 4)})


def test_a_kernel_called_through_a_one_node_model_takes_a_sequence() -> None:
    """A builder kernel's one-node model declares a list input as a sequence (it made it an
    array, which fails for a list of arrays of different lengths)."""
    from onnxflow.export.support import kernel

    seq = [np.ones(2, np.float32), np.zeros(3, np.float32)]
    got = kernel("", "OptionalGetElement", 18)(seq)
    assert isinstance(got, list) and [len(v) for v in got] == [2, 3]


@pytest.mark.parametrize("outputs", [["a"], ["a", "b", "c"], ["a", "", "c"]])
def test_split_writes_each_listed_output(outputs: list[str], tmp_path: Path) -> None:
    """Split's NumPy form gives as many parts as the node lists (one: the part itself, not a
    1-tuple; an omitted one: assigned to ``_``)."""
    node = helper.make_node("Split", ["x"], outputs, axis=1)
    model = tmp_path / "split.onnx"
    onnx.save(_one_node_model(node, {"x": [2, 6]}, [o for o in outputs if o], 13), model)
    path, module = _exported(model, tmp_path)
    assert "onnx_split(" in path.read_text()
    _agree(model, module, {"x": np.arange(12, dtype=np.float32).reshape(2, 6)})
