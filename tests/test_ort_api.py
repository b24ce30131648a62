"""onnxruntime's Python API on onnxflow: each call made on the same model with onnxruntime and
with onnxflow, and what they give compared."""

from __future__ import annotations

import json
import os
import re
import sys
import threading
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import TensorProto, helper
from threadpoolctl import threadpool_info

import onnxflow
from onnxflow.observers import Observer
from onnxflow.ort_api import session_api

F = TensorProto.FLOAT
X = np.array([[-1.0, 2.0, 3.0], [4.0, -5.0, 6.0]], np.float32)


def small_model() -> onnx.ModelProto:
    """Relu then MatMul by a stored weight, with named nodes and every metadata field set."""
    graph = helper.make_graph(
        [
            helper.make_node("Relu", ["X"], ["Y"], name="relu"),
            helper.make_node("MatMul", ["Y", "W"], ["Z"], name="matmul"),
        ],
        "small",
        [helper.make_tensor_value_info("X", F, [2, 3])],
        [helper.make_tensor_value_info("Z", F, [2, 2])],
        [helper.make_tensor("W", F, [3, 2], np.arange(6, dtype=np.float32))],
        doc_string="the graph's description",
    )
    m = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", 17)],
        producer_name="tests",
        doc_string="the model's description",
    )
    m.ir_version, m.domain, m.model_version = 8, "org.example", 3
    helper.set_model_props(m, {"author": "me", "purpose": "tests"})
    return m


def both(model: onnx.ModelProto, options: tuple[Any, Any] | None = None, **kw: Any) -> tuple:
    """An onnxruntime session and an onnxflow session of ``model``."""
    data = model.SerializeToString()
    ort_opts, of_opts = options or (None, None)
    return (
        onnxruntime.InferenceSession(data, ort_opts, **kw),
        onnxflow.InferenceSession(data, of_opts, **kw),
    )


@pytest.fixture(autouse=True)
def fresh_warnings() -> None:
    """Each test sees the once-per-process warnings afresh."""
    session_api._warned.clear()


# -- module functions and enums --------------------------------------------------------------------
#: onnxruntime's API that onnxflow offers, by where it sits: the names must be onnxruntime's.
OFFERED = {
    "module": """GraphOptimizationLevel ExecutionMode ExecutionOrder InferenceSession SessionOptions
        RunOptions NodeArg OrtValue SessionIOBinding IOBinding ModelMetadata get_device
        get_available_providers get_all_providers set_default_logger_severity
        set_default_logger_verbosity get_version_string capi""",
    "InferenceSession": """run run_with_ort_values run_with_iobinding run_async io_binding
        end_profiling get_profiling_start_time_ns get_session_options get_providers
        get_provider_options set_providers disable_fallback enable_fallback get_inputs
        get_outputs get_overridable_initializers get_modelmeta""",
    "SessionOptions": """add_session_config_entry get_session_config_entry add_initializer
        register_custom_ops_library add_free_dimension_override_by_name
        add_free_dimension_override_by_denotation""",
    "RunOptions": "add_run_config_entry get_run_config_entry",
    "OrtValue": """ortvalue_from_numpy ortvalue_from_numpy_with_onnx_type
        ortvalue_from_shape_and_type numpy shape data_type element_type device_name is_tensor
        is_tensor_sequence is_sparse_tensor has_value tensor_size_in_bytes data_ptr
        update_inplace""",
    "IOBinding": """bind_cpu_input bind_input bind_output bind_ortvalue_input
        bind_ortvalue_output clear_binding_inputs clear_binding_outputs copy_outputs_to_cpu
        get_outputs get_outputs_as_ortvaluevector synchronize_inputs synchronize_outputs""",
}


@pytest.mark.parametrize("where", sorted(OFFERED))
def test_the_api_offered_has_onnxruntimes_names(where: str) -> None:
    theirs = onnxruntime if where == "module" else getattr(onnxruntime, where)
    ours = onnxflow if where == "module" else getattr(onnxflow, where)
    for name in OFFERED[where].split():
        assert hasattr(theirs, name), f"onnxruntime has no {where}.{name}"
        assert hasattr(ours, name), f"onnxflow has no {where}.{name}"


def test_module_functions_answer_as_onnxruntime_on_the_cpu() -> None:
    assert onnxflow.get_version_string() == onnxflow.__version__
    assert onnxflow.get_device() == onnxruntime.get_device() == "CPU"
    assert onnxflow.get_available_providers() == ["CPUExecutionProvider"]
    assert "CPUExecutionProvider" in onnxruntime.get_available_providers()


@pytest.mark.parametrize("name", ["GraphOptimizationLevel", "ExecutionMode", "ExecutionOrder"])
def test_enums_have_onnxruntimes_members_and_values(name: str) -> None:
    theirs = {k: int(v) for k, v in getattr(onnxruntime, name).__members__.items()}
    ours = {k: int(v) for k, v in getattr(onnxflow, name).__members__.items()}
    assert ours == theirs


def _our_enums() -> list[type]:
    """Every enum onnxflow offers under one of onnxruntime's names, found by looking."""
    import enum

    import onnxflow.ort_api

    found = {}
    for module in (onnxflow, onnxflow.ort_api):
        for name in dir(module):
            obj = getattr(module, name)
            if isinstance(obj, type) and issubclass(obj, enum.Enum) and hasattr(onnxruntime, name):
                found[name] = obj
    return list(found.values())


@pytest.mark.parametrize("ours", _our_enums(), ids=lambda e: e.__name__)
def test_enums_print_as_onnxruntimes(ours: type) -> None:
    theirs = getattr(onnxruntime, ours.__name__)
    for name, member in ours.__members__.items():
        their = theirs.__members__[name]
        shown = [str(member), repr(member), f"{member}", format(member, "d")]
        assert shown == [str(their), repr(their), f"{their}", str(int(their))]


def test_the_optimization_level_set_prints_as_onnxruntimes() -> None:
    assert len(_our_enums()) >= 3
    ours, theirs = onnxflow.SessionOptions(), onnxruntime.SessionOptions()
    assert str(ours.graph_optimization_level) == str(theirs.graph_optimization_level)
    assert repr(ours.execution_mode) == repr(theirs.execution_mode)


def test_default_logger_severity_sets_the_onnxflow_logger() -> None:
    import logging

    logger = logging.getLogger("onnxflow")
    before = logger.level
    try:
        onnxflow.set_default_logger_severity(3)
        assert logger.level == logging.ERROR
        with pytest.raises(onnxflow.capi.onnxruntime_pybind11_state.InvalidArgument):
            onnxflow.set_default_logger_severity(7)
    finally:
        onnxflow.set_default_logger_severity(2)
        logger.setLevel(before)


# -- exceptions ------------------------------------------------------------------------------------
def test_the_exception_classes_are_onnxruntimes() -> None:
    from onnxruntime.capi import onnxruntime_pybind11_state as theirs

    from onnxflow.capi import onnxruntime_pybind11_state as ours

    names = {n for n in dir(theirs) if isinstance(getattr(theirs, n), type)}
    names = {n for n in names if issubclass(getattr(theirs, n), Exception)}
    assert names == set(ours.__all__)
    for name in names:
        assert issubclass(getattr(ours, name), onnxflow.OnnxflowError)


@pytest.mark.parametrize(
    ("name", "builtin"),
    [
        ("InvalidArgument", ValueError),
        ("Fail", RuntimeError),
        ("NoSuchFile", FileNotFoundError),
        ("InvalidProtobuf", ValueError),
        ("InvalidGraph", ValueError),
        ("NotImplemented", NotImplementedError),
        ("RuntimeException", RuntimeError),
        ("NotFound", LookupError),
    ],
)
def test_each_exception_is_also_its_builtin(name: str, builtin: type) -> None:
    from onnxflow.capi import onnxruntime_pybind11_state as ours

    assert issubclass(getattr(ours, name), builtin)


def _undefined_input() -> onnx.ModelProto:
    m = small_model()
    m.graph.node[0].input[0] = "undefined"
    return m


def _unknown_op() -> onnx.ModelProto:
    m = small_model()
    m.graph.node[0].op_type = "NoSuchOp"
    return m


def _future_opset() -> onnx.ModelProto:
    m = small_model()
    m.opset_import[0].version = 99
    return m


def _reshape() -> onnx.ModelProto:
    graph = helper.make_graph(
        [helper.make_node("Reshape", ["X", "S"], ["Y"])],
        "g",
        [helper.make_tensor_value_info("X", F, None), helper.make_tensor_value_info("S", 7, None)],
        [helper.make_tensor_value_info("Y", F, None)],
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def _terminated() -> Any:
    options = onnxruntime.RunOptions()
    options.terminate = True
    return options


CREATE = {
    "missing_file": lambda: "/no/such/model.onnx",
    "garbage_bytes": lambda: b"these bytes are no model",
    "undefined_input": lambda: _undefined_input().SerializeToString(),
    "unknown_op": lambda: _unknown_op().SerializeToString(),
    "future_opset": lambda: _future_opset().SerializeToString(),
}

RUN = {  # session -> (output names, feeds, run options)
    "feed_dtype": (None, {"X": X.astype(np.float64)}, None),
    "feed_shape": (None, {"X": X[:, :2]}, None),
    "unknown_output": (["nope"], {"X": X}, None),
    "unknown_input": (None, {"Q": X}, None),
    "terminated": (None, {"X": X}, "terminate"),
}


def _raised(call: Any) -> BaseException:
    with pytest.raises(Exception) as info:
        call()
    return info.value


@pytest.mark.parametrize("case", sorted(CREATE))
def test_creation_errors_are_caught_by_onnxruntimes_class(case: str) -> None:
    source = CREATE[case]()
    theirs = _raised(lambda: onnxruntime.InferenceSession(source))
    ours = _raised(lambda: onnxflow.InferenceSession(source))
    assert isinstance(ours, _our_class(theirs)), (type(theirs), type(ours))


@pytest.mark.parametrize("case", sorted(RUN))
def test_run_errors_are_caught_by_onnxruntimes_class(case: str) -> None:
    names, feeds, options = RUN[case]
    ort_sess, of_sess = both(small_model())
    of_options = None
    if options:
        options, of_options = _terminated(), onnxflow.RunOptions()
        of_options.terminate = True
    theirs = _raised(lambda: ort_sess.run(names, feeds, options))
    ours = _raised(lambda: of_sess.run(names, feeds, of_options))
    assert isinstance(ours, _our_class(theirs)), (type(theirs), type(ours))


def test_a_kernel_failure_is_caught_by_onnxruntimes_class() -> None:
    feeds = {"X": np.ones(6, np.float32), "S": np.array([4], np.int64)}
    ort_sess, of_sess = both(_reshape())
    theirs = _raised(lambda: ort_sess.run(None, feeds))
    ours = _raised(lambda: of_sess.run(None, feeds))
    assert isinstance(ours, _our_class(theirs)), (type(theirs), type(ours))


def _our_class(theirs: BaseException) -> type:
    """onnxflow's class of the name onnxruntime raised (its Python-level ValueError as is)."""
    from onnxflow.capi import onnxruntime_pybind11_state as ours

    return getattr(ours, type(theirs).__name__, type(theirs))


# -- options ---------------------------------------------------------------------------------------
def _settings(options: Any) -> dict[str, Any]:
    found = {}
    for name in dir(options):
        value = getattr(options, name)
        if not name.startswith("_") and not callable(value):
            found[name] = (
                int(value) if hasattr(value, "__int__") and not isinstance(value, bool) else value
            )
    return found


@pytest.mark.parametrize("kind", ["SessionOptions", "RunOptions"])
def test_options_have_every_onnxruntime_attribute_with_its_default(kind: str) -> None:
    theirs = _settings(getattr(onnxruntime, kind)())
    ours = _settings(getattr(onnxflow, kind)())
    assert {k: ours.get(k, "missing") for k in theirs} == theirs


def test_config_entries_round_trip_and_a_missing_key_is_a_runtime_error() -> None:
    for module in (onnxruntime, onnxflow):
        so, ro = module.SessionOptions(), module.RunOptions()
        so.add_session_config_entry("session.intra_op.allow_spinning", "0")
        ro.add_run_config_entry("memory.enable_memory_arena_shrinkage", "cpu:0")
        assert so.get_session_config_entry("session.intra_op.allow_spinning") == "0"
        assert ro.get_run_config_entry("memory.enable_memory_arena_shrinkage") == "cpu:0"
        with pytest.raises(RuntimeError, match="does not have configuration with key"):
            so.get_session_config_entry("nope")
        with pytest.raises(RuntimeError, match="does not have configuration with key"):
            ro.get_run_config_entry("nope")


@pytest.mark.parametrize(
    ("level", "optimize"),
    [("ORT_DISABLE_ALL", False), ("ORT_ENABLE_BASIC", True), ("ORT_ENABLE_ALL", True)],
)
def test_graph_optimization_level_is_optimize(level: str, optimize: bool) -> None:
    so = onnxflow.SessionOptions()
    so.graph_optimization_level = onnxflow.GraphOptimizationLevel[level]
    assert so.optimize is optimize
    sess = onnxflow.InferenceSession(small_model(), so)
    assert sess.get_session_options() is so
    assert sess._compiler().optimize is optimize


def test_graph_optimization_level_99_and_an_unknown_level() -> None:
    so = onnxflow.SessionOptions(optimize=False)
    so.graph_optimization_level = 99
    assert (
        so.optimize
        and so.graph_optimization_level is onnxflow.GraphOptimizationLevel.ORT_ENABLE_ALL
    )
    with pytest.raises(onnxflow.InputError, match="graph_optimization_level must be one of"):
        so.graph_optimization_level = 5


def test_an_ignored_setting_warns_once() -> None:
    so = onnxflow.SessionOptions()
    so.execution_mode = onnxflow.ExecutionMode.ORT_PARALLEL
    with pytest.warns(onnxflow.OnnxflowWarning, match="execution_mode is ignored"):
        onnxflow.InferenceSession(small_model(), so)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        onnxflow.InferenceSession(small_model(), so)


def test_config_entries_warn_that_they_change_nothing() -> None:
    so = onnxflow.SessionOptions()
    so.add_session_config_entry("session.use_env_allocators", "1")
    with pytest.warns(onnxflow.OnnxflowWarning, match="session.use_env_allocators"):
        onnxflow.InferenceSession(small_model(), so)


@pytest.mark.parametrize(
    ("setting", "value"),
    [
        ("enable_cpu_mem_arena", False),
        ("enable_mem_pattern", False),
        ("use_per_session_threads", False),
        ("use_deterministic_compute", True),
        ("execution_mode", onnxflow.ExecutionMode.ORT_SEQUENTIAL),
    ],
)
def test_settings_describing_what_onnxflow_does_do_not_warn(setting: str, value: Any) -> None:
    so = onnxflow.SessionOptions()
    setattr(so, setting, value)
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        onnxflow.InferenceSession(small_model(), so)


def test_a_quiet_session_does_not_warn() -> None:
    so = onnxflow.SessionOptions()
    so.enable_mem_pattern = False
    so.log_severity_level = 3
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        onnxflow.InferenceSession(small_model(), so)


@pytest.mark.parametrize("module", [onnxruntime, onnxflow], ids=lambda m: m.__name__)
def test_an_unknown_provider_warns_whatever_the_severity(module: Any) -> None:
    so = module.SessionOptions()
    so.log_severity_level = 3
    with pytest.warns(UserWarning, match="'CUDAExecutionProvider' is not in available"):
        module.InferenceSession(small_model().SerializeToString(), so, ["CUDAExecutionProvider"])


def test_free_dimension_overrides_warn_that_they_are_ignored() -> None:
    so = onnxflow.SessionOptions()
    so.add_free_dimension_override_by_name("batch", 1)
    with pytest.warns(onnxflow.OnnxflowWarning, match="free dimension overrides.*batch"):
        onnxflow.InferenceSession(small_model(), so)


def test_add_initializer_replaces_the_models_value() -> None:
    weight = np.full((3, 2), 0.5, np.float32)
    results = []
    for module in (onnxruntime, onnxflow):
        so = module.SessionOptions()
        value = module.OrtValue.ortvalue_from_numpy(weight)
        so.add_initializer("W", value)
        sess = module.InferenceSession(small_model().SerializeToString(), so)
        results.append(sess.run(None, {"X": X})[0])
    np.testing.assert_array_equal(results[1], results[0])
    np.testing.assert_array_equal(results[1], np.maximum(X, 0) @ weight)


def test_add_initializer_of_an_unknown_name_or_another_type() -> None:
    so = onnxflow.SessionOptions()
    so.add_initializer("Q", np.zeros(2, np.float32))
    with pytest.warns(onnxflow.OnnxflowWarning, match="no initializer 'Q'"):
        onnxflow.InferenceSession(small_model(), so)
    so = onnxflow.SessionOptions()
    so.add_initializer("W", np.zeros((3, 2), np.float64))
    with pytest.raises(onnxflow.capi.onnxruntime_pybind11_state.InvalidArgument, match="float64"):
        onnxflow.InferenceSession(small_model(), so)


def test_a_custom_ops_library_is_refused() -> None:
    with pytest.raises(NotImplementedError, match="custom-op library"):
        onnxflow.SessionOptions().register_custom_ops_library("libcustom.so")


class _BlasThreads(Observer):
    """Records BLAS's thread counts while nodes run."""

    def __init__(self) -> None:
        self.seen: list[int] = []

    def node_start(self, scope, info, inputs) -> None:  # type: ignore[no-untyped-def]
        self.seen += [p["num_threads"] for p in threadpool_info() if p["user_api"] == "blas"]


def _blas_threads() -> list[int]:
    return [p["num_threads"] for p in threadpool_info() if p["user_api"] == "blas"]


def test_intra_op_num_threads_bounds_blas_during_a_run_only() -> None:
    before = _blas_threads()
    so = onnxflow.SessionOptions()
    so.intra_op_num_threads = 1
    sess = onnxflow.InferenceSession(small_model(), so)
    watch = _BlasThreads()
    (z,) = sess.run(None, {"X": X}, observers=[watch])
    assert watch.seen and set(watch.seen) == {1}
    assert _blas_threads() == before
    np.testing.assert_allclose(z, np.maximum(X, 0) @ np.arange(6, dtype=np.float32).reshape(3, 2))


def test_intra_op_num_threads_is_restored_after_concurrent_runs() -> None:
    before = _blas_threads()
    so = onnxflow.SessionOptions()
    so.intra_op_num_threads = 1
    sess = onnxflow.InferenceSession(small_model(), so)
    watches = [_BlasThreads() for _ in range(4)]

    def work(watch: _BlasThreads) -> None:
        for _ in range(20):
            sess.run(None, {"X": X}, observers=[watch])

    threads = [threading.Thread(target=work, args=(w,)) for w in watches]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [set(w.seen) for w in watches] == [{1}] * 4
    assert _blas_threads() == before


# -- providers -------------------------------------------------------------------------------------
def test_an_unknown_provider_warns_and_falls_back_to_the_cpu() -> None:
    match = "Specified provider 'CUDAExecutionProvider' is not in available provider names"
    with pytest.warns(UserWarning, match=match):
        ort_sess = onnxruntime.InferenceSession(
            small_model().SerializeToString(), providers=["CUDAExecutionProvider"]
        )
    with pytest.warns(UserWarning, match=match):
        of_sess = onnxflow.InferenceSession(small_model(), providers=["CUDAExecutionProvider"])
    assert of_sess.get_providers() == ort_sess.get_providers() == ["CPUExecutionProvider"]
    assert of_sess.get_provider_options() == ort_sess.get_provider_options()
    np.testing.assert_allclose(of_sess.run(None, {"X": X})[0], ort_sess.run(None, {"X": X})[0])


def test_providers_can_be_set_and_fallback_switched() -> None:
    ort_sess, of_sess = both(small_model(), providers=[("CPUExecutionProvider", {})])
    for sess in (ort_sess, of_sess):
        sess.disable_fallback()
        sess.enable_fallback()
        sess.set_providers(["CPUExecutionProvider"])
        assert sess.get_providers() == ["CPUExecutionProvider"]
    with pytest.warns(UserWarning, match="'CUDAExecutionProvider' is not in available"):
        of_sess.set_providers(["CUDAExecutionProvider"])


# -- metadata and NodeArgs -------------------------------------------------------------------------
def _unversioned() -> onnx.ModelProto:
    m = small_model()
    m.ClearField("model_version")
    return m


@pytest.mark.parametrize("make", [small_model, _unversioned])
def test_modelmeta_is_onnxruntimes(make: Any) -> None:
    ort_sess, of_sess = both(make())
    fields = [n for n in dir(ort_sess.get_modelmeta()) if not n.startswith("_")]
    theirs, ours = ort_sess.get_modelmeta(), of_sess.get_modelmeta()
    assert {f: getattr(ours, f) for f in fields} == {f: getattr(theirs, f) for f in fields}


def _identity(tp: onnx.TypeProto) -> onnx.ModelProto:
    graph = helper.make_graph(
        [helper.make_node("Identity", ["X"], ["Y"])],
        "g",
        [helper.make_value_info("X", tp)],
        [helper.make_value_info("Y", tp)],
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    m.ir_version = 8
    return m


def _zipmap() -> onnx.ModelProto:
    seq_map = helper.make_sequence_type_proto(
        helper.make_map_type_proto(TensorProto.INT64, helper.make_tensor_type_proto(F, []))
    )
    graph = helper.make_graph(
        [helper.make_node("ZipMap", ["X"], ["Z"], domain="ai.onnx.ml", classlabels_int64s=[1, 2])],
        "g",
        [helper.make_tensor_value_info("X", F, ["N", 2])],
        [helper.make_value_info("Z", seq_map)],
    )
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.ml", 3)]
    m = helper.make_model(graph, opset_imports=opsets)
    m.ir_version = 8
    return m


SHAPED = {
    "zipmap_output": _zipmap,
    "unranked_tensor": lambda: _identity(helper.make_tensor_type_proto(F, None)),
    "sequence": lambda: _identity(
        helper.make_sequence_type_proto(helper.make_tensor_type_proto(F, None))
    ),
    "optional_tensor": lambda: _identity(
        helper.make_optional_type_proto(helper.make_tensor_type_proto(F, [2]))
    ),
    "symbolic_dims": small_model,
}


@pytest.mark.parametrize("case", sorted(SHAPED))
def test_nodearg_shapes_and_types_are_onnxruntimes(case: str) -> None:
    ort_sess, of_sess = both(SHAPED[case]())
    for getter in ("get_inputs", "get_outputs"):
        theirs = [(a.name, a.type, a.shape) for a in getattr(ort_sess, getter)()]
        ours = [(a.name, a.type, a.shape) for a in getattr(of_sess, getter)()]
        assert ours == theirs


def _initializer_as_input(ir_version: int) -> onnx.ModelProto:
    graph = helper.make_graph(
        [helper.make_node("Add", ["X", "W"], ["Y"])],
        "g",
        [helper.make_tensor_value_info("X", F, [2]), helper.make_tensor_value_info("W", F, [2])],
        [helper.make_tensor_value_info("Y", F, [2])],
        [helper.make_tensor("W", F, [2], [1.0, 2.0])],
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 8)])
    m.ir_version = ir_version
    return m


@pytest.mark.parametrize("ir_version", [3, 4, 8])
def test_overridable_initializers_are_onnxruntimes(ir_version: int) -> None:
    with warnings.catch_warnings():  # onnxruntime logs, not warns, that W is overridable
        ort_sess, of_sess = both(_initializer_as_input(ir_version))
    for getter in ("get_inputs", "get_overridable_initializers"):
        theirs = [(a.name, a.type, a.shape) for a in getattr(ort_sess, getter)()]
        ours = [(a.name, a.type, a.shape) for a in getattr(of_sess, getter)()]
        assert ours == theirs


# -- profiling -------------------------------------------------------------------------------------
def _profile(module: Any, tmp_path: Path) -> tuple[list[dict[str, Any]], Any, str]:
    so = module.SessionOptions()
    so.enable_profiling = True
    so.profile_file_prefix = str(tmp_path / module.__name__)
    sess = module.InferenceSession(small_model().SerializeToString(), so)
    sess.run(None, {"X": X})
    path = sess.end_profiling()
    assert sess.end_profiling() == ""  # profiling stopped
    return json.loads(Path(path).read_text()), sess, path


def test_profile_is_onnxruntimes_trace_format(tmp_path: Path) -> None:
    theirs, _, their_path = _profile(onnxruntime, tmp_path)
    ours, sess, our_path = _profile(onnxflow, tmp_path)
    named = r"_\d{4}-\d\d-\d\d_\d\d-\d\d-\d\d_\d{3}\.json"
    assert re.fullmatch(str(tmp_path / "onnxruntime") + named, their_path)
    assert re.fullmatch(str(tmp_path / "onnxflow") + named, our_path)
    keys = {"cat", "pid", "tid", "dur", "ts", "ph", "name", "args"}
    assert all(set(e) == keys and e["ph"] == "X" for e in ours)
    assert all(isinstance(e["ts"], int) and isinstance(e["dur"], int) for e in ours)

    def nodes(events: list[dict[str, Any]]) -> list[tuple[str, str]]:
        return [(e["name"], e["args"]["op_name"]) for e in events if e["cat"] == "Node"]

    assert (
        nodes(ours)
        == nodes(theirs)
        == [("relu_kernel_time", "Relu"), ("matmul_kernel_time", "MatMul")]
    )
    sessions = {e["name"] for e in ours if e["cat"] == "Session"}
    assert {"session_initialization", "model_run"} <= sessions
    assert sessions <= {e["name"] for e in theirs if e["cat"] == "Session"}
    relu = next(e for e in ours if e["name"] == "relu_kernel_time")
    assert relu["args"]["input_type_shape"] == [{"float": [2, 3]}]
    assert relu["args"]["provider"] == "CPUExecutionProvider"
    assert abs(sess.get_profiling_start_time_ns() - time.time_ns()) < 60e9
    assert os.getpid() == relu["pid"]


def test_concurrent_runs_are_profiled_each_in_its_thread(tmp_path: Path) -> None:
    so = onnxflow.SessionOptions()
    so.enable_profiling = True
    so.profile_file_prefix = str(tmp_path / "threads")
    sess = onnxflow.InferenceSession(small_model(), so)
    together = threading.Barrier(4)  # all alive at once: four distinct thread ids

    def work() -> None:
        together.wait()
        for _ in range(5):
            sess.run(None, {"X": X})
        together.wait()

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    events = json.loads(Path(sess.end_profiling()).read_text())
    names = [e["name"] for e in events]
    assert names.count("model_run") == 20
    assert names.count("relu_kernel_time") == names.count("matmul_kernel_time") == 20
    assert len({e["tid"] for e in events if e["cat"] == "Node"}) == 4
    assert all(e["dur"] >= 0 for e in events)


def test_a_session_not_profiling_ends_with_no_file() -> None:
    ort_sess, of_sess = both(small_model())
    assert of_sess.end_profiling() == ort_sess.end_profiling() == ""


# -- optimized model -------------------------------------------------------------------------------
def _foldable() -> onnx.ModelProto:
    """A weight transposed, rounded through float16 and doubled before its MatMul."""
    graph = helper.make_graph(
        [
            helper.make_node("Transpose", ["W"], ["Wt"], name="transpose"),
            helper.make_node("Cast", ["Wt"], ["Wh"], name="half", to=TensorProto.FLOAT16),
            helper.make_node("Cast", ["Wh"], ["Wf"], name="back", to=F),
            helper.make_node("Mul", ["Wf", "two"], ["W2"], name="double"),
            helper.make_node("MatMul", ["X", "W2"], ["Y"], name="matmul"),
        ],
        "foldable",
        [helper.make_tensor_value_info("X", F, [2, 3])],
        [helper.make_tensor_value_info("Y", F, [2, 2])],
        [
            helper.make_tensor("W", F, [2, 3], np.linspace(0, 1, 6)),
            helper.make_tensor("two", F, [], [2.0]),
        ],
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


@pytest.mark.parametrize(("optimize", "ops"), [(True, ["MatMul"]), (False, None)])
def test_optimized_model_filepath_writes_the_folded_model(
    tmp_path: Path, optimize: bool, ops: list[str] | None
) -> None:
    so = onnxflow.SessionOptions(optimize=optimize)
    so.optimized_model_filepath = str(tmp_path / "optimized.onnx")
    onnxflow.InferenceSession(_foldable(), so)
    written = onnx.load(str(tmp_path / "optimized.onnx"))
    onnx.checker.check_model(written, full_check=True)
    expected = ops or [n.op_type for n in _foldable().graph.node]
    assert [n.op_type for n in written.graph.node] == expected
    theirs = onnxruntime.InferenceSession(_foldable().SerializeToString()).run(None, {"X": X})
    ours = onnxruntime.InferenceSession(written.SerializeToString()).run(None, {"X": X})
    np.testing.assert_array_equal(ours[0], theirs[0])


# -- OrtValue --------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16, np.int8, np.int64, np.bool_])
def test_ortvalue_from_numpy_describes_the_array_as_onnxruntime(dtype: Any) -> None:
    array = np.arange(6).reshape(2, 3).astype(dtype)
    theirs = onnxruntime.OrtValue.ortvalue_from_numpy(array)
    ours = onnxflow.OrtValue.ortvalue_from_numpy(array)
    for method in ("shape", "data_type", "element_type", "device_name", "is_tensor", "has_value",
                   "is_tensor_sequence", "tensor_size_in_bytes"):  # fmt: skip
        assert getattr(ours, method)() == getattr(theirs, method)(), method
    np.testing.assert_array_equal(ours.numpy(), theirs.numpy())


def test_ortvalue_shares_the_arrays_memory_and_updates_in_place() -> None:
    array = np.zeros(3, np.float32)
    value = onnxflow.OrtValue.ortvalue_from_numpy(array)
    array[0] = 5
    assert value.numpy()[0] == 5
    value.update_inplace(np.ones(3, np.float32))
    assert array.tolist() == [1, 1, 1]
    assert value.data_ptr() == array.ctypes.data


def test_ortvalue_from_shape_and_type_and_other_devices() -> None:
    theirs = onnxruntime.OrtValue.ortvalue_from_shape_and_type([2, 2], np.int64)
    ours = onnxflow.OrtValue.ortvalue_from_shape_and_type([2, 2], np.int64)
    assert (ours.shape(), ours.data_type()) == (theirs.shape(), theirs.data_type())
    assert ours.numpy().dtype == theirs.numpy().dtype
    for module in (onnxruntime, onnxflow):
        with pytest.raises(RuntimeError):
            module.OrtValue.ortvalue_from_shape_and_type([2], np.float32, "cuda", 0)


def test_run_with_ort_values_gives_ortvalues() -> None:
    ort_sess, of_sess = both(small_model())
    theirs = ort_sess.run_with_ort_values(None, {"X": onnxruntime.OrtValue.ortvalue_from_numpy(X)})
    ours = of_sess.run_with_ort_values(None, {"X": onnxflow.OrtValue.ortvalue_from_numpy(X)})
    assert isinstance(ours[0], onnxflow.OrtValue)
    np.testing.assert_array_equal(ours[0].numpy(), theirs[0].numpy())


# -- IO binding ------------------------------------------------------------------------------------
def test_io_binding_by_array_and_by_name(tmp_path: Path) -> None:
    results = []
    for sess in both(small_model()):
        binding = sess.io_binding()
        binding.bind_cpu_input("X", X)
        binding.bind_output("Z")
        sess.run_with_iobinding(binding)
        results.append((binding.copy_outputs_to_cpu()[0], binding.get_outputs()[0].numpy()))
    (their_copy, their_value), (our_copy, our_value) = results
    np.testing.assert_array_equal(our_copy, their_copy)
    np.testing.assert_array_equal(our_value, their_value)


def test_io_binding_into_preallocated_memory() -> None:
    outputs = []
    for module, sess in zip((onnxruntime, onnxflow), both(small_model()), strict=True):
        binding = sess.io_binding()
        x = module.OrtValue.ortvalue_from_numpy(X)
        binding.bind_input("X", "cpu", 0, np.float32, [2, 3], x.data_ptr())
        z = module.OrtValue.ortvalue_from_shape_and_type([2, 2], np.float32)
        binding.bind_ortvalue_output("Z", z)
        sess.run_with_iobinding(binding)
        binding.synchronize_outputs()
        outputs.append(z.numpy().copy())
    np.testing.assert_array_equal(outputs[1], outputs[0])


def test_io_binding_with_no_output_fails_as_onnxruntime() -> None:
    for sess in both(small_model()):
        binding = sess.io_binding()
        binding.bind_cpu_input("X", X)
        binding.bind_output("Z")
        binding.clear_binding_outputs()
        with pytest.raises(RuntimeError):
            sess.run_with_iobinding(binding)


# -- asynchronous runs -----------------------------------------------------------------------------
def _run_async(sess: Any, feeds: dict[str, Any]) -> tuple[list[Any], Any, str]:
    done = threading.Event()
    got: list[Any] = []

    def callback(outputs: list[Any], user_data: Any, error: str) -> None:
        got.extend([outputs, user_data, error])
        done.set()

    sess.run_async(None, feeds, callback, "data")
    assert done.wait(30)
    return got[0], got[1], got[2]


def test_run_async_calls_back_with_the_outputs() -> None:
    (theirs, their_data, their_error), (ours, our_data, our_error) = (
        _run_async(s, {"X": X}) for s in both(small_model())
    )
    assert (our_data, our_error) == (their_data, their_error) == ("data", "")
    np.testing.assert_array_equal(ours[0], theirs[0])


def test_run_async_reports_an_error_in_the_callback() -> None:
    for sess in both(small_model()):
        outputs, data, error = _run_async(sess, {"X": X.astype(np.float64)})
        assert (outputs, data) == ([], "data") and "double" in error


# -- run options -----------------------------------------------------------------------------------
def test_only_execute_path_to_fetches_warns_that_it_is_ignored() -> None:
    options = onnxflow.RunOptions()
    options.only_execute_path_to_fetches = True
    sess = onnxflow.InferenceSession(small_model())
    with pytest.warns(onnxflow.OnnxflowWarning, match="only_execute_path_to_fetches"):
        sess.run(None, {"X": X}, options)


def test_one_import_changed() -> None:
    """A script in onnxruntime's idiom, with the module swapped."""
    results = []
    for ort in (onnxruntime, onnxflow):
        so = ort.SessionOptions()
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        so.intra_op_num_threads = 1
        sess = ort.InferenceSession(
            small_model().SerializeToString(), so, providers=ort.get_available_providers()[-1:]
        )
        name = sess.get_inputs()[0].name
        results.append(sess.run([sess.get_outputs()[0].name], {name: X})[0])
    np.testing.assert_array_equal(results[1], results[0])
    assert sys.modules["onnxflow"] is onnxflow
