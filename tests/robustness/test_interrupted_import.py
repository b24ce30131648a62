"""A KeyboardInterrupt while the first session imports the kernel modules breaks nothing for good.

Python discards a module whose import was interrupted; the registry must not keep the kernels
that module had registered so far (or the next session's re-import collides with them:
"registered twice"). Each case runs in a fresh process, so the registry starts empty, interrupts
the first session at one point of the kernel modules' import, then opens a second session in the
same process and checks its result.
"""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from onnxflow.ops.registry import Kernel, Registry, RegistryError

# argv: "lines" or "adds", and N (0: count them, interrupting nothing). "lines" interrupts at
# the N-th line run by the top-level code of a module the first session imports (the kernel
# modules and what they import); "adds" at the N-th kernel registration (for odd N before the
# kernel is added, for even N after).
PROGRAM = """
import sys
import numpy as np
from numpy.lib.stride_tricks import sliding_window_view
from onnx import TensorProto, helper
import onnxflow
from onnxflow.ops.registry import REGISTRY, Registry

mode, at = sys.argv[1], int(sys.argv[2])
seen = [0]

def tick():
    seen[0] += 1
    if seen[0] == at:
        raise KeyboardInterrupt

def tracer(frame, event, arg):
    name = frame.f_globals.get("__name__", "")
    if frame.f_code.co_name != "<module>" or not name.startswith("onnxflow."):
        return None
    def lines(frame, event, arg):
        if event == "line":
            tick()
        return lines
    return lines

real_add = Registry.add
def add(self, *args):
    if at % 2:
        tick()
    real_add(self, *args)
    if not at % 2:
        tick()

x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 5, 5])
y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
w = np.arange(54, dtype=np.float32).reshape(3, 2, 3, 3) / 50 - 0.5
nodes = [
    helper.make_node("Conv", ["x", "w"], ["c"], name="conv"),
    helper.make_node("Relu", ["c"], ["r"], name="relu"),
    helper.make_node("ReduceSum", ["r"], ["y"], name="sum", keepdims=0),
]
graph = helper.make_graph(nodes, "g", [x], [y], [helper.make_tensor(
    "w", TensorProto.FLOAT, w.shape, w.ravel())])
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
feed = np.linspace(-1, 1, 50, dtype=np.float32).reshape(1, 2, 5, 5)

if mode == "lines":
    sys.settrace(tracer)
else:
    Registry.add = add
try:
    onnxflow.InferenceSession(model)
    interrupted = False
except KeyboardInterrupt:
    interrupted = True
sys.settrace(None)
Registry.add = real_add
if at == 0:
    print(seen[0])
    sys.exit(0)
assert interrupted, f"no interrupt at {mode} {at} of {seen[0]}"
stale = sorted({k.module for k in REGISTRY.registered() if k.module not in sys.modules})

got = onnxflow.InferenceSession(model).run(None, {"x": feed})[0]
windows = sliding_window_view(feed, (3, 3), axis=(2, 3))
expected = np.maximum(np.einsum("ncijkl,ockl->noij", windows, w), 0).sum()
np.testing.assert_allclose(got, expected, rtol=1e-5)
assert not stale, f"kernels of modules whose import was interrupted stayed registered: {stale}"
print("ok")
"""


def _run(mode: str, at: int) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", PROGRAM, mode, str(at)], capture_output=True, text=True
    )


def _count(mode: str) -> int:
    done = _run(mode, 0)
    assert done.returncode == 0, done.stderr
    return int(done.stdout)


@pytest.mark.parametrize("mode", ["lines", "adds"])
def test_a_session_after_an_interrupted_kernel_import_runs(mode: str) -> None:
    total = _count(mode)
    assert total > 20, f"the first session ran only {total} {mode} of kernel modules"
    # Points spread over the whole import, both parities (before and after an add).
    points = sorted({max(1, total * k // 6 + k % 2) for k in range(6)} | {total - 1})
    failed = {}
    for at in points:
        done = _run(mode, at)
        if done.returncode != 0 or done.stdout.split()[-1:] != ["ok"]:
            failed[at] = done.stderr.strip().splitlines()[-1:]
    assert not failed, f"interrupted at {mode} {sorted(failed)} of {total}: {failed}"


def _kernel(fn: object, module: str = "kernels.m") -> Kernel:
    return Kernel("", "Neg", 13, fn, module=module)  # type: ignore[arg-type]


def test_a_module_executed_again_replaces_what_its_discarded_instance_registered() -> None:
    registry = Registry()
    first, again = {"__name__": "kernels.m"}, {"__name__": "kernels.m"}
    registry.add(_kernel(np.negative), first)
    registry.add(Kernel("", "Abs", 13, np.abs, module="kernels.m"), first)
    registry.add(_kernel(np.positive), again)  # the module's import ran again
    assert registry.lookup("", "Neg", 13).fn is np.positive  # type: ignore[union-attr]
    assert not registry.has_op("", "Abs")  # registered by the discarded instance only


def test_a_genuine_duplicate_registration_is_still_an_error() -> None:
    registry = Registry()
    namespace = {"__name__": "kernels.m"}
    registry.add(_kernel(np.negative), namespace)
    with pytest.raises(RegistryError, match="Neg version 13 is registered twice"):
        registry.add(_kernel(np.positive), namespace)  # the same module instance, twice
    with pytest.raises(RegistryError, match="registered twice"):
        registry.add(_kernel(np.positive, "kernels.other"), {"__name__": "kernels.other"})
