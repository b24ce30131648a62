"""Reading ``expected_failures.txt``, shared by the suite test and the conformance report."""

from __future__ import annotations

import re
from pathlib import Path

import onnx

EXPECTED_FAILURES = Path(__file__).with_name("expected_failures.txt")

#: ``[onnx<1.24]`` or ``[onnx>=1.24]`` opening a reason: the entry holds for those onnx releases
#: only (a case whose expected output changed between them).
_VERSION_TAG = re.compile(r"^\[onnx(<|>=)(\d+)\.(\d+)\]")


def read_expected_failures(path: Path = EXPECTED_FAILURES) -> dict[str, str]:
    """Return ``{case name: reason}`` from the expected-failures file."""
    entries: dict[str, str] = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        name, _, reason = line.partition("#")
        entries[name.strip()] = reason.strip()
    return entries


def applies_to_installed_onnx(reason: str, version: str = onnx.__version__) -> bool:
    """Whether an expected failure's reason holds for this onnx (a 1.24 dev build is 1.24)."""
    tag = _VERSION_TAG.match(reason)
    if tag is None:
        return True
    installed = tuple(int(p) for p in re.findall(r"\d+", version)[:2])
    below = installed < (int(tag[2]), int(tag[3]))
    return below if tag[1] == "<" else not below
