"""available_memory() is the least of what the machine, RLIMIT_AS and the cgroups (v2 and v1,
the process's own and each above it) leave; the /proc and /sys files are faked in a tree."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from onnxflow import resources
from onnxflow.resources import NO_LIMIT, available_memory

GIB = 1 << 30


def _tree(tmp_path: Path, cgroup: str, files: dict[str, str], available_kb: int) -> Path:
    """A fake root: /proc/meminfo, /proc/self/cgroup and the given files under it."""
    (tmp_path / "proc/self").mkdir(parents=True)
    (tmp_path / "proc/meminfo").write_text(
        f"MemTotal:       {4 * available_kb} kB\nMemAvailable:   {available_kb} kB\n"
    )
    (tmp_path / "proc/self/cgroup").write_text(cgroup)
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    return tmp_path


@pytest.fixture(autouse=True)
def _small_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    """A machine of 64 GiB: cgroup limits of a few GiB bind, as in a container."""
    monkeypatch.setattr(resources, "_PHYSICAL", 64 * GIB)


def test_cgroup_v2_limit_minus_usage_wins(tmp_path: Path) -> None:
    root = _tree(
        tmp_path,
        "0::/app\n",
        {
            "sys/fs/cgroup/memory.max": "max\n",
            "sys/fs/cgroup/app/memory.max": f"{2 * GIB}\n",
            "sys/fs/cgroup/app/memory.current": f"{GIB // 2}\n",
        },
        available_kb=16 * GIB // 1024,
    )
    assert available_memory(root) == 2 * GIB - GIB // 2


def test_a_cgroup_above_the_process_s_own_binds_too(tmp_path: Path) -> None:
    root = _tree(
        tmp_path,
        "0::/outer/inner\n",
        {
            "sys/fs/cgroup/outer/memory.max": f"{3 * GIB}\n",
            "sys/fs/cgroup/outer/memory.current": f"{2 * GIB}\n",
            "sys/fs/cgroup/outer/inner/memory.max": "max\n",
            "sys/fs/cgroup/outer/inner/memory.current": f"{GIB}\n",
        },
        available_kb=16 * GIB // 1024,
    )
    assert available_memory(root) == GIB


def test_cgroup_v1_limit_minus_usage_wins(tmp_path: Path) -> None:
    root = _tree(
        tmp_path,
        "5:cpu,cpuacct:/x\n4:memory:/docker/abc\n0::/\n",
        {
            "sys/fs/cgroup/memory/memory.limit_in_bytes": "9223372036854771712\n",
            "sys/fs/cgroup/memory/docker/abc/memory.limit_in_bytes": f"{GIB}\n",
            "sys/fs/cgroup/memory/docker/abc/memory.usage_in_bytes": f"{GIB // 4}\n",
        },
        available_kb=16 * GIB // 1024,
    )
    assert available_memory(root) == GIB - GIB // 4


def test_the_machine_wins_when_it_has_less(tmp_path: Path) -> None:
    root = _tree(
        tmp_path,
        "0::/\n",
        {"sys/fs/cgroup/memory.max": f"{8 * GIB}\n", "sys/fs/cgroup/memory.current": "0\n"},
        available_kb=1024,
    )
    assert available_memory(root) == 1024 * 1024


def test_no_cgroup_files_is_no_cgroup_limit(tmp_path: Path) -> None:
    assert resources._cgroups(_tree(tmp_path, "0::/gone\n", {}, available_kb=1)) == NO_LIMIT


def test_rlimit_as_leaves_its_limit_minus_the_address_space_in_use() -> None:
    """In a subprocess: RLIMIT_AS set 300 MiB above VmSize leaves at most 300 MiB, and at
    least 250 MiB (what the interpreter maps meanwhile)."""
    script = textwrap.dedent("""
        import resource
        from onnxflow.resources import available_memory
        with open("/proc/self/status") as f:
            used = next(int(l.split()[1]) * 1024 for l in f if l.startswith("VmSize:"))
        resource.setrlimit(resource.RLIMIT_AS, (used + (300 << 20), resource.RLIM_INFINITY))
        print(available_memory())
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert 250 << 20 <= int(done.stdout) <= 300 << 20
