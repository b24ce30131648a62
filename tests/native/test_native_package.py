"""The compiled-kernel package: built, self-contained, and every compiled form tested."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
from native_forms import node_model

import onnxflow
from onnxflow import native
from onnxflow.ops.registry import REGISTRY

NATIVE_DIR = Path(native.__file__).parent


def test_every_module_is_built():
    """The build compiled every .pyx into an importable module (a missing one would silently
    leave its kernels on their NumPy forms)."""
    sources = sorted(p.stem for p in NATIVE_DIR.glob("*.pyx"))
    assert sources == sorted(native.MODULES)
    assert native.built() == list(native.MODULES)


def test_native_imports_nothing_else_from_onnxflow():
    """onnxflow.native is a leaf: its Python and Cython sources import no other onnxflow module."""
    for path in [*NATIVE_DIR.glob("*.py"), *NATIVE_DIR.glob("*.pyx"), *NATIVE_DIR.glob("*.pxd")]:
        text = path.read_text()
        for line in text.splitlines():
            words = line.split()
            if words[:1] in (["import"], ["from"], ["cimport"]) and len(words) > 1:
                assert not words[1].startswith("onnxflow"), f"{path.name}: {line.strip()}"
        if path.suffix == ".py":
            for node in ast.walk(ast.parse(text)):
                if isinstance(node, ast.ImportFrom):
                    assert not (node.module or "").startswith("onnxflow"), path.name


def _declared() -> set[tuple[str, str]]:
    """Every (domain, op) whose kernel declares a compiled form."""
    return {(k.domain, k.op_type) for k in REGISTRY.all() if k.traits.native is not None}


def _tested() -> set[tuple[str, str]]:
    """Every (domain, op) some module of tests/native names in its FORMS_TESTED."""
    names: set[tuple[str, str]] = set()
    for path in Path(__file__).parent.rglob("test_*.py"):
        tree = ast.parse(path.read_text())
        for node in tree.body:
            if isinstance(node, ast.Assign) and any(
                getattr(t, "id", "") == "FORMS_TESTED" for t in node.targets
            ):
                names |= set(ast.literal_eval(node.value))
    return names


def test_every_compiled_form_is_held_to_its_numpy_form():
    """A kernel declaring a compiled form is named by a test module that compares both forms."""
    declared = _declared()
    assert declared, "no kernel declares a compiled form"
    untested = declared - _tested()
    assert not untested, f"compiled forms no test compares with their NumPy form: {untested}"


def test_numpy_option_binds_no_compiled_form():
    """SessionOptions(kernels='numpy') runs the NumPy forms: the generated code names none of
    the compiled forms, which kernels='native' does."""
    model = node_model("Erf", [np.zeros(4, np.float32)], 13)[0].SerializeToString()
    native_code = onnxflow.InferenceSession(model).source()
    numpy_code = onnxflow.InferenceSession(model, onnxflow.SessionOptions(kernels="numpy")).source()
    assert "Erf_compiled" in native_code
    assert "compiled" not in numpy_code


def test_bad_kernels_option_is_named():
    import pytest

    with pytest.raises(onnxflow.OnnxflowError, match="kernels"):
        onnxflow.SessionOptions(kernels="fast")


def test_code_names_the_compiled_form_of_a_builder_kernel():
    """`onnxflow code` tells the forms apart for builder kernels too (a tree ensemble)."""
    from onnx import TensorProto, helper

    node = helper.make_node(
        "TreeEnsembleRegressor",
        ["x"],
        ["y"],
        domain="ai.onnx.ml",
        n_targets=1,
        nodes_treeids=[0],
        nodes_nodeids=[0],
        nodes_featureids=[0],
        nodes_modes=["LEAF"],
        nodes_values=[0.0],
        nodes_truenodeids=[0],
        nodes_falsenodeids=[0],
        target_treeids=[0],
        target_nodeids=[0],
        target_ids=[0],
        target_weights=[1.5],
    )
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, 2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, 1])],
    )
    imports = [helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.ml", 3)]
    model = helper.make_model(graph, opset_imports=imports).SerializeToString()
    native_code = onnxflow.InferenceSession(model).source()
    numpy_code = onnxflow.InferenceSession(model, onnxflow.SessionOptions(kernels="numpy")).source()
    assert "run_compiled" in native_code and "run_compiled" not in numpy_code
