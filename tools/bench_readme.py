"""Write the benchmark's table into README.md, between the bench markers.

    python tools/bench_readme.py                      # run the full bench, then write the table
    python tools/bench_readme.py --from-json out.json  # write the table of a saved run
    python tools/bench_readme.py --repeats 9           # other options go to the bench

The README must already hold ``<!-- bench:start -->`` and ``<!-- bench:end -->``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from onnxflow.bench.cli import select
from onnxflow.bench.harness import report_from_json, run_bench
from onnxflow.bench.report import render

README = Path(__file__).resolve().parents[1] / "README.md"
START, END = "<!-- bench:start -->", "<!-- bench:end -->"


def write_section(text: str, readme: Path = README) -> None:
    """Replace what lies between the bench markers of ``readme`` with ``text``."""
    content = readme.read_text()
    if START not in content or END not in content:
        raise SystemExit(f"{readme} has no {START} ... {END} markers")
    head, _, rest = content.partition(START)
    _, _, tail = rest.partition(END)
    readme.write_text(f"{head}{START}\n{text}\n{END}{tail}")


def main(argv: list[str] | None = None) -> int:
    """Run (or read) a bench report and write its table into the README."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--from-json", type=Path, metavar="PATH", help="a saved --json run")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--only", action="append", default=[], metavar="NAME")
    args = parser.parse_args(argv)
    if args.from_json:
        report = report_from_json(json.loads(args.from_json.read_text()))
    else:
        report = run_bench(select(args.only), args.repeats, quick=False)
    text = render(report)
    print(text)
    write_section(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
