"""The README's table of onnxruntime-only operators is the registry's, regenerated."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _tool():
    path = ROOT / "tools" / "contrib_report.py"
    spec = importlib.util.spec_from_file_location("contrib_report", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _table(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("| ")]


def test_readme_lists_every_family_the_registry_has() -> None:
    tool = _tool()
    readme = (ROOT / "README.md").read_text()
    section = readme.split(tool.START, 1)[1].split(tool.END, 1)[0]
    assert _table(section) == _table(tool.render()), "run python tools/contrib_report.py --readme"


def test_a_contrib_domain_or_a_version_onnx_lacks_is_onnxruntime_only() -> None:
    tool = _tool()
    assert tool.onnxruntime_only("com.microsoft", "Gelu", 1)
    assert tool.onnxruntime_only("", "LayerNormalization", 1)
    assert not tool.onnxruntime_only("", "LayerNormalization", 17)
