"""Bad models fail at session creation with a specific OnnxflowError naming node, op or opset."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import onnx
import pytest
from model_builders import B, F, const, counter_body, model, vi
from onnx import TensorProto, helper

import onnxflow
from onnxflow.errors import UnsupportedVersionError
from onnxflow.ir.validate import _check_tensor

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def relu_chain(*pairs: tuple[str, str, str], inputs=("X",), outputs=("Y",), inits=()):
    """Relu nodes given as (name, input, output)."""
    nodes = [helper.make_node("Relu", [i], [o], name=n) for n, i, o in pairs]
    return model(nodes, [vi(n, F, [2]) for n in inputs], [vi(n, F, [2]) for n in outputs], inits)


# -- unreadable, truncated, garbage --------------------------------------------------------------


def test_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "nowhere.onnx"
    with pytest.raises(onnxflow.ModelLoadError, match=r"cannot read model file .*nowhere\.onnx"):
        onnxflow.InferenceSession(path)


def test_directory_instead_of_file(tmp_path: Path) -> None:
    with pytest.raises(onnxflow.ModelLoadError, match="cannot read model file"):
        onnxflow.InferenceSession(tmp_path)


@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="needs a character device")
def test_a_character_device_is_refused_before_reading() -> None:
    with pytest.raises(onnxflow.ModelLoadError, match="not a regular file .a character device"):
        onnxflow.InferenceSession("/dev/zero")


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs POSIX FIFOs")
def test_a_fifo_is_refused_without_opening_it(tmp_path: Path) -> None:
    fifo = tmp_path / "model.onnx"
    os.mkfifo(fifo)  # opening it to read would block until a writer came
    with pytest.raises(onnxflow.ModelLoadError, match="not a regular file .a FIFO"):
        onnxflow.InferenceSession(fifo)


def test_a_file_over_protobufs_limit_is_refused_before_reading(tmp_path: Path) -> None:
    path = tmp_path / "huge.onnx"
    with open(path, "wb") as f:  # sparse: no disk used
        f.truncate(2**31)
    with pytest.raises(onnxflow.ModelLoadError, match="over protobuf's limit"):
        onnxflow.InferenceSession(path)


def test_wrong_source_type() -> None:
    with pytest.raises(onnxflow.ModelLoadError, match="found int"):
        onnxflow.InferenceSession(42)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "data", [b"", b"\xff" * 64, b"not an onnx model at all", b"\x08\x07\x12"], ids=repr
)
def test_garbage_bytes(data: bytes, tmp_path: Path) -> None:
    with pytest.raises(onnxflow.ModelLoadError, match="is not a valid ONNX model"):
        onnxflow.InferenceSession(data)
    path = tmp_path / "garbage.onnx"
    path.write_bytes(data)
    with pytest.raises(onnxflow.ModelLoadError, match=r"garbage\.onnx.* is not a valid ONNX model"):
        onnxflow.InferenceSession(path)


def test_truncated_model_always_fails_cleanly() -> None:
    data = (EXAMPLES / "rnn_scan.onnx").read_bytes()
    kinds = set()
    for cut in range(1, len(data), max(1, len(data) // 97)):
        with pytest.raises(onnxflow.OnnxflowError) as info:
            onnxflow.InferenceSession(data[:cut])
        kinds.add(type(info.value))
    assert any(issubclass(k, onnxflow.ModelLoadError) for k in kinds)


# -- graph structure -----------------------------------------------------------------------------


def test_cycle_is_named_as_such() -> None:
    m = relu_chain(("a", "Y", "T"), ("b", "T", "Y"))
    with pytest.raises(onnxflow.ValidationError, match=r"cycle: Relu 'a' -> Relu 'b' -> Relu 'a'"):
        onnxflow.InferenceSession(m, check=False)


def test_node_reading_its_own_output_is_a_cycle() -> None:
    m = relu_chain(("self", "Y", "Y"))
    with pytest.raises(onnxflow.ValidationError, match=r"cycle: Relu 'self' -> Relu 'self'"):
        onnxflow.InferenceSession(m, check=False)


def test_cycle_through_a_subgraph_capture() -> None:
    then = helper.make_graph(
        [helper.make_node("Relu", ["Y"], ["t"])], "then", [], [vi("t", F, [2])]
    )
    m = model(
        [
            helper.make_node("If", ["C"], ["U"], name="if", then_branch=then, else_branch=then),
            helper.make_node("Relu", ["U"], ["Y"], name="relu"),
        ],
        [vi("C", B, [])],
        [vi("Y", F, [2])],
    )
    with pytest.raises(onnxflow.ValidationError, match=r"cycle: .*If 'if'.*Relu 'relu'"):
        onnxflow.InferenceSession(m, check=False)


def test_undefined_name() -> None:
    m = relu_chain(("r", "nowhere", "Y"))
    with pytest.raises(onnxflow.ValidationError, match=r"Relu 'r'.*'nowhere', which is never"):
        onnxflow.InferenceSession(m, check=False)


def test_undefined_graph_output() -> None:
    m = relu_chain(("r", "X", "T"))
    with pytest.raises(onnxflow.ValidationError, match=r"graph output 'Y' is never defined"):
        onnxflow.InferenceSession(m, check=False)


@pytest.mark.parametrize(
    "pairs, inputs, inits",
    [
        ((("a", "X", "Y"), ("b", "X", "Y")), ("X",), ()),
        ((("a", "X", "X"), ("b", "X", "Y")), ("X",), ()),
        ((("a", "X", "W"), ("b", "W", "Y")), ("X",), (const("W", np.ones(2, np.float32)),)),
    ],
    ids=["two_nodes", "node_output_is_a_graph_input", "node_output_is_an_initializer"],
)
def test_name_assigned_twice(pairs, inputs, inits) -> None:
    m = relu_chain(*pairs, inputs=inputs, inits=inits)
    with pytest.raises(onnxflow.ValidationError, match=r"assigns '\w', which is already defined"):
        onnxflow.InferenceSession(m, check=False)


def test_initializer_given_twice() -> None:
    w = const("W", np.ones(2, np.float32))
    m = relu_chain(("a", "W", "Y"), inputs=(), inits=(w, w))
    with pytest.raises(onnxflow.ValidationError, match=r"initializer assigns 'W'"):
        onnxflow.InferenceSession(m, check=False)


def test_subgraph_node_redefining_an_outer_name() -> None:
    body = counter_body([helper.make_node("Relu", ["x_out"], ["X"], name="shadow")])
    loop = helper.make_node("Loop", ["M", "", "x0"], ["xf"], name="loop", body=body)
    m = model(
        [loop],
        [vi("X", F, [1]), vi("x0", F, [1])],
        [vi("xf", F, [1])],
        [const("M", np.int64(2))],
    )
    with pytest.raises(
        onnxflow.ValidationError, match=r"graph 'counter': output of Relu 'shadow'.* redefines 'X'"
    ):
        onnxflow.InferenceSession(m, check=False)


def test_a_subgraph_input_may_shadow_an_outer_name() -> None:
    """A body's inputs are its parameters: the IR asks only node outputs to differ from the
    outer names they could hide (onnxruntime's generation models name their decoder's inputs
    like the main graph's). Inside, the name is the body's input."""
    loop = helper.make_node("Loop", ["M", "", "x"], ["xf"], name="loop", body=counter_body())
    m = model([loop], [vi("x", F, [1])], [vi("xf", F, [1])], [const("M", np.int64(2))])
    (xf,) = onnxflow.InferenceSession(m).run(None, {"x": np.array([5.0], np.float32)})
    assert xf.tolist() == [7.0]  # the body adds 1 to its own x, twice


def test_a_subgraph_node_output_redefining_an_outer_name() -> None:
    body = counter_body([helper.make_node("Neg", ["x_out"], ["M"])])
    loop = helper.make_node("Loop", ["M", "", "x0"], ["xf"], name="loop", body=body)
    m = model([loop], [vi("x0", F, [1])], [vi("xf", F, [1])], [const("M", np.int64(2))])
    with pytest.raises(onnxflow.ValidationError, match=r"output of Neg .*redefines 'M'"):
        onnxflow.InferenceSession(m, check=False)


# -- control-flow arity --------------------------------------------------------------------------


def test_loop_body_with_wrong_input_count() -> None:
    body = counter_body()
    body.input.append(vi("extra", F, [1]))
    loop = helper.make_node("Loop", ["M", "", "x0"], ["xf"], name="loop", body=body)
    m = model([loop], [vi("x0", F, [1])], [vi("xf", F, [1])], [const("M", np.int64(2))], opset=16)
    with pytest.raises(
        onnxflow.ValidationError,
        match=r"Loop 'loop' \(opset 16\): body has 4 inputs, expected 2 .* \+ 1 loop-carried = 3",
    ):
        onnxflow.InferenceSession(m, check=False)


def test_loop_node_with_more_outputs_than_the_body_gives() -> None:
    loop = helper.make_node("Loop", ["M", "", "x0"], ["xf", "s"], name="loop", body=counter_body())
    m = model(
        [loop],
        [vi("x0", F, [1])],
        [vi("xf", F, [1]), vi("s", F, None)],
        [const("M", np.int64(2))],
    )
    with pytest.raises(onnxflow.ValidationError, match=r"Loop 'loop' \(opset 21\): node has 2"):
        onnxflow.InferenceSession(m, check=False)


def test_scan_body_with_wrong_input_count() -> None:
    body = helper.make_graph(
        [helper.make_node("Add", ["s", "x"], ["s_out"])],
        "body",
        [vi("s", F, [2]), vi("x", F, [2]), vi("extra", F, [2])],
        [vi("s_out", F, [2])],
    )
    scan = helper.make_node("Scan", ["s0", "X"], ["sf"], name="scan", body=body, num_scan_inputs=1)
    m = model([scan], [vi("s0", F, [2]), vi("X", F, [3, 2])], [vi("sf", F, [2])])
    with pytest.raises(
        onnxflow.ValidationError, match=r"Scan 'scan' \(opset 21\): body has 3 inputs, expected 1"
    ):
        onnxflow.InferenceSession(m, check=False)


def test_if_branch_with_wrong_output_count() -> None:
    one = helper.make_graph([], "one", [], [vi("X", F, [2])])
    two = helper.make_graph([], "two", [], [vi("X", F, [2]), vi("X2", F, [2])])
    node = helper.make_node("If", ["C"], ["Y"], name="if", then_branch=one, else_branch=two)
    m = model(
        [helper.make_node("Identity", ["X"], ["X2"]), node],
        [vi("C", B, []), vi("X", F, [2])],
        [vi("Y", F, [2])],
    )
    with pytest.raises(onnxflow.ValidationError, match=r"If 'if' \(opset 21\): else_branch has 2"):
        onnxflow.InferenceSession(m, check=False)


# -- operators and versions ----------------------------------------------------------------------


@pytest.mark.parametrize("check", [True, False])
def test_unknown_ops_are_listed_together(check: bool) -> None:
    m = model(
        [
            helper.make_node("NoSuchOp", ["X"], ["T"]),
            helper.make_node("Relu", ["T"], ["U"]),
            helper.make_node("Frobnicate", ["U"], ["V"], domain="custom.a"),
            helper.make_node("NoSuchOp", ["V"], ["Y"]),
        ],
        [vi("X", F, [2])],
        [vi("Y", F, [2])],
    )
    m.opset_import.append(helper.make_opsetid("custom.a", 3))
    with pytest.raises(onnxflow.UnsupportedOperatorError) as info:
        onnxflow.InferenceSession(m, check=check)
    assert info.value.missing == [("", "NoSuchOp", 21), ("custom.a", "Frobnicate", 3)]
    assert "NoSuchOp (opset 21)" in str(info.value)
    assert "custom.a.Frobnicate (opset 3)" in str(info.value)


@pytest.mark.parametrize(
    "domain, version, message",
    [
        ("", 99, r"imports opset 99 of 'ai.onnx'; newest supported is \d+"),
        ("ai.onnx", 99, r"imports opset 99 of 'ai.onnx'"),
        ("ai.onnx.ml", 42, r"imports opset 42 of 'ai.onnx.ml'; newest supported is \d+"),
    ],
)
def test_opset_newer_than_supported(domain: str, version: int, message: str) -> None:
    m = relu_chain(("r", "X", "Y"))
    del m.opset_import[:]
    m.opset_import.append(helper.make_opsetid(domain, version))
    with pytest.raises(UnsupportedVersionError, match=message):
        onnxflow.InferenceSession(m)


def test_ir_version_newer_than_supported() -> None:
    m = relu_chain(("r", "X", "Y"))
    m.ir_version = onnx.IR_VERSION + 5
    with pytest.raises(UnsupportedVersionError, match=rf"IR version {onnx.IR_VERSION + 5}"):
        onnxflow.InferenceSession(m)


def test_conflicting_and_invalid_opset_imports() -> None:
    m = relu_chain(("r", "X", "Y"))
    m.opset_import.extend([helper.make_opsetid("", 13), helper.make_opsetid("custom", 0)])
    with pytest.raises(onnxflow.ValidationError) as info:
        onnxflow.InferenceSession(m, check=False)
    assert "imports domain 'ai.onnx' twice, at opsets 21 and 13" in str(info.value)
    assert "imports opset 0 of 'custom'" in str(info.value)


def test_domain_not_imported_names_the_node() -> None:
    m = relu_chain(("r", "X", "Y"))
    m.graph.node[0].domain = "some.where"
    with pytest.raises(onnxflow.ValidationError, match=r"some\.where\.Relu 'r'.*not imported"):
        onnxflow.InferenceSession(m, check=False)


# -- stored tensors ------------------------------------------------------------------------------


def _model_with_initializer(t: TensorProto):
    node = helper.make_node("Identity", ["W"], ["Y"], name="id")
    return model([node], [], [vi("Y", t.data_type, None)], [t])


def _tensor(dt: int, dims: list[int], raw: bytes | None = None, **fields) -> TensorProto:
    """A tensor built field by field, skipping the size checks of onnx.helper."""
    t = TensorProto(name="W", data_type=dt, dims=dims, **fields)
    if raw is not None:
        t.raw_data = raw
    return t


@pytest.mark.parametrize(
    "tensor, message",
    [
        (
            _tensor(TensorProto.FLOAT, [1000], b"\0" * 8),
            r"tensor 'W' \(dims \[1000\]\): float data needs 4000 bytes of raw_data .*found 8",
        ),
        (
            _tensor(TensorProto.INT64, [3], int64_data=[1, 2]),
            r"tensor 'W' \(dims \[3\]\): int64 data needs 3 entries of int64_data .*found 2",
        ),
        (
            _tensor(TensorProto.INT4, [5], b"\0\0"),
            r"int4 data needs 3 bytes of raw_data for 5 elements, found 2",
        ),
        (
            _tensor(TensorProto.FLOAT, [10**12, 10**12], float_data=[1.0]),
            r"needs 1000000000000000000000000 entries of float_data",
        ),
        (
            _tensor(TensorProto.STRING, [2], string_data=[b"ok", b"\xff\xfe"]),
            r"tensor 'W' \(dims \[2\]\): a string element is not valid UTF-8",
        ),
    ],
    ids=["raw_too_short", "typed_too_short", "int4_packed", "huge_dims", "bad_utf8"],
)
def test_initializer_data_must_match_its_dims(tensor: TensorProto, message: str) -> None:
    with pytest.raises(onnxflow.ValidationError, match=message):
        onnxflow.InferenceSession(_model_with_initializer(tensor), check=False)


def test_unknown_element_type() -> None:
    t = helper.make_tensor("W", TensorProto.FLOAT, [1], [1.0])
    t.data_type = 999
    with pytest.raises(onnxflow.ValidationError, match=r"tensor 'W'.*unknown element type 999"):
        onnxflow.InferenceSession(_model_with_initializer(t), check=False)


def test_constant_attribute_tensor_is_checked_too() -> None:
    value = _tensor(TensorProto.FLOAT, [4], b"\0" * 4)
    value.name = "v"
    m = model(
        [helper.make_node("Constant", [], ["Y"], name="c", value=value)], [], [vi("Y", F, [4])]
    )
    with pytest.raises(onnxflow.ValidationError, match=r"tensor 'v' \(dims \[4\]\)"):
        onnxflow.InferenceSession(m, check=False)


def test_every_element_type_round_trips_through_the_size_check() -> None:
    """The size rule accepts what onnx itself writes, raw and typed, for every element type."""
    for name, dt in TensorProto.DataType.items():
        if dt in (TensorProto.UNDEFINED, TensorProto.STRING):
            continue
        values = np.zeros(5, dtype=helper.tensor_dtype_to_np_dtype(dt))
        for t in (
            onnx.numpy_helper.from_array(values, "W"),
            helper.make_tensor("W", dt, [5], values.tolist(), raw=False),
        ):
            problems: list[str] = []
            _check_tensor(t, problems)
            assert not problems, (name, problems)


def test_examples_pass_every_rule() -> None:
    for path in EXAMPLES.glob("*.onnx"):
        onnxflow.InferenceSession(path)


def _nested_ifs(depth: int) -> onnx.ModelProto:
    """``depth`` Ifs, each in the previous one's then-branch, built in place (helper.make_node
    copies its attributes, and protobuf's copy refuses past ~33 levels)."""
    out_info = helper.make_tensor_value_info
    m = helper.make_model(
        helper.make_graph(
            [],
            "main",
            [out_info("x", TensorProto.FLOAT, [1]), out_info("c", TensorProto.BOOL, [])],
            [out_info("y", TensorProto.FLOAT, [1])],
        ),
        opset_imports=[helper.make_opsetid("", 13)],
    )
    graph, out = m.graph, "y"
    for d in range(depth):
        node = graph.node.add(op_type="If", input=["c"], output=[out])
        other = node.attribute.add(name="else_branch", type=onnx.AttributeProto.GRAPH)
        other.g.name = f"e{d}"
        other.g.node.add(op_type="Identity", input=["x"], output=[f"e{d}"])
        other.g.output.add().CopyFrom(out_info(f"e{d}", TensorProto.FLOAT, [1]))
        then = node.attribute.add(name="then_branch", type=onnx.AttributeProto.GRAPH)
        graph, out = then.g, f"t{d}"
        graph.name = out
        graph.output.add().CopyFrom(out_info(out, TensorProto.FLOAT, [1]))
    graph.node.add(op_type="Identity", input=["x"], output=[out])
    return m


def test_subgraphs_nested_as_deep_as_protobuf_allows_run() -> None:
    sess = onnxflow.InferenceSession(_nested_ifs(31))
    feeds = {"x": np.array([2.0], np.float32), "c": np.array(True)}
    assert sess.run(None, feeds)[0].tolist() == [2.0]


@pytest.mark.parametrize("depth", [32, 1000])
@pytest.mark.parametrize("check", [True, False])
def test_deeper_nesting_is_a_validation_error_naming_the_depth(depth: int, check: bool) -> None:
    with pytest.raises(onnxflow.ValidationError, match=f"subgraphs nest {depth} levels deep"):
        onnxflow.InferenceSession(_nested_ifs(depth), check=check)
