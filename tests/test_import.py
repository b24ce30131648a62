"""A plain ``import onnxflow`` loads what a session needs and no more: the comparison, view,
export and observer modules, the command line, the bench and the compiled kernels load when
first used, and the public names they give still resolve as before."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

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
