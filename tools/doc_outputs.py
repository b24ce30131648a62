"""The shown outputs of docs/guide.md, made by running its code: each ```` ```text ```` block
shows what the code block before it prints, and a comment after a top-level ``print(...)``
statement that starts like a printed value (``[``, ``{``, ``(``, a quote, a digit, ``-``) shows
what that call prints.
A ```` ```text timings ```` block shows times: its numbers with a decimal point vary from run to
run, and so may the order of its rows.

    python tools/doc_outputs.py            # rewrite the guide's text blocks from a run
    python tools/doc_outputs.py --check    # exit 1 when one differs from what the code prints

Blocks run as tests/test_guide.py runs them, which compares each shown output too: Python
blocks in a fresh namespace, bash blocks (``onnxflow ...`` commands, and ``NAME=$(mktemp -d)``
lines naming a temporary folder) through the CLI's entry point, from a temporary copy of
``examples/``. Only blocks followed by a text block are run here.
"""

from __future__ import annotations

import argparse
import ast
import builtins
import contextlib
import io
import os
import re
import shlex
import shutil
import sys
import tempfile
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GUIDE = ROOT / "docs" / "guide.md"
FENCE = re.compile(r"^```(\w+)([^\n]*)\n(.*?)^```$", re.MULTILINE | re.DOTALL)
#: How a comment showing a printed value starts.
VALUE_START = re.compile(r"""[\[{('"\d-]""")
#: A bash line naming a temporary folder: ``out=$(mktemp -d)``.
MKTEMP = re.compile(r"(\w+)=\$\(mktemp -d\)")


@dataclass(frozen=True)
class Block:
    """A fenced block: its language, the rest of its info string, its first line's number on
    the page and its text (with where that text lies in the page)."""

    language: str
    info: str
    line: int
    code: str
    start: int
    end: int


def blocks(text: str) -> list[Block]:
    """The page's fenced blocks, in order."""
    return [
        Block(m[1], m[2].strip(), text.count("\n", 0, m.start(3)) + 1, m[3], m.start(3), m.end(3))
        for m in FENCE.finditer(text)
    ]


def shown_after(page: list[Block], block: Block) -> Block | None:
    """The text block right after ``block`` on the page (its shown output), if any."""
    following = page[page.index(block) + 1 :]
    return following[0] if following and following[0].language == "text" else None


@dataclass
class Printed:
    """What a block printed: all of it, and each print call's text by the line of the call."""

    text: str = ""
    by_line: dict[int, list[str]] = field(default_factory=lambda: defaultdict(list))


def run_python(code: str, line: int, filename: str) -> Printed:
    """Run a Python block as a script (``__name__ == "__main__"``) in a fresh namespace, with
    line numbers the page's own; return what it printed."""
    printed, out = Printed(), io.StringIO()

    def recording_print(*args: object, **kwargs: object) -> None:
        if kwargs.get("file") not in (None, sys.stdout):
            builtins.print(*args, **kwargs)
            return
        text = io.StringIO()
        builtins.print(*args, **{**kwargs, "file": text})
        printed.by_line[sys._getframe(1).f_lineno].append(text.getvalue())
        sys.stdout.write(text.getvalue())

    padded = "\n" * (line - 1) + code  # tracebacks give the page's own line numbers
    namespace = {"__name__": "__main__", "print": recording_print}
    with contextlib.redirect_stdout(out):
        exec(compile(padded, filename, "exec"), namespace)
    printed.text = out.getvalue()
    return printed


def run_bash(code: str, line: int, temporary: Path | None = None) -> str:
    """Run a bash block's ``onnxflow`` commands through the CLI's entry point, each of its
    ``NAME=$(mktemp -d)`` lines making a folder under ``temporary`` (by default the system's
    temporary folder); return what they printed (an error if a command is not ``onnxflow`` or
    fails)."""
    from onnxflow.cli import main

    folders: dict[str, str] = {}
    out = io.StringIO()
    for number, text in enumerate(code.splitlines(), start=line):
        if not text.strip() or text.lstrip().startswith("#"):
            continue
        named = MKTEMP.match(text.strip())
        if named:
            folders[named[1]] = tempfile.mkdtemp(dir=temporary)
            continue
        program, *args = (_expand(a, folders) for a in shlex.split(text, comments=True))
        if program != "onnxflow":
            raise AssertionError(f"line {number}: only onnxflow commands run here: {text}")
        with contextlib.redirect_stdout(out):
            status = main(args)
        if status != 0:
            raise AssertionError(f"line {number}: exit code {status}: {text}")
    return out.getvalue()


def _expand(arg: str, folders: dict[str, str]) -> str:
    """``arg`` with ``$NAME`` and ``${NAME}`` replaced by the folders named so far."""

    def folder(m: re.Match) -> str:
        name = m[1] or m[2]
        if name not in folders:
            raise AssertionError(f"${name} names no folder: make it with {name}=$(mktemp -d)")
        return folders[name]

    return re.sub(r"\$(\w+)|\$\{(\w+)\}", folder, arg)


def same_output(shown: Block, printed: str) -> bool:
    """Whether ``printed`` is what ``shown`` shows (a timings block: up to its times and the
    order of its rows)."""
    ours, theirs = _lines(shown.code), _lines(printed)
    if shown.info == "timings":
        return sorted(map(_untimed, ours)) == sorted(map(_untimed, theirs))
    return ours == theirs


def _lines(text: str) -> list[str]:
    return [line.rstrip() for line in text.rstrip().splitlines()]


def _untimed(line: str) -> str:
    return " ".join(re.sub(r"\d+\.\d+", "#", line).split())


def print_comments(code: str, line: int) -> Iterator[tuple[int, int, str]]:
    """The values shown in comments after top-level ``print(...)`` statements, as
    (first line, last line of the statement, the value with its lines joined): a comment at the
    end of its last line, or else the comment lines right below it."""
    lines = code.splitlines()
    for stmt in ast.parse(code).body:
        call = getattr(stmt, "value", None)
        if not (isinstance(call, ast.Call) and getattr(call.func, "id", None) == "print"):
            continue
        end = stmt.end_lineno or stmt.lineno
        trailing = lines[end - 1][stmt.end_col_offset :].strip()
        shown = [trailing[1:]] if trailing.startswith("#") else []
        below = end
        while not trailing and below < len(lines) and lines[below].lstrip().startswith("#"):
            shown.append(lines[below].lstrip()[1:])
            below += 1
        value = " ".join(" ".join(shown).split())
        if value and VALUE_START.match(value):
            yield stmt.lineno + line - 1, end + line - 1, value


def printed_between(printed: Printed, first: int, last: int) -> str:
    """What the print calls made on lines ``first`` to ``last`` printed, whitespace collapsed."""
    texts = [t for n in range(first, last + 1) for t in printed.by_line.get(n, [])]
    return " ".join("".join(texts).split())


@contextlib.contextmanager
def in_examples_copy() -> Iterator[Path]:
    """Work from a temporary folder holding a copy of ``examples/``, as from the repository
    root; yield it."""
    before = Path.cwd()
    with tempfile.TemporaryDirectory() as folder:
        shutil.copytree(ROOT / "examples", Path(folder) / "examples")
        os.chdir(folder)
        try:
            yield Path(folder)
        finally:
            os.chdir(before)


def regenerate(page: Path) -> tuple[str, list[int]]:
    """The page with each shown output replaced by what its block prints now, and the lines
    of the text blocks that changed."""
    text = page.read_text()
    found = blocks(text)
    changed, pieces, done = [], [], 0
    with in_examples_copy(), tempfile.TemporaryDirectory() as scratch:
        for block in found:
            shown = shown_after(found, block)
            if block.language not in ("python", "bash") or shown is None:
                continue
            printed = _printed(block, page, Path(scratch))
            if not same_output(shown, printed):
                changed.append(shown.line)
                pieces += [text[done : shown.start], printed.rstrip() + "\n"]
                done = shown.end
    return "".join(pieces) + text[done:], changed


def _printed(block: Block, page: Path, scratch: Path) -> str:
    if block.language == "python":
        return run_python(block.code, block.line, str(page)).text
    return run_bash(block.code, block.line, scratch)


def main(argv: list[str] | None = None) -> int:
    """Rewrite the guide's shown outputs (``--check``: only say which are stale)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when an output is stale")
    parser.add_argument("page", nargs="?", default=str(GUIDE))
    args = parser.parse_args(argv)
    page = Path(args.page)
    text, changed = regenerate(page)
    where = ", ".join(f"line {n}" for n in changed) or "none"
    if args.check:
        print(f"{page.name}: stale shown outputs: {where}")
        return 1 if changed else 0
    page.write_text(text)
    print(f"{page.name}: rewrote the shown outputs at {where}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
