"""External data: read only from regular files inside the model's directory, within their size."""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import numpy as np
import onnx
import pytest
from model_builders import F, const, counter_body, model, vi
from onnx import helper

import onnxflow

W = np.arange(64, dtype=np.float32).reshape(8, 8)
X = np.ones((2, 8), np.float32)


def matmul_model() -> onnx.ModelProto:
    node = helper.make_node("MatMul", ["X", "W"], ["Y"])
    return model([node], [vi("X", F, [2, 8])], [vi("Y", F, [2, 8])], [const("W", W)])


def save_external(m: onnx.ModelProto, directory: Path, location: str = "weights.bin") -> Path:
    """Save ``m`` with every tensor in ``location`` next to it; return the model path."""
    (directory / location).parent.mkdir(parents=True, exist_ok=True)
    path = directory / "model.onnx"
    onnx.save_model(
        m,
        path,
        save_as_external_data=True,
        location=location,
        size_threshold=0,
        all_tensors_to_one_file=True,
    )
    return path


def tamper(path: Path, **entries: str) -> None:
    """Rewrite the external-data entries of every external tensor of the saved model."""
    m = onnx.load_model(path, load_external_data=False)
    for t in onnxflow.ir.load.all_tensors(m):
        if t.data_location == onnx.TensorProto.EXTERNAL:
            info = {e.key: e.value for e in t.external_data} | entries
            del t.external_data[:]
            for k, v in info.items():
                t.external_data.add(key=k, value=v)
    path.write_bytes(m.SerializeToString())


def check_runs(source, **kw) -> None:
    (y,) = onnxflow.InferenceSession(source, **kw).run(None, {"X": X})
    np.testing.assert_array_equal(y, X @ W)


def test_relative_location_in_the_model_directory(tmp_path: Path) -> None:
    check_runs(save_external(matmul_model(), tmp_path))


def test_location_in_a_subdirectory_and_through_an_inner_symlink(tmp_path: Path) -> None:
    path = save_external(matmul_model(), tmp_path / "m", "data/weights.bin")
    check_runs(path)
    os.symlink(tmp_path / "m" / "data" / "weights.bin", tmp_path / "m" / "alias.bin")
    tamper(path, location="alias.bin")
    check_runs(path)


def test_absolute_location_is_refused(tmp_path: Path) -> None:
    path = save_external(matmul_model(), tmp_path)
    tamper(path, location=str(tmp_path / "weights.bin"))
    with pytest.raises(
        onnxflow.ExternalDataError, match=r"tensor 'W' at location '/.*weights\.bin': absolute"
    ):
        onnxflow.InferenceSession(path)


@pytest.mark.parametrize(
    "location", ["../outside.bin", "sub/../../outside.bin", "./../outside.bin"]
)
def test_dotdot_escape_is_refused(tmp_path: Path, location: str) -> None:
    path = save_external(matmul_model(), tmp_path / "m")
    (tmp_path / "m" / "sub").mkdir()
    shutil.copy(tmp_path / "m" / "weights.bin", tmp_path / "outside.bin")
    tamper(path, location=location)
    with pytest.raises(
        onnxflow.ExternalDataError, match=rf"location '{location}': resolves outside"
    ):
        onnxflow.InferenceSession(path)


def test_symlink_leaving_the_directory_is_refused(tmp_path: Path) -> None:
    path = save_external(matmul_model(), tmp_path / "m")
    shutil.move(tmp_path / "m" / "weights.bin", tmp_path / "outside.bin")
    os.symlink(tmp_path / "outside.bin", tmp_path / "m" / "weights.bin")
    with pytest.raises(onnxflow.ExternalDataError, match=r"'weights\.bin': resolves outside"):
        onnxflow.InferenceSession(path)


def test_symlinked_directory_leaving_the_model_directory_is_refused(tmp_path: Path) -> None:
    path = save_external(matmul_model(), tmp_path / "m", "d/weights.bin")
    shutil.move(tmp_path / "m" / "d", tmp_path / "elsewhere")
    os.symlink(tmp_path / "elsewhere", tmp_path / "m" / "d")
    with pytest.raises(onnxflow.ExternalDataError, match=r"'d/weights\.bin': resolves outside"):
        onnxflow.InferenceSession(path)


@pytest.mark.parametrize(
    "entries, message",
    [
        ({"offset": "300"}, r"offset 300 and length 256 do not fit the file of 256 bytes"),
        ({"offset": "8", "length": "256"}, r"offset 8 and length 256 do not fit"),
        ({"offset": "-4"}, r"offset '-4' is not a number in ASCII digits"),
        ({"length": "-1"}, r"length '-1' is not a number in ASCII digits"),
        ({"offset": "ten"}, r"offset 'ten' is not a number in ASCII digits"),
        ({"location": "missing.bin"}, r"'missing\.bin': cannot read"),
        ({"location": ""}, r"no location given"),
        ({"location": "a\0b"}, r"NUL character"),
        ({"location": "."}, r"not a regular file"),
        ({"location": "weights.bin/x"}, r"cannot read: Not a directory"),
    ],
    ids=lambda v: "-".join(f"{k}={v!r}" for k, v in v.items()) if isinstance(v, dict) else "",
)
def test_bad_location_offset_or_length(tmp_path: Path, entries, message: str) -> None:
    path = save_external(matmul_model(), tmp_path)
    tamper(path, **entries)
    with pytest.raises(onnxflow.ExternalDataError, match=rf"tensor 'W' at location .*{message}"):
        onnxflow.InferenceSession(path)


def test_length_shorter_than_the_tensor_is_a_validation_error(tmp_path: Path) -> None:
    path = save_external(matmul_model(), tmp_path)
    tamper(path, length="16")
    with pytest.raises(onnxflow.ValidationError, match=r"tensor 'W'.*256 bytes .*found 16"):
        onnxflow.InferenceSession(path)


def test_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    path = save_external(matmul_model(), tmp_path)
    os.mkfifo(tmp_path / "pipe")
    tamper(path, location="pipe")
    with pytest.raises(onnxflow.ExternalDataError, match=r"'pipe': not a regular file"):
        onnxflow.InferenceSession(path)


def test_symlink_loop_is_refused(tmp_path: Path) -> None:
    path = save_external(matmul_model(), tmp_path)
    os.symlink(tmp_path / "b", tmp_path / "a")
    os.symlink(tmp_path / "a", tmp_path / "b")
    tamper(path, location="a")
    with pytest.raises(onnxflow.ExternalDataError, match=r"location 'a'"):
        onnxflow.InferenceSession(path)


def test_bytes_and_protos_need_an_explicit_base_dir(tmp_path: Path) -> None:
    path = save_external(matmul_model(), tmp_path)
    data = path.read_bytes()
    proto = onnx.load_model(path, load_external_data=False)
    for source in (data, proto):
        with pytest.raises(
            onnxflow.ExternalDataError, match=r"'weights\.bin' for tensor 'W'.*pass base_dir"
        ):
            onnxflow.InferenceSession(source)
        check_runs(source, base_dir=tmp_path)
    assert proto.graph.initializer[0].data_location == onnx.TensorProto.EXTERNAL  # not changed


def test_base_dir_is_also_confined(tmp_path: Path) -> None:
    path = save_external(matmul_model(), tmp_path / "m")
    shutil.copy(tmp_path / "m" / "weights.bin", tmp_path / "weights.bin")
    tamper(path, location="../weights.bin")
    with pytest.raises(onnxflow.ExternalDataError, match="resolves outside"):
        onnxflow.InferenceSession(path.read_bytes(), base_dir=tmp_path / "m")


def test_tensors_in_subgraphs_and_attributes_are_confined_too(tmp_path: Path) -> None:
    """A Loop body initializer and a Constant's value: read safely, refused when escaping."""
    body = counter_body([helper.make_node("Add", ["x_out", "bias"], ["unused"])])
    body.initializer.append(const("bias", np.full(1, 2.0, np.float32)))
    body.output.append(vi("unused", F, [1]))
    value = onnx.numpy_helper.from_array(np.full(1, 5.0, np.float32), "five")
    m = model(
        [
            helper.make_node("Constant", [], ["x0"], value=value),
            helper.make_node("Loop", ["M", "", "x0"], ["xf", "scan"], body=body),
        ],
        [],
        [vi("xf", F, [1]), vi("scan", F, [None, 1])],
        [const("M", np.int64(3))],
    )
    path = save_external(m, tmp_path / "m")
    xf, scan = onnxflow.InferenceSession(path).run(None, {})
    np.testing.assert_array_equal(xf, [8.0])
    np.testing.assert_array_equal(scan[:, 0], [8.0, 9.0, 10.0])
    shutil.copy(tmp_path / "m" / "weights.bin", tmp_path / "outside.bin")
    tamper(path, location="../outside.bin")
    with pytest.raises(onnxflow.ExternalDataError, match="resolves outside"):
        onnxflow.InferenceSession(path)


def test_sparse_initializer_with_external_values_is_confined(tmp_path: Path) -> None:
    values = onnx.numpy_helper.from_array(np.array([1.0, 2.0], np.float32), "S")
    indices = onnx.numpy_helper.from_array(np.array([1, 3], np.int64), "S_idx")
    sparse = helper.make_sparse_tensor(values, indices, [4])
    m = model([helper.make_node("Identity", ["S"], ["Y"])], [], [vi("Y", F, [4])])
    m.graph.sparse_initializer.append(sparse)
    directory = tmp_path / "m"
    directory.mkdir()
    (tmp_path / "outside.bin").write_bytes(np.array([7.0, 8.0], np.float32).tobytes())
    t = m.graph.sparse_initializer[0].values
    t.ClearField("raw_data")
    t.data_location = onnx.TensorProto.EXTERNAL
    t.external_data.add(key="location", value="../outside.bin")
    (directory / "model.onnx").write_bytes(m.SerializeToString())
    with pytest.raises(
        onnxflow.ExternalDataError, match=r"tensor 'S' at location '\.\./outside\.bin'"
    ):
        onnxflow.InferenceSession(directory / "model.onnx")
    shutil.copy(tmp_path / "outside.bin", directory / "inside.bin")
    t.external_data[0].value = "inside.bin"
    (directory / "model.onnx").write_bytes(m.SerializeToString())
    (y,) = onnxflow.InferenceSession(directory / "model.onnx").run(None, {})
    np.testing.assert_array_equal(y, [0, 7, 0, 8])


def test_external_data_beyond_available_memory_is_refused_before_reading(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = save_external(matmul_model(), tmp_path)
    with open(tmp_path / "weights.bin", "r+b") as f:  # a sparse 64 GiB file: no disk used
        f.truncate(64 * 2**30)
    tamper(path, offset="0", length=str(64 * 2**30))
    monkeypatch.setattr(onnxflow.ir.load, "available_memory", lambda: 2**30)  # any machine
    with pytest.raises(onnxflow.ExternalDataError, match="more than the .* bytes of memory"):
        onnxflow.InferenceSession(path)


@pytest.mark.parametrize("key", ["offset", "length"])
@pytest.mark.parametrize(
    "value", [" 4", "+4", "0_4", "4 ", "\u0664", "\uff14", "4\n", "", "0x4", "1e2", "-0"]
)
def test_offset_and_length_must_be_ascii_digits(tmp_path: Path, key: str, value: str) -> None:
    """Python's int() takes signs, spaces, ``_`` and other scripts' digits; onnxruntime does not,
    so the same file would load other weights in the two: refused, naming tensor, key, value."""
    path = save_external(matmul_model(), tmp_path)
    tamper(path, **{key: value})
    message = rf"tensor 'W' at location 'weights\.bin': {key} {re.escape(repr(value))} is not"
    with pytest.raises(onnxflow.ExternalDataError, match=message):
        onnxflow.load_model(path)


def test_offset_and_length_with_leading_zeros_are_plain_digits(tmp_path: Path) -> None:
    path = save_external(matmul_model(), tmp_path)
    tamper(path, offset="000", length="0256")
    check_runs(path)


def test_an_offset_of_more_digits_than_int_converts_is_refused(tmp_path: Path) -> None:
    path = save_external(matmul_model(), tmp_path)
    tamper(path, offset="9" * 5000)
    with pytest.raises(onnxflow.ExternalDataError, match=r"offset '9{40}'\.\.\. \(5000 char"):
        onnxflow.load_model(path)


@pytest.mark.parametrize("key", ["Offset", "size", "ort_prepacked"])
def test_unknown_external_data_key_is_refused(tmp_path: Path, key: str) -> None:
    """onnxruntime refuses keys outside the spec's; onnxflow did ignore them, so a misspelt
    ``Offset`` silently read from offset 0."""
    path = save_external(matmul_model(), tmp_path)
    tamper(path, **{key: "4"})
    with pytest.raises(onnxflow.ExternalDataError, match=rf"tensor 'W'.*unknown key '{key}'"):
        onnxflow.load_model(path)


def test_a_key_given_twice_is_refused(tmp_path: Path) -> None:
    path = save_external(matmul_model(), tmp_path)
    m = onnx.load_model(path, load_external_data=False)
    m.graph.initializer[0].external_data.add(key="offset", value="4")
    m.graph.initializer[0].external_data.add(key="offset", value="0")
    path.write_bytes(m.SerializeToString())
    with pytest.raises(onnxflow.ExternalDataError, match=r"key 'offset' is given more than once"):
        onnxflow.load_model(path)


def test_checksum_and_basepath_are_accepted_and_not_acted_on(tmp_path: Path) -> None:
    """The spec's ``checksum`` (neither onnx nor onnxruntime verifies it) and onnx's
    ``basepath`` (its reader ignores it)."""
    path = save_external(matmul_model(), tmp_path)
    tamper(path, checksum="not-a-sha1", basepath="/elsewhere")
    check_runs(path)


# -- links and names followed by the walk itself (onnxflow.ir.external) ------------------------
@pytest.mark.parametrize(
    "link, location",
    [
        ("alias", "alias/weights.bin"),  # a relative link to a directory inside
        ("data/up", "data/up/data/weights.bin"),  # a link to the folder, then down again
        ("data/w", "data/w"),  # a relative link to the file beside it
    ],
)
def test_relative_links_that_stay_inside_are_followed(
    tmp_path: Path, link: str, location: str
) -> None:
    path = save_external(matmul_model(), tmp_path / "m", "data/weights.bin")
    targets = {"alias": "data", "data/up": "..", "data/w": "weights.bin"}
    os.symlink(targets[link], tmp_path / "m" / link)
    tamper(path, location=location)
    check_runs(path)


def test_dotdot_that_stays_inside_is_followed(tmp_path: Path) -> None:
    path = save_external(matmul_model(), tmp_path / "m")
    (tmp_path / "m" / "sub").mkdir()
    tamper(path, location="sub/../weights.bin")
    check_runs(path)


@pytest.mark.parametrize(
    "target",
    [
        "../outside.bin",  # relative, climbing out
        "data/../../outside.bin",  # relative, climbing out through a directory
        "{m}/../outside.bin",  # absolute, lexically under the folder, ``..`` leaving it
        "{outside}",  # absolute, elsewhere
    ],
)
def test_links_leaving_the_folder_are_refused(tmp_path: Path, target: str) -> None:
    path = save_external(matmul_model(), tmp_path / "m", "data/weights.bin")
    (tmp_path / "outside.bin").write_bytes((W + 1000).tobytes())
    m = (tmp_path / "m").resolve()
    os.symlink(target.format(m=m, outside=m.parent / "outside.bin"), tmp_path / "m" / "w.bin")
    tamper(path, location="w.bin")
    with pytest.raises(onnxflow.ExternalDataError, match=r"'w\.bin': resolves outside"):
        onnxflow.load_model(path)


def test_a_link_to_the_folder_itself_is_not_a_regular_file(tmp_path: Path) -> None:
    path = save_external(matmul_model(), tmp_path)
    os.symlink(".", tmp_path / "self")
    tamper(path, location="self")
    with pytest.raises(onnxflow.ExternalDataError, match=r"'self': not a regular file"):
        onnxflow.load_model(path)


@pytest.mark.parametrize("moment", ["open", "fstat"])
def test_a_swap_at_the_worst_moment_never_reads_outside(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, moment: str
) -> None:
    """The data file is swapped for a link to a file outside just before the final open (the
    open refuses it) or just after it (what was opened, the inside file, is read)."""
    path = save_external(matmul_model(), tmp_path / "m")
    (tmp_path / "outside.bin").write_bytes((W + 1000).tobytes())
    link = tmp_path / "m" / "link.tmp"
    os.symlink(tmp_path / "outside.bin", link)
    swapped = []
    real = getattr(os, moment)

    def swap_then(target, *args, **kwargs):
        if not swapped and (moment == "fstat" or target == "weights.bin"):
            os.replace(link, tmp_path / "m" / "weights.bin")
            swapped.append(target)
        return real(target, *args, **kwargs)

    monkeypatch.setattr(os, moment, swap_then)
    if moment == "open":
        with pytest.raises(onnxflow.ExternalDataError, match=r"'weights\.bin': resolves outside"):
            onnxflow.load_model(path)
    else:
        weights = onnxflow.load_model(path).graph.initializer[0]
        np.testing.assert_array_equal(onnx.numpy_helper.to_array(weights), W)
    assert swapped and os.path.islink(tmp_path / "m" / "weights.bin")


# -- the other readers of tensors go through the same opener or refuse -------------------------
def test_tensor_to_array_does_not_open_files_itself(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """onnx's reader would open the location relative to the working directory."""
    path = save_external(matmul_model(), tmp_path)
    tensor = onnx.load_model(path, load_external_data=False).graph.initializer[0]
    monkeypatch.chdir(tmp_path)
    with pytest.raises(onnxflow.ExternalDataError, match=r"tensor 'W' refers to external data"):
        onnxflow.values.tensor_to_array(tensor)


def test_cli_input_with_external_data_is_confined_beside_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from onnxflow.cli import main

    model_path = save_external(matmul_model(), tmp_path / "m")
    feed = onnx.numpy_helper.from_array(X, "X")
    onnx.external_data_helper.set_external_data(feed, "x.bin")
    (tmp_path / "feeds").mkdir()
    (tmp_path / "feeds" / "x.bin").write_bytes(X.tobytes())
    (tmp_path / "x.bin").write_bytes((X + 1).tobytes())
    feed.ClearField("raw_data")
    (tmp_path / "feeds" / "x.pb").write_bytes(feed.SerializeToString())
    monkeypatch.chdir(tmp_path)  # onnx's reader looked here, not beside the .pb
    args = ["run", str(model_path), "--input", "X=feeds/x.pb", "--verbose"]
    assert main(args) == 0
    assert f"min={(X @ W).min():g}" in capsys.readouterr().out
    feed.external_data[0].value = "../x.bin"
    (tmp_path / "feeds" / "x.pb").write_bytes(feed.SerializeToString())
    assert main(args) == 1
    assert "tensor 'X' at location '../x.bin': resolves outside" in capsys.readouterr().err
