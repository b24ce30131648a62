"""Write the benchmark's table into README.md, between the bench markers.

    python tools/bench_readme.py                      # run the full bench, then write the table
    python tools/bench_readme.py --from-json out.json  # write the table of a saved run
    python tools/bench_readme.py --repeats 9           # other options go to the bench
    python tools/bench_readme.py --zoo-from-json z.json  # the zoo table of a saved --zoo run
    python tools/bench_readme.py --rows-from-json r.json  # the trees-by-rows table (--zoo --rows)

The README must already hold ``<!-- bench:start -->`` and ``<!-- bench:end -->`` (and
``<!-- zoo:start -->`` and ``<!-- zoo:end -->`` for the zoo, ``<!-- rows:start -->`` and
``<!-- rows:end -->`` for the zoo's tree models at other row counts).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from onnxflow.bench.cli import select
from onnxflow.bench.harness import report_from_json
from onnxflow.bench.report import render
from onnxflow.bench.tier import run_bench

README = Path(__file__).resolve().parents[1] / "README.md"
START, END = "<!-- bench:start -->", "<!-- bench:end -->"
ZOO_START, ZOO_END = "<!-- zoo:start -->", "<!-- zoo:end -->"
ROWS_START, ROWS_END = "<!-- rows:start -->", "<!-- rows:end -->"


def write_section(
    text: str, readme: Path = README, markers: tuple[str, str] = (START, END)
) -> None:
    """Replace what lies between the ``markers`` of ``readme`` with ``text``."""
    start, end = markers
    content = readme.read_text()
    if start not in content or end not in content:
        raise SystemExit(f"{readme} has no {start} ... {end} markers")
    head, _, rest = content.partition(start)
    _, _, tail = rest.partition(end)
    readme.write_text(f"{head}{start}\n{text}\n{end}{tail}")


def write_zoo(saved: Path, markers: tuple[str, str], readme: Path = README) -> None:
    """Write the table of a saved ``--zoo`` run between the ``markers`` of ``readme``."""
    from onnxflow.bench.zoo.run import rows_from_json, zoo_text

    data = json.loads(saved.read_text())
    text = zoo_text(rows_from_json(data), data["machine"], data.get("seconds", 4.0))
    print(text)
    write_section(text, readme, markers)


def main(argv: list[str] | None = None) -> int:
    """Run (or read) a bench report and write its table into the README."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--from-json", type=Path, metavar="PATH", help="a saved --json run")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--only", action="append", default=[], metavar="NAME")
    parser.add_argument("--zoo-from-json", type=Path, metavar="PATH", help="a saved --zoo run")
    parser.add_argument(
        "--rows-from-json", type=Path, metavar="PATH", help="a saved --zoo --rows run"
    )
    args = parser.parse_args(argv)
    for saved, markers in (
        (args.zoo_from_json, (ZOO_START, ZOO_END)),
        (args.rows_from_json, (ROWS_START, ROWS_END)),
    ):
        if saved:
            write_zoo(saved, markers)
    if args.zoo_from_json or args.rows_from_json:
        return 0
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
