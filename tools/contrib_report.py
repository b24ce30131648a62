"""List the onnxruntime-specific operators onnxflow runs, by family, from the registry.

Usage::

    python tools/contrib_report.py            # print the section
    python tools/contrib_report.py --readme   # also rewrite it in README.md

Counted against onnxruntime's CPU provider (``get_all_opkernel_def()``): its ``com.microsoft``
and ``com.microsoft.nchwc`` kernels, and its default-domain kernels for versions onnx has no
schema for (``LayerNormalization`` below opset 17, ``SimplifiedLayerNormalization``...).
"""

from __future__ import annotations

import argparse
import re
import sys
from collections import defaultdict
from pathlib import Path

import onnxruntime
from onnxruntime.capi.onnxruntime_pybind11_state import get_all_opkernel_def

from onnxflow.ops import REGISTRY, load_all
from onnxflow.ops.registry import Kernel, schema_since_version

README = Path(__file__).resolve().parent.parent / "README.md"
START, END = "<!-- contrib:start -->", "<!-- contrib:end -->"
_INTERNAL = {"MemcpyFromHost", "MemcpyToHost", "SampleOp"}  # onnxruntime's plumbing and demo


def onnxruntime_only(domain: str, op_type: str, since: int) -> bool:
    """Whether a kernel registration serves something only onnxruntime defines: a contrib
    domain, or a default-domain version onnx has no schema for."""
    if domain.startswith("com.microsoft"):
        return True
    return domain == "" and schema_since_version("", op_type, since) is None


def theirs() -> set[tuple[str, str]]:
    """onnxruntime's CPU kernels of operators only onnxruntime defines, as (domain, op)."""
    found = set()
    for k in get_all_opkernel_def():
        domain = "" if k.domain == "ai.onnx" else k.domain
        if k.provider != "CPUExecutionProvider" or k.op_name in _INTERNAL:
            continue
        if onnxruntime_only(domain, k.op_name, k.version_range[0]):
            found.add((domain, k.op_name))
    return found


def ours() -> dict[str, set[tuple[str, str]]]:
    """onnxflow's kernels of operators only onnxruntime defines, by family module."""
    load_all()
    families: dict[str, set[tuple[str, str]]] = defaultdict(set)
    for kernel in REGISTRY.all():
        if onnxruntime_only(kernel.domain, kernel.op_type, kernel.since):
            families[_family(kernel)].add((kernel.domain, kernel.op_type))
    return families


def _family(kernel: Kernel) -> str:
    module = kernel.fn.__module__.removeprefix("onnxflow.ops.")
    return module.removeprefix("microsoft.")


def _label(domain: str, op_type: str) -> str:
    if domain == "":
        return f"{op_type} (default domain)"
    return f"nchwc {op_type}" if domain.endswith(".nchwc") else op_type


def render() -> str:
    """The README section: a table of families and the CPU kernels still missing."""
    families, reference = ours(), theirs()
    covered = set().union(*families.values()) & reference
    lines = [
        f"**{len(covered)} / {len(reference)}** of onnxruntime {onnxruntime.__version__}'s CPU "
        "kernels of operators only onnxruntime defines (`com.microsoft`, `com.microsoft.nchwc`, "
        "and default-domain versions onnx has no schema for) have an onnxflow kernel.",
        "",
        "| family | operators |",
        "| --- | --- |",
    ]
    for family in sorted(families):
        names = sorted(families[family])
        lines.append(f"| {family} | {', '.join(_label(d, o) for d, o in names)} |")
    missing = sorted(reference - covered, key=lambda d_o: d_o[1])
    lines += ["", "Not yet: " + (", ".join(_label(d, o) for d, o in missing) or "none") + "."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Print the section; with ``--readme`` write it between its markers in README.md."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--readme", action="store_true", help="rewrite the section in README.md")
    args = parser.parse_args(argv)
    text = render()
    print(text)
    if args.readme:
        readme = README.read_text()
        pattern = re.compile(re.escape(START) + ".*?" + re.escape(END), re.S)
        if not pattern.search(readme):
            print(f"README.md has no {START} ... {END} markers", file=sys.stderr)
            return 1
        README.write_text(pattern.sub(lambda _: f"{START}\n{text}\n{END}", readme))
    return 0


if __name__ == "__main__":
    sys.exit(main())
