"""The ONNX backend test suites, run through onnxflow's backend adapter.

The node suite (one case per operator behaviour), the `light` real models (alexnet, densenet121,
inception v1/v2, resnet50, shufflenet, squeezenet, vgg19, zfnet512, each against its stored
output), and the simple and PyTorch-exported model suites shipped in the onnx package.

Every case passes, or is listed with its reason in ``expected_failures.txt``; a listed case
that passes is reported as an unexpected success, so the list can only shrink.
"""

from __future__ import annotations

import re
from pathlib import Path

import onnx
import onnx.backend.test

import onnxflow.backend

EXPECTED_FAILURES = Path(__file__).with_name("expected_failures.txt")


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


class _Runner(onnx.backend.test.BackendTest):
    """The ONNX runner, with sequences compared element by element (see
    :func:`onnxflow.backend.assert_similar_outputs`)."""

    @classmethod
    def assert_similar_outputs(cls, ref_outputs, outputs, rtol, atol, model_dir=None) -> None:
        onnxflow.backend.assert_similar_outputs(ref_outputs, outputs, rtol, atol)


#: ``[onnx<1.24]`` or ``[onnx>=1.24]`` opening a reason: the entry holds for those onnx releases
#: only (a case whose expected output changed between them).
_VERSION_TAG = re.compile(r"^\[onnx(<|>=)(\d+)\.(\d+)\]")


def applies_to_installed_onnx(reason: str, version: str = onnx.__version__) -> bool:
    """Whether an expected failure's reason holds for this onnx (a 1.24 dev build is 1.24)."""
    tag = _VERSION_TAG.match(reason)
    if tag is None:
        return True
    installed = tuple(int(p) for p in re.findall(r"\d+", version)[:2])
    below = installed < (int(tag[2]), int(tag[3]))
    return below if tag[1] == "<" else not below


def _suite() -> dict[str, type]:
    backend_test = _Runner(onnxflow.backend, __name__)
    backend_test.include(r"^test_.*_cpu$")
    not_run = set()
    for name, reason in read_expected_failures().items():
        assert reason, f"expected failure {name} has no reason"
        if not applies_to_installed_onnx(reason):
            continue
        if reason.startswith("[random]"):
            not_run.add(f"{name}_cpu")
        else:
            backend_test.xfail(rf"^{re.escape(name)}_cpu$")
    suites = backend_test.test_cases
    for suite in suites.values():
        for attr in [a for a in vars(suite) if a.startswith("test_")]:
            if attr.endswith("_cuda") or attr in not_run:  # CPU only; random draws by property
                delattr(suite, attr)
    return suites


globals().update(_suite())
