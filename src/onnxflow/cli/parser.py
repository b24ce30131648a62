"""The ``onnxflow`` command line: its arguments, and :func:`main`, which parses them, runs the
subcommand asked for and turns its errors into an exit code."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Iterable, Sequence

import numpy as np
import onnx

from onnxflow.cli.check import check_command
from onnxflow.cli.commands import (
    code_command,
    compare_command,
    export_python_command,
    profile_command,
    run_command,
    view_command,
)
from onnxflow.cli.custom import load_custom_ops
from onnxflow.cli.feeds import generated_note
from onnxflow.errors import OnnxflowError
from onnxflow.logs import logging_to_stderr, parse_level


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``onnxflow`` command; returns the process exit code."""
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        code = int(_with_logging(args))
        sys.stdout.flush()  # a closed pipe shows here, not at interpreter exit
        return code
    except OnnxflowError as exc:
        print(f"error: {exc}{generated_note(args)}", file=sys.stderr)
        return 1
    except BrokenPipeError:  # the reader stopped early (`onnxflow profile m.onnx | head`)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no error at exit
        return 141  # what a shell reports for a command ended by SIGPIPE
    except OSError as exc:  # a file that cannot be read or written: its name and why
        print(f"error: {exc}", file=sys.stderr)
        return 1


def _with_logging(args: argparse.Namespace) -> int:
    """Run the subcommand, showing onnxflow's log records on stderr from the level that
    ``--log-level`` or ``-v`` asks for (none asked: logging's defaults, warnings shown)."""
    given = getattr(args, "log_level", None)
    level = parse_level(given) if given else _VERBOSITY.get(min(getattr(args, "v", 0), 2))
    if level is None:
        return _with_threads(args)
    with logging_to_stderr(level):
        return _with_threads(args)


#: What ``-v`` and ``-vv`` ask for.
_VERBOSITY = {1: logging.INFO, 2: logging.DEBUG}


def _with_threads(args: argparse.Namespace) -> int:
    """Run the subcommand, with BLAS bounded to ``--threads`` threads if given."""
    threads = getattr(args, "threads", 0) or 0
    if threads <= 0:
        return args.func(args)
    from onnxflow.ort_api.threads import BlasThreads

    with BlasThreads.limit(threads):
        return args.func(args)


#: What ``onnxflow --help`` says above the commands.
DESCRIPTION = "onnxflow: run a model on given or generated inputs, check a model, profile one run, "
DESCRIPTION += "print the code onnxflow runs for it, draw it in a web page. "
DESCRIPTION += "'onnxflow COMMAND --help' tells more."


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="onnxflow", description=DESCRIPTION)
    parser.add_argument("--version", action="version", version=_version())
    _add_log_arguments(parser)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    run = sub.add_parser("run", help="run a model and summarise its outputs")
    _add_feed_arguments(run)
    run.add_argument("--output-dir", help="save every output there as NAME.npy")
    run.add_argument("--intermediate", metavar="DIR", help="save every main-graph value there")
    run.add_argument("--verbose", action="store_true", help="print each node as it runs")
    run.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="a progress line for a run over 1 s: the loop iterations done, else the time elapsed "
        "(default: on a terminal)",
    )
    run.set_defaults(func=run_command)
    check = sub.add_parser("check", help="validate a model and print a report")
    check.add_argument("model", help="path to an .onnx file")
    check.set_defaults(func=check_command)
    profile = sub.add_parser("profile", help="time every node and loop iteration, median of runs")
    _add_feed_arguments(profile)
    profile.add_argument(
        "--warmup",
        type=_non_negative,
        default=2,
        metavar="N",
        help="runs before timing, not timed (default 2: a session gives BLAS its threads from "
        "its third run on, and the first runs make generated code)",
    )
    profile.add_argument(
        "--runs", type=_positive, default=10, metavar="N", help="timed runs (default 10)"
    )
    profile.add_argument("--trace", metavar="FILE", help="write a Chrome trace (Perfetto opens it)")
    profile.add_argument("--top", type=int, default=10, help="how many nodes and op types to list")
    profile.add_argument(
        "--bodies",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="also time every node inside loop and branch bodies, in a second run observed "
        "node by node (slower than the model; default: with --trace)",
    )
    profile.set_defaults(func=profile_command)
    code = sub.add_parser("code", help="print the Python that onnxflow runs for a model")
    _add_feed_arguments(code)
    code.add_argument(
        "--no-run",
        action="store_true",
        help="do not run the model first (loops then show only their body's function)",
    )
    code.set_defaults(func=code_command)
    _add_compare(sub)
    _add_view(sub)
    export = sub.add_parser("export-python", help="write a model as a standalone NumPy module")
    export.add_argument("model", help="the .onnx file")
    export.add_argument("-o", "--output", required=True, help="the module to write (.py)")
    export.set_defaults(func=export_python_command)
    _add_common_arguments(sub.choices.values())
    return parser


def _add_compare(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """``onnxflow compare`` and its arguments."""
    diff = sub.add_parser("compare", help="whether two runs of a model agree, and where they part")
    _add_feed_arguments(diff)
    diff.add_argument(
        "--against",
        default="onnxruntime",
        metavar="onnxruntime|reference|OTHER.onnx",
        help="what to compare onnxflow's run with (default onnxruntime)",
    )
    diff.add_argument("--rtol", type=float, default=1e-4, help="relative tolerance")
    diff.add_argument("--atol", type=float, default=1e-5, help="absolute tolerance")
    diff.add_argument("--json", metavar="FILE", help="write the full report there as JSON")
    diff.add_argument(
        "--strict",
        action="store_true",
        help="exit 1 when any compared value differs at all, not only when an output is beyond "
        "tolerance",
    )
    diff.set_defaults(func=compare_command)


def _add_view(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """``onnxflow view`` and its arguments."""
    show = sub.add_parser(
        "view", help="write one self-contained HTML page of the graph, its values and times"
    )
    _add_feed_arguments(show)
    show.add_argument(
        "--run",
        action="store_true",
        help="run the model: each value's statistics and each node's time on the graph",
    )
    show.add_argument(
        "--against",
        metavar="onnxruntime|reference|OTHER.onnx",
        help="also compare with this run: each value's error, the first divergence, its origins",
    )
    show.add_argument(
        "--values", action="store_true", help="keep the tensors too, not only their statistics"
    )
    show.add_argument("--rtol", type=float, default=1e-4, help="relative tolerance (--against)")
    show.add_argument("--atol", type=float, default=1e-5, help="absolute tolerance (--against)")
    show.add_argument(
        "-o", "--output", metavar="FILE", help="the page to write (default: MODEL.html)"
    )
    show.add_argument("--open", action="store_true", help="open the page in a web browser")
    show.set_defaults(func=view_command)


def _add_common_arguments(commands: Iterable[argparse.ArgumentParser]) -> None:
    """What every subcommand takes: the log options and ``--custom-ops``."""
    for command in commands:
        _add_log_arguments(command)
        _add_custom_ops_argument(command)


def _add_custom_ops_argument(parser: argparse.ArgumentParser) -> None:
    """``--custom-ops``: functions for operators onnxflow lacks (:mod:`onnxflow.cli.custom`)."""
    parser.add_argument(
        "--custom-ops",
        type=load_custom_ops,
        default=None,
        metavar="MODULE:NAME",
        help="Python functions for operators onnxflow lacks: the dict NAME of MODULE (or of "
        "FILE.py), mapping 'domain.OpType' to fn(*inputs, **attributes), as "
        "InferenceSession(custom_ops=...) takes",
    )


def _add_log_arguments(parser: argparse.ArgumentParser) -> None:
    """``-v`` and ``--log-level``, before the subcommand or after it (unset, they stay out of
    the parsed arguments, so a subcommand does not hide what was given before it)."""
    parser.add_argument(
        "-v",
        action="count",
        default=argparse.SUPPRESS,
        help="show onnxflow's log records on stderr: -v from INFO (what was loaded, how long "
        "each stage took), -vv from DEBUG",
    )
    parser.add_argument(
        "--log-level",
        default=argparse.SUPPRESS,
        metavar="LEVEL",
        help="show onnxflow's log records from LEVEL up on stderr: debug, info, warning, "
        "error, critical, or onnxruntime's severity 0 .. 4",
    )


def _version() -> str:
    """``onnxflow X``, the versions of what it runs on, and how many of its compiled kernel
    modules were built (:mod:`onnxflow.native`)."""
    from onnxflow import __version__, native

    return (
        f"onnxflow {__version__} (numpy {np.__version__}, onnx {onnx.__version__}, "
        f"Python {sys.version.split()[0]}; compiled kernels "
        f"{len(native.built())}/{len(native.MODULES)})"
    )


def _add_feed_arguments(command: argparse.ArgumentParser) -> None:
    command.add_argument("model", help="path to an .onnx file")
    command.add_argument(
        "--input",
        action="append",
        default=[],
        metavar="NAME=FILE",
        help="feed input NAME from a .npy or .pb (TensorProto) file; repeatable",
    )
    command.add_argument(
        "--dim",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="value of a symbolic dimension for generated inputs (default 1); repeatable",
    )
    command.add_argument(
        "--shape",
        action="append",
        default=[],
        metavar="NAME=D0,D1,...",
        help="shape of generated input NAME, for dimensions --dim cannot name ('?', unnamed); "
        "repeatable",
    )
    command.add_argument(
        "--value",
        action="append",
        default=[],
        metavar="NAME=SCALAR",
        help="fill generated input NAME with SCALAR (a sample rate, a length); repeatable",
    )
    command.add_argument(
        "--range",
        action="append",
        default=[],
        metavar="NAME=LO,HI",
        help="draw generated input NAME from LO to HI (integers: both included; floats: "
        "uniformly); an integer input that indexes a Gather draws from the gathered axis's "
        "range unless given; repeatable",
    )
    command.add_argument("--seed", type=int, default=0, help="seed for generated inputs")
    command.add_argument(
        "--threads",
        type=_non_negative,
        default=0,
        metavar="N",
        help="the most threads BLAS uses, and a tree ensemble's walk (onnxflow's other compiled "
        "kernels use the caller's thread only); default 0: the session's default, which gives "
        "BLAS the cores the load leaves idle from a session's third run on (docs/scaling.md)",
    )


def _positive(text: str) -> int:
    """A count of 1 or more."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be 1 or more, found {value}")
    return value


def _non_negative(text: str) -> int:
    """A count of 0 or more (``--threads``, ``--warmup``)."""
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, found {value}")
    return value
