"""Write src/onnxflow/ops/kernel_index.py: which modules register each operator's kernels.

Usage::

    python tools/kernel_index.py          # rewrite the index (formatted with ruff)
    python tools/kernel_index.py --check  # exit 1 when it differs from the registrations

The registry imports a kernel module the first time one of its operators is looked up, from
this index, so that a session imports only the kernel families its model uses. The index is
made from the registrations themselves (every kernel module imported);
tests/test_kernel_index.py checks it against them.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

from onnxflow.ops import REGISTRY, load_all
from onnxflow.ops.kernel_index import KERNEL_MODULES
from onnxflow.ops.registry import kernel_modules

INDEX = Path(__file__).resolve().parent.parent / "src" / "onnxflow" / "ops" / "kernel_index.py"

HEADER = '''"""Which modules register each operator's kernels, by ``(domain, op_type)``: what the
registry imports the first time it looks the operator up. Written by tools/kernel_index.py from
the registrations; tests/test_kernel_index.py keeps it in step with them."""

KERNEL_MODULES: dict[tuple[str, str], tuple[str, ...]] = {
'''


def registered() -> dict[tuple[str, str], tuple[str, ...]]:
    """The index as the registrations make it, every kernel module imported."""
    load_all()
    return kernel_modules(REGISTRY.registered())


def page(index: dict[tuple[str, str], tuple[str, ...]]) -> str:
    """The index module's text (before formatting)."""
    lines = [HEADER]
    lines += [f"    {key!r}: {modules!r},\n" for key, modules in index.items()]
    lines.append("}\n")
    return "".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only say whether it is stale")
    args = parser.parse_args()
    index = registered()
    if args.check:
        stale = index != KERNEL_MODULES
        print("stale: run python tools/kernel_index.py" if stale else "up to date")
        return 1 if stale else 0
    INDEX.write_text(page(index))
    subprocess.run([sys.executable, "-m", "ruff", "format", "-q", str(INDEX)], check=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
