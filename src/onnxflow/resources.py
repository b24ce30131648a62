"""What the machine can hold: the memory a load or a run may still take.

Three limits bound it, and the smallest wins: the machine's memory (Linux's ``MemAvailable``),
the address space left under ``RLIMIT_AS`` (``ulimit -v``), and the memory left in the
process's cgroup and each cgroup above it (a container's limit).
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

try:
    import resource
except ImportError:  # not on Windows
    resource = None  # type: ignore[assignment]

#: What "no limit" reads as.
NO_LIMIT = 2**63 - 1

_ROOT = Path("/")


def available_memory(root: Path = _ROOT) -> int:
    """Bytes of memory this process may still take now: the least of the machine's memory
    available, the address space ``RLIMIT_AS`` leaves and the memory its cgroups leave.

    ``root`` is where ``proc`` and ``sys`` are found (tests give a fake tree).
    """
    return min(_machine(root), _address_space(root), _cgroups(root))


def _machine(root: Path) -> int:
    """``MemAvailable`` (free memory plus what the page cache can give back), else the
    physical memory, else no limit."""
    found = _field(root / "proc/meminfo", "MemAvailable:")
    return _PHYSICAL if found is None else found


def _physical() -> int:
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return NO_LIMIT


#: The machine's physical memory: a cgroup limit above it binds nothing.
_PHYSICAL = _physical()


def _address_space(root: Path) -> int:
    """The soft ``RLIMIT_AS`` minus the address space in use (``VmSize``); no limit when none
    is set."""
    if resource is None:
        return NO_LIMIT
    limit = resource.getrlimit(resource.RLIMIT_AS)[0]
    if limit == resource.RLIM_INFINITY or limit < 0:
        return NO_LIMIT
    used = _field(root / "proc/self/status", "VmSize:")
    return max(limit - (used or 0), 0)


def _field(path: Path, key: str) -> int | None:
    """The value in bytes of a ``key: N kB`` line of a /proc file; None when absent."""
    try:
        with open(path) as f:
            for line in f:
                if line.startswith(key):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


#: Per cgroup version: the directory its hierarchy is mounted at, and its limit and usage files.
_V2 = ("sys/fs/cgroup", "memory.max", "memory.current")
_V1 = ("sys/fs/cgroup/memory", "memory.limit_in_bytes", "memory.usage_in_bytes")


def _cgroups(root: Path) -> int:
    """The least memory left (limit minus usage) in the process's cgroup and the ones above it,
    under cgroup v2 and v1; no limit when none is set or the files cannot be read."""
    return min((_left_in(*found) for found in _cgroup_files(root)), default=NO_LIMIT)


@functools.lru_cache(maxsize=8)
def _cgroup_files(root: Path) -> tuple[tuple[Path, str, str], ...]:
    """Each memory cgroup folder of this process, from its own up to its hierarchy's root,
    with the names of its limit and usage files (read once: a process stays in its cgroup)."""
    try:
        lines = (root / "proc/self/cgroup").read_text().splitlines()
    except OSError:
        return ()
    found = []
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        if parts[0] == "0" and not parts[1]:
            mount, limit_file, usage_file = _V2
        elif "memory" in parts[1].split(","):
            mount, limit_file, usage_file = _V1
        else:
            continue
        base = root / mount
        path = base / parts[2].lstrip("/")
        for folder in (path, *path.parents):
            if folder.is_dir():
                found.append((folder, limit_file, usage_file))
            if folder == base:
                break
    return tuple(found)


def _left_in(folder: Path, limit_file: str, usage_file: str) -> int:
    """The memory one cgroup folder leaves; no limit when it sets none ("max", or v1's largest
    number), one above the physical memory, or is absent (its usage, slow to read, is then not
    read)."""
    try:
        with open(folder / limit_file) as f:
            limit = f.read().strip()
        if limit == "max" or int(limit) >= _PHYSICAL:
            return NO_LIMIT
        with open(folder / usage_file) as f:
            usage = int(f.read())
        return max(int(limit) - usage, 0)
    except (OSError, ValueError):
        return NO_LIMIT
