"""What the machine can hold: the memory a load or a run may still take."""

from __future__ import annotations

import os
from pathlib import Path

_MEMINFO = Path("/proc/meminfo")


def available_memory() -> int:
    """Bytes of memory available to this process now: Linux's ``MemAvailable`` (free memory
    plus what the page cache can give back), else the physical memory, else no limit."""
    try:
        for line in _MEMINFO.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return 2**63 - 1
