"""Every code block of docs/guide.md and docs/scaling.md runs as written, and every output the
guide shows is what its code prints; the README's Python blocks run as written too.

Python blocks run as scripts (``__name__ == "__main__"``): the guide's and the README's in this
process, each in a fresh namespace; the scaling page's as a file in a new interpreter, since
their worker processes (``multiprocessing``'s spawn) import the script by its path. Bash blocks
may hold only ``onnxflow ...`` commands, run through the CLI's entry point, and
``NAME=$(mktemp -d)`` lines naming a temporary folder. All run in a temporary directory holding a
copy of ``examples/``, as if from the repository root, and must leave nothing else there: the
files they write go into temporary folders. A ``text`` block is the output of the block before
it, compared with what that block prints (tools/doc_outputs.py, which writes them again).
"""

from __future__ import annotations

import importlib.util
import itertools
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]
GUIDE = ROOT / "docs" / "guide.md"
SCALING = ROOT / "docs" / "scaling.md"
README = ROOT / "README.md"


def _tool() -> ModuleType:
    spec = importlib.util.spec_from_file_location("doc_outputs", ROOT / "tools" / "doc_outputs.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


doc_outputs = _tool()
OPTIONAL = ("dask", "distributed", "sklearn", "skl2onnx", "ray", "pyspark")
# Warnings of others that the scaling page's scripts may meet, each named and why:
SCALING_WARNINGS = (
    # pyspark 4.x warns on every pandas UDF (mapInPandas) under pandas 3 while its support is
    # being completed; the page's Spark block only moves float columns through it
    "ignore:PySpark does not yet fully support pandas:FutureWarning",
)


def _blocks(language: str, page: Path = GUIDE) -> list[pytest.param]:
    """The page's ``language`` blocks as (line, code), with ids ``[<page>-]line<N>``."""
    prefix = "" if page == GUIDE else f"{page.stem}-"
    return [
        pytest.param(b.line, b.code, id=f"{prefix}line{b.line}")
        for b in doc_outputs.blocks(page.read_text())
        if b.language == language
    ]


def _shown_after(line: int, page: Path = GUIDE) -> doc_outputs.Block | None:
    """The text block showing the output of the block at ``line``, if any."""
    found = doc_outputs.blocks(page.read_text())
    return doc_outputs.shown_after(found, next(b for b in found if b.line == line))


def _skip_unless_installed(code: str) -> None:
    for module in OPTIONAL:
        imported = re.search(rf"^\s*(from|import) {module}\b", code, re.MULTILINE)
        if imported and importlib.util.find_spec(module) is None:
            pytest.skip(f"{module} is not installed (it is in the 'test' extra)")


@pytest.fixture
def in_root_copy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A folder holding a copy of ``examples/`` to run from."""
    root = tmp_path / "root"
    shutil.copytree(ROOT / "examples", root / "examples")
    monkeypatch.chdir(root)
    return root


@pytest.fixture
def in_clean_root_copy(in_root_copy: Path) -> Iterator[Path]:
    """:func:`in_root_copy`, where a block may write nothing, nor change the examples (the
    scaling page's engines keep their own working files: Spark's warehouse, say)."""
    before = sorted(p.relative_to(in_root_copy) for p in in_root_copy.rglob("*"))
    yield in_root_copy
    after = sorted(p.relative_to(in_root_copy) for p in in_root_copy.rglob("*"))
    assert after == before, f"files written into the working folder: {set(after) - set(before)}"


def test_the_guide_has_runnable_blocks() -> None:
    assert len(_blocks("python")) >= 6 and len(_blocks("bash")) >= 1


def test_every_shown_output_follows_the_block_that_prints_it() -> None:
    found = doc_outputs.blocks(GUIDE.read_text())
    for previous, block in itertools.pairwise(found):
        if block.language == "text":
            assert previous.language in ("python", "bash"), f"line {block.line}"
    assert found[0].language != "text"
    assert sum(b.language == "text" for b in found) >= 5


@pytest.mark.parametrize(("line", "code"), _blocks("python"))
@pytest.mark.usefixtures("in_clean_root_copy")
def test_python_block_runs(line: int, code: str) -> None:
    _skip_unless_installed(code)
    printed = doc_outputs.run_python(code, line, str(GUIDE))
    _check_shown(line, printed.text)
    _check_print_comments(code, line, printed, GUIDE)


def _check_shown(line: int, printed: str, page: Path = GUIDE) -> None:
    shown = _shown_after(line, page)
    if shown is not None:
        assert doc_outputs.same_output(shown, printed), (
            f"{page.name} line {shown.line} shows an output the block at line {line} no longer "
            f"prints (python tools/doc_outputs.py writes it again); it prints:\n{printed}"
        )


def _check_print_comments(code: str, line: int, printed: object, page: Path) -> None:
    for first, last, shown in doc_outputs.print_comments(code, line):
        got = doc_outputs.printed_between(printed, first, last)
        assert got == shown, f"{page.name} line {first}: the comment shows {shown!r}, not {got!r}"


@pytest.mark.parametrize(("line", "code"), _blocks("python", README))
@pytest.mark.usefixtures("in_clean_root_copy")
def test_readme_python_block_runs(line: int, code: str) -> None:
    printed = doc_outputs.run_python(code, line, str(README))
    _check_print_comments(code, line, printed, README)


def test_the_readme_has_runnable_blocks_with_shown_values() -> None:
    blocks = _blocks("python", README)
    assert len(blocks) >= 3
    shown = [c for b in blocks for c in doc_outputs.print_comments(b.values[1], b.values[0])]
    assert len(shown) >= 1


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
@pytest.mark.usefixtures("in_clean_root_copy")
def test_bash_block_runs(line: int, code: str, tmp_path: Path) -> None:
    printed = doc_outputs.run_bash(code, line, tmp_path)
    _check_shown(line, printed)


def test_the_tool_writes_stale_outputs_again(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "```python\nprint(sorted({3, 1, 2}))  # [1, 2, 3]\nprint('two\\nlines')\n```\n\n"
        "```text\nstale\n```\n"
    )
    assert doc_outputs.main(["--check", str(page)]) == 1
    assert doc_outputs.main([str(page)]) == 0
    assert "```text\n[1, 2, 3]\ntwo\nlines\n```" in page.read_text()
    assert doc_outputs.main(["--check", str(page)]) == 0


def test_a_comment_after_print_is_checked_and_a_description_is_not() -> None:
    code = "print([1])  # [1]\nprint(2)  # the answer\n"
    code += "print({'a': 1,\n       'b': 2})\n# {'a': 1,\n#  'b': 2}\n"
    found = list(doc_outputs.print_comments(code, 10))
    assert found == [(10, 10, "[1]"), (12, 13, "{'a': 1, 'b': 2}")]
    printed = doc_outputs.run_python(code, 10, "page.md")
    assert doc_outputs.printed_between(printed, 12, 13) == "{'a': 1, 'b': 2}"
