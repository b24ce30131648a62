"""External data: read only from regular files inside the model's directory, within their size."""

from __future__ import annotations

import os
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
        ({"offset": "-4"}, r"offset -4 and length 256 do not fit"),
        ({"length": "-1"}, r"offset 0 and length -1 do not fit"),
        ({"offset": "ten"}, r"offset/length are not integers"),
        ({"location": "missing.bin"}, r"'missing\.bin': cannot read"),
        ({"location": ""}, r"no location given"),
        ({"location": "a\0b"}, r"NUL character"),
        ({"location": "."}, r"not a regular file"),
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
