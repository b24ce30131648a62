"""Every code block of docs/guide.md runs as written.

Python blocks run as scripts (``__name__ == "__main__"``), each in a fresh namespace; bash blocks
may hold only ``onnxflow ...`` commands, run through the CLI's entry point. Both run in a
temporary directory holding a copy of ``examples/``, as if from the repository root, so that the
files they write stay out of the working tree. ``text`` blocks are shown output, not run.
"""

from __future__ import annotations

import importlib.util
import re
import shlex
import shutil
from pathlib import Path

import pytest

from onnxflow.cli import main

ROOT = Path(__file__).resolve().parents[1]
GUIDE = ROOT / "docs" / "guide.md"
FENCE = re.compile(r"^```(\w+)\n(.*?)^```$", re.MULTILINE | re.DOTALL)
OPTIONAL = ("dask", "distributed", "sklearn", "skl2onnx")


def _blocks(language: str) -> list[pytest.param]:
    text = GUIDE.read_text()
    found = []
    for match in FENCE.finditer(text):
        if match.group(1) == language:
            line = text.count("\n", 0, match.start(2)) + 1
            found.append(pytest.param(line, match.group(2), id=f"line{line}"))
    return found


@pytest.fixture
def in_root_copy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    shutil.copytree(ROOT / "examples", tmp_path / "examples")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_the_guide_has_runnable_blocks() -> None:
    assert len(_blocks("python")) >= 6 and len(_blocks("bash")) >= 1


@pytest.mark.parametrize(("line", "code"), _blocks("python"))
@pytest.mark.usefixtures("in_root_copy")
def test_python_block_runs(line: int, code: str) -> None:
    for module in OPTIONAL:
        imported = re.search(rf"^\s*(from|import) {module}\b", code, re.MULTILINE)
        if imported and importlib.util.find_spec(module) is None:
            pytest.skip(f"{module} is not installed (it is in the 'test' extra)")
    padded = "\n" * (line - 1) + code  # tracebacks give the guide's own line numbers
    exec(compile(padded, str(GUIDE), "exec"), {"__name__": "__main__"})


@pytest.mark.parametrize(("line", "code"), _blocks("bash"))
@pytest.mark.usefixtures("in_root_copy")
def test_bash_block_runs(line: int, code: str) -> None:
    commands = [c for c in code.splitlines() if c.strip() and not c.lstrip().startswith("#")]
    for command in commands:
        program, *args = shlex.split(command)
        assert program == "onnxflow", f"line {line}: only onnxflow commands run here: {command}"
        assert main(args) == 0, command
