"""docs/api.md is what tools/api_reference.py generates now; every public name has a docstring."""

from __future__ import annotations

import importlib.util
import inspect
from pathlib import Path
from types import ModuleType

import pytest

import onnxflow

ROOT = Path(__file__).resolve().parents[1]


def _tool() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "api_reference", ROOT / "tools" / "api_reference.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


api_reference = _tool()


def test_the_page_is_generated() -> None:
    page = ROOT / "docs" / "api.md"
    assert page.read_text() == api_reference.generate(), (
        "docs/api.md is out of date: run python tools/api_reference.py"
    )


def test_the_page_covers_every_public_name() -> None:
    text = api_reference.generate()
    for name in api_reference.public_names():
        assert f"`{name}" in text or f"`onnxflow.{name}`" in text, name


@pytest.mark.parametrize("name", api_reference.public_names())
def test_public_name_has_a_docstring(name: str) -> None:
    obj = getattr(onnxflow, name)
    assert (inspect.getdoc(obj) or "").strip(), f"onnxflow.{name} has no docstring"
    if inspect.isclass(obj) and not issubclass(obj, BaseException):
        bare = [m for m, member in api_reference._members(obj) if not inspect.getdoc(member)]
        assert not bare, f"onnxflow.{name}: members without a docstring: {bare}"


def test_check_mode_reports_a_stale_page(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    stale = tmp_path / "api.md"
    stale.write_text("# API reference\n")
    monkeypatch.setattr(api_reference, "API_PAGE", stale)
    assert api_reference.main(["--check"]) == 1
    assert api_reference.main([]) == 0
    assert api_reference.main(["--check"]) == 0
