"""A plain ``import onnxflow`` loads what a session needs and no more: the comparison, view,
export and observer modules, the command line, the bench and the compiled kernels load when
first used, and the public names they give still resolve as before."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]

#: Modules a plain ``import onnxflow`` must not import (each a module or a package prefix).
NOT_AT_IMPORT = (
    "onnxflow.compare",
    "onnxflow.view",
    "onnxflow.export",
    "onnxflow.observers",
    "onnxflow.cli",
    "onnxflow.bench",
    "onnxflow.native.",
    "onnx.reference",
)


def _fresh(code: str) -> str:
    """What ``code`` prints, run in a new interpreter (nothing imported yet)."""
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
    )
    return done.stdout.strip()


def _loaded_after(code: str) -> list[str]:
    """The modules loaded in a new interpreter once ``code`` ran."""
    return json.loads(_fresh(f"import json, sys\n{code}\nprint(json.dumps(sorted(sys.modules)))"))


def test_a_plain_import_loads_none_of_the_modules_a_session_does_not_need() -> None:
    loaded = _loaded_after("import onnxflow")
    found = [m for m in loaded for lazy in NOT_AT_IMPORT if m == lazy or m.startswith(lazy + ".")]
    found += [m for m in loaded if m.startswith("onnxflow.native.")]
    assert not found, f"import onnxflow loaded {found}, which it should load only when used"


@pytest.mark.parametrize(
    ("name", "module"),
    [
        ("compare", "onnxflow.compare"),
        ("view", "onnxflow.view"),
        ("View", "onnxflow.view"),
        ("export_python", "onnxflow.export"),
    ],
)
def test_a_lazily_loaded_name_is_the_one_its_module_defines(name: str, module: str) -> None:
    out = _fresh(
        "import importlib, onnxflow\n"
        f"print(onnxflow.{name} is getattr(importlib.import_module({module!r}), {name!r}))\n"
        f"print({name!r} in dir(onnxflow))\n"
    )
    assert out.splitlines() == ["True", "True"], f"onnxflow.{name}: {out}"


@pytest.mark.parametrize("name", ["compare", "view"])
def test_importing_the_submodule_first_leaves_the_function_of_its_name(name: str) -> None:
    # ``onnxflow.compare`` is the function, as when the package imported it eagerly, even after
    # ``import onnxflow.compare`` (which sets the package's attribute to the submodule).
    out = _fresh(
        f"import onnxflow.{name}, onnxflow, inspect\n"
        f"print(inspect.isfunction(onnxflow.{name}), onnxflow.{name}.__name__)\n"
    )
    assert out == f"True {name}", f"onnxflow.{name} after import onnxflow.{name}: {out}"


def test_an_unknown_name_is_an_attribute_error_naming_it() -> None:
    import onnxflow

    with pytest.raises(AttributeError, match="no_such_name"):
        _ = onnxflow.no_such_name  # type: ignore[attr-defined]


def test_a_verbose_run_loads_its_observer_then() -> None:
    out = _fresh(
        "import sys, numpy as np, onnxflow\n"
        "s = onnxflow.InferenceSession('examples/loop_trip_count.onnx')\n"
        "before = 'onnxflow.observers' in sys.modules\n"
        "s.run(None, {'b': np.array(6, np.int32)}, verbose=True)\n"
        "print(before, 'onnxflow.observers' in sys.modules)\n"
    )
    assert out.splitlines()[-1] == "False True", out


def _conv_cast_model() -> str:
    """A float32 Conv then a Cast to float16 and back, as the hex of its bytes."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    w = numpy_helper.from_array(np.ones((2, 1, 3, 3), np.float32), "w")
    graph = helper.make_graph(
        [
            helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
            helper.make_node("Cast", ["c"], ["h"], to=TensorProto.FLOAT16),
            helper.make_node("Cast", ["h"], ["y"], to=TensorProto.FLOAT),
        ],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 8, 8])],
        [w],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return model.SerializeToString().hex()


def test_a_compiled_module_a_kernel_calls_only_when_run_loads_at_its_first_call() -> None:
    """Conv's module carries the quantized loops (integer_gemm), Cast's the float16 ones: a
    session loads neither until a kernel calls it (Cast's float16 loop, at the first run)."""
    from onnxflow.native import built

    if "_half" not in built() or "_quant" not in built():
        pytest.skip("the compiled modules were not built (pip install . builds them)")
    out = _fresh(
        "import sys, numpy as np, onnxflow\n"
        f"s = onnxflow.InferenceSession(bytes.fromhex({_conv_cast_model()!r}))\n"
        "def loaded():\n"
        "    return [m for m in ('_half', '_quant') if 'onnxflow.native.' + m in sys.modules]\n"
        "print(loaded())\n"
        "x = np.arange(64, dtype=np.float32).reshape(1, 1, 8, 8) / 7\n"
        "y = s.run(None, {'x': x})[0]\n"
        "print(loaded())\n"
        f"n = onnxflow.InferenceSession(bytes.fromhex({_conv_cast_model()!r}),\n"
        "    sess_options=onnxflow.SessionOptions(kernels='numpy'))\n"
        "print(np.array_equal(y, n.run(None, {'x': x})[0]))\n"
    )
    assert out.splitlines() == ["[]", "['_half']", "True"], out


def test_a_deferred_module_reads_as_the_module_and_an_unbuilt_one_is_none() -> None:
    from onnxflow import native

    if native.module("_half") is None:
        pytest.skip("the compiled modules were not built (pip install . builds them)")
    real = native.module("_half")
    assert native.deferred("_half") is real  # already loaded: the module itself
    stand_in = native._Deferred("onnxflow.native._half")
    assert stand_in.f32_to_f16 is real.f32_to_f16
    assert "f16_to_f32" in vars(stand_in), "the module's names were not copied in"
    assert native.deferred("_no_such_module") is None


_STUMPS = """
import sys, numpy as np, onnxflow
from onnx import TensorProto, helper
tree = dict(nodes_treeids=[0, 0, 0, 1, 1, 1], nodes_nodeids=[0, 1, 2, 0, 1, 2],
    nodes_modes=['BRANCH_LEQ', 'LEAF', 'LEAF'] * 2, nodes_featureids=[0, 0, 0, 1, 0, 0],
    nodes_values=[0.5, 0, 0, -1.0, 0, 0], nodes_truenodeids=[1, 0, 0, 1, 0, 0],
    nodes_falsenodeids=[2, 0, 0, 2, 0, 0], target_treeids=[0, 0, 1, 1],
    target_nodeids=[1, 2, 1, 2], target_ids=[0, 0, 0, 0], target_weights=[1.0, 2.0, 3.0, 4.0])
node = helper.make_node('TreeEnsembleRegressor', ['X'], ['Y'], domain='ai.onnx.ml',
    n_targets=1, **tree)
graph = helper.make_graph([node], 'stumps',
    [helper.make_tensor_value_info('X', TensorProto.FLOAT, [None, 2])],
    [helper.make_tensor_value_info('Y', TensorProto.FLOAT, [None, 1])])
model = helper.make_model(graph, opset_imports=[helper.make_opsetid('', 17),
    helper.make_opsetid('ai.onnx.ml', 3)])
s = onnxflow.InferenceSession(model.SerializeToString())
y = s.run(None, {'X': np.array([[0.0, 0.0], [1.0, -2.0]], np.float32)})[0]
print(y.ravel().tolist(), 'numpy.ma' in sys.modules)
"""


def test_a_tree_models_first_session_does_not_import_numpy_masked_arrays() -> None:
    """A plain np.unique imports numpy.ma (to ask whether its argument is masked): packing a
    forest asks for distinct node and tree ids without it."""
    assert _fresh(_STUMPS) == "[5.0, 5.0] False"


def test_distinct_ids_are_np_uniques() -> None:
    from onnxflow.ops.ml.trees import _distinct

    rng = np.random.default_rng(0)
    for ids in (np.array([], np.int64), np.array([3]), rng.integers(-5, 40, 300)):
        assert np.array_equal(_distinct(ids), np.unique(ids))
    table = rng.integers(0, 9, (4, 5))
    assert np.array_equal(_distinct(table), np.unique(table))


def test_the_pass_made_kernels_most_models_use_import_no_other_family() -> None:
    """ShapeMemo, ShapedReshape and FoldBatchNorm serve float32 models: their module does not
    import the quantization, integer GEMM, reduction and cast families (FakeQuantize's,
    RowSquaredDistances' and the float16 kernels, which do, have modules of their own)."""
    loaded = _loaded_after("import onnxflow.ops.pass_made.kernels")
    heavy = ("quantization", "integer_gemm", "reduction", "cast")
    found = [m for m in heavy if f"onnxflow.ops.{m}" in loaded]
    assert not found, f"onnxflow.ops.pass_made.kernels imported {found}"
