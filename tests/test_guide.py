"""Every code block of docs/guide.md and docs/scaling.md runs as written.

Python blocks run as scripts (``__name__ == "__main__"``): the guide's in this process, each in a
fresh namespace; the scaling page's as a file in a new interpreter, since their worker processes
(``multiprocessing``'s spawn) import the script by its path. Bash blocks
may hold only ``onnxflow ...`` commands, run through the CLI's entry point. Both run in a
temporary directory holding a copy of ``examples/``, as if from the repository root, so that the
files they write stay out of the working tree. ``text`` blocks are shown output, not run.
"""

from __future__ import annotations

import importlib.util
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from onnxflow.cli import main

ROOT = Path(__file__).resolve().parents[1]
GUIDE = ROOT / "docs" / "guide.md"
SCALING = ROOT / "docs" / "scaling.md"
FENCE = re.compile(r"^```(\w+)\n(.*?)^```$", re.MULTILINE | re.DOTALL)
OPTIONAL = ("dask", "distributed", "sklearn", "skl2onnx", "ray", "pyspark")
# Warnings of others that the scaling page's scripts may meet, each named and why:
SCALING_WARNINGS = (
    # pyspark 4.x warns on every pandas UDF (mapInPandas) under pandas 3 while its support is
    # being completed; the page's Spark block only moves float columns through it
    "ignore:PySpark does not yet fully support pandas:FutureWarning",
)


def _blocks(language: str, page: Path = GUIDE) -> list[pytest.param]:
    """The page's ``language`` blocks as (line, code), with ids ``[<page>-]line<N>``."""
    text = page.read_text()
    prefix = "" if page == GUIDE else f"{page.stem}-"
    found = []
    for match in FENCE.finditer(text):
        if match.group(1) == language:
            line = text.count("\n", 0, match.start(2)) + 1
            found.append(pytest.param(line, match.group(2), id=f"{prefix}line{line}"))
    return found


def _skip_unless_installed(code: str) -> None:
    for module in OPTIONAL:
        imported = re.search(rf"^\s*(from|import) {module}\b", code, re.MULTILINE)
        if imported and importlib.util.find_spec(module) is None:
            pytest.skip(f"{module} is not installed (it is in the 'test' extra)")


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
    _skip_unless_installed(code)
    padded = "\n" * (line - 1) + code  # tracebacks give the guide's own line numbers
    exec(compile(padded, str(GUIDE), "exec"), {"__name__": "__main__"})


def test_the_scaling_page_has_runnable_blocks() -> None:
    assert len(_blocks("python", SCALING)) >= 4
    assert not _blocks("bash", SCALING), "the scaling page's blocks are Python scripts"


@pytest.mark.parametrize(("line", "code"), _blocks("python", SCALING))
def test_scaling_block_runs(line: int, code: str, in_root_copy: Path) -> None:
    _skip_unless_installed(code)
    script = in_root_copy / f"scaling_line{line}.py"
    script.write_text("\n" * (line - 1) + code)  # tracebacks give the page's own line numbers
    done = subprocess.run(
        [sys.executable, "-W", "error", *(f"-W{w}" for w in SCALING_WARNINGS), str(script)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, f"{SCALING.name} line {line}:\n{done.stderr}"


@pytest.mark.parametrize(("line", "code"), _blocks("bash"))
@pytest.mark.usefixtures("in_root_copy")
def test_bash_block_runs(line: int, code: str) -> None:
    commands = [c for c in code.splitlines() if c.strip() and not c.lstrip().startswith("#")]
    for command in commands:
        program, *args = shlex.split(command)
        assert program == "onnxflow", f"line {line}: only onnxflow commands run here: {command}"
        assert main(args) == 0, command
