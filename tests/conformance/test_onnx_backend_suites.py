"""The ONNX backend test suites, run through onnxflow's backend adapter.

The node suite (one case per operator behaviour), the `light` real models (alexnet, densenet121,
inception v1/v2, resnet50, shufflenet, squeezenet, vgg19, zfnet512, each against its stored
output), and the simple and PyTorch-exported model suites shipped in the onnx package.

Every case passes, or is listed with its reason in ``expected_failures.txt``; a listed case
that passes is reported as an unexpected success, so the list can only shrink.
"""

from __future__ import annotations

import re

import onnx
import onnx.backend.test
from expected_failures import applies_to_installed_onnx, read_expected_failures

import onnxflow.backend


class _Runner(onnx.backend.test.BackendTest):
    """The ONNX runner, with sequences compared element by element (see
    :func:`onnxflow.backend.assert_similar_outputs`)."""

    @classmethod
    def assert_similar_outputs(cls, ref_outputs, outputs, rtol, atol, model_dir=None) -> None:
        onnxflow.backend.assert_similar_outputs(ref_outputs, outputs, rtol, atol)


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
