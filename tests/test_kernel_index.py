"""Kernel families load on demand: the registry imports the module registering an operator the
first time the operator is looked up, from an index kept in step with the registrations."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from onnxflow.ops import REGISTRY, load_all
from onnxflow.ops.kernel_index import KERNEL_MODULES
from onnxflow.ops.registry import Kernel, Registry, kernel_modules
from onnxflow.traits import NONE

ROOT = Path(__file__).resolve().parents[1]


def _fresh(code: str) -> str:
    """What ``code`` prints, run in a new interpreter (nothing imported yet)."""
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
    )
    return done.stdout.strip()


def test_the_index_lists_the_module_registering_each_operator() -> None:
    load_all()
    assert kernel_modules(REGISTRY.all()) == KERNEL_MODULES, "run python tools/kernel_index.py"


def test_a_lookup_imports_the_family_of_the_operator_only() -> None:
    out = _fresh(
        "import sys\n"
        "from onnxflow.ops import REGISTRY\n"
        "assert 'onnxflow.ops.conv' not in sys.modules\n"
        "print(REGISTRY.lookup('', 'Conv', 22).module)\n"
        "print('onnxflow.ops.conv' in sys.modules, 'onnxflow.ops.rnn' in sys.modules)\n"
    )
    assert out.splitlines() == ["onnxflow.ops.conv", "True False"]


def test_the_first_session_of_a_small_model_imports_what_it_uses() -> None:
    out = _fresh(
        "import sys, numpy as np, onnxflow\n"
        "s = onnxflow.InferenceSession('examples/loop_trip_count.onnx')\n"
        "print(s.run(None, {'b': np.array(6, np.int32)})[0])\n"
        "print(sorted(m for m in sys.modules if m.startswith('onnxflow.ops.')))\n"
    )
    result, modules = out.splitlines()
    assert result == onnxflow_result()
    assert "onnxflow.ops.control_flow.loop" in modules
    for unused in ("conv", "rnn", "microsoft.attention", "ml.trees", "strings"):
        assert f"onnxflow.ops.{unused}'" not in modules


def onnxflow_result() -> str:
    """The loop example's result, from a session of this process."""
    import numpy as np

    import onnxflow

    sess = onnxflow.InferenceSession(ROOT / "examples" / "loop_trip_count.onnx")
    return str(sess.run(None, {"b": np.array(6, np.int32)})[0])


def test_listing_every_kernel_imports_every_family_of_the_index() -> None:
    out = _fresh(
        "import sys\n"
        "from onnxflow.ops.registry import Registry\n"
        "Registry({('', 'Conv'): ('onnxflow.ops.conv',)}).all()\n"
        "print('onnxflow.ops.conv' in sys.modules)\n"
    )
    assert out == "True"


def test_a_registration_records_the_module_being_imported() -> None:
    kernel = REGISTRY.lookup("", "Relu", 14)
    assert isinstance(kernel, Kernel) and kernel.module == "onnxflow.ops.activations"


def test_sessions_made_at_once_in_threads_each_find_their_kernels() -> None:
    out = _fresh(
        "from concurrent.futures import ThreadPoolExecutor\n"
        "import onnxflow\n"
        "def make(_):\n"
        "    return onnxflow.InferenceSession('examples/rnn_scan.onnx').plan.graph_name\n"
        "with ThreadPoolExecutor(8) as pool:\n"
        "    print(sorted(set(pool.map(make, range(8)))))\n"
    )
    assert out == str([onnxflow_graph_name()])


def onnxflow_graph_name() -> str:
    import onnxflow

    return onnxflow.InferenceSession(ROOT / "examples" / "rnn_scan.onnx").plan.graph_name


def _kernel(op_type: str, since: int) -> Kernel:
    return Kernel("", op_type, since, lambda x: x, False, NONE, "")


def test_a_lookup_is_remembered_until_a_kernel_is_added(monkeypatch) -> None:
    """A compile asks for the same operators once per node and per pass: the registry answers
    a repeated question from its memo, and a kernel added since is seen."""
    from onnxflow.ops import registry

    asked: list[tuple[str, str, int]] = []
    schema = registry.schema_since_version
    monkeypatch.setattr(registry, "schema_since_version", lambda *a: asked.append(a) or schema(*a))
    fresh = Registry({})
    assert fresh.lookup("", "Relu", 14) is None
    relu = _kernel("Relu", 14)
    fresh.add(relu)
    assert fresh.lookup("", "Relu", 14) is relu and fresh.lookup("", "Relu", 14) is relu
    assert asked == [("", "Relu", 14)], f"the schema was read {len(asked)} times"
    newer = _kernel("Relu", 6)
    fresh.add(newer)
    assert fresh.lookup("", "Relu", 6) is newer and fresh.lookup("", "Relu", 14) is relu
    fresh._drop("")
    assert fresh.lookup("", "Relu", 14) is None
