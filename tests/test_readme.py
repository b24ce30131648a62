"""What the README tells a reader before they install the test extra: how much it installs
(checked against this environment's site-packages) and how long the suite takes."""

from __future__ import annotations

import importlib.metadata as metadata
import re
from pathlib import Path

import pytest
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[1]


def _section() -> str:
    """The README's paragraph after the command that runs the tests."""
    text = (ROOT / "README.md").read_text()
    start = text.index('pip install -e ".[test]"')
    return text[start : text.index("\n## ", start)]


def _text() -> str:
    """The section's text, lines joined."""
    return " ".join(_section().split())


def _name(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _closure(requirements: list[Requirement], installed: dict) -> set[str]:
    """The installed distributions ``requirements`` bring in, with their own requirements."""
    seen: set[str] = set()
    todo = list(requirements)
    while todo:
        req = todo.pop()
        name = _name(req.name)
        if name in seen or name not in installed:
            continue
        seen.add(name)
        for text in installed[name].requires or []:
            sub = Requirement(text)
            extras = req.extras or {""}
            if sub.marker is None or any(sub.marker.evaluate({"extra": e}) for e in extras):
                todo.append(sub)
    return seen


def _megabytes(dist: metadata.Distribution) -> float:
    files = (dist.locate_file(f) for f in dist.files or [])
    return sum(Path(f).stat().st_size for f in files if Path(f).is_file()) / 1e6


def test_the_readme_says_what_the_test_extra_installs() -> None:
    tomllib = pytest.importorskip("tomllib", reason="tomllib (Python 3.11+) reads pyproject.toml")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    installed = {_name(d.metadata["Name"]): d for d in metadata.distributions()}
    core = _closure([Requirement(r) for r in project["dependencies"]], installed)
    extra = [Requirement(r) for r in project["optional-dependencies"]["test"]]
    added = _closure(extra, installed) - core
    gigabytes = sum(_megabytes(installed[n]) for n in added) / 1e3
    said = re.search(r"test` extra installs about ([\d.]+) GB \((\d+) packages\)", _text())
    assert said, "the README does not say how much the test extra installs"
    assert 0.7 * gigabytes <= float(said[1]) <= 1.3 * gigabytes, f"measured {gigabytes:.2f} GB"
    assert 0.7 * len(added) <= int(said[2]) <= 1.3 * len(added), f"measured {len(added)}"


def test_the_readme_says_how_long_the_suite_takes() -> None:
    assert re.search(r"The suite \(about [\d,]+ tests\) takes about \d+ minutes", _text())
