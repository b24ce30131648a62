"""glibc's malloc set to keep the memory one run frees for the next.

NumPy takes every array's memory from ``malloc``. For a block over its *mmap threshold* glibc
maps fresh pages, and it gives the top of its heap back to the system once more than its *trim
threshold* is free there. Either way the next run's arrays land on pages the kernel must fault in
and zero again: 2,000 faults a run (a fifth of the time) for the batch-8 RNN, whose projected
inputs and output are 4 MiB each, 2,850 for the KNN model, 3,200 for resnet50.

glibc adapts both thresholds itself: freeing a mapped block raises the mmap threshold to that
block's size, up to 32 MiB on 64-bit systems, and the trim threshold to twice it. It only gets
there after a program has freed such blocks, and a run whose buffers total more than twice its
largest one still trims every time. :func:`keep_freed_memory` sets both thresholds to the ceiling
that adaptation tends to (32 MiB and 64 MiB) once per process, when the first session is made:
blocks up to 32 MiB come from the heap, and up to 64 MiB of free heap is kept for reuse.

The setting is process-wide. It is left alone when the process already sets malloc's
parameters through the environment (``MALLOC_MMAP_THRESHOLD_``, ``MALLOC_TRIM_THRESHOLD_``,
``MALLOC_TOP_PAD_``, or ``GLIBC_TUNABLES``), when ``ONNXFLOW_TUNE_MALLOC=0``, and off glibc.
"""

from __future__ import annotations

import ctypes
import functools
import os
import sys

#: mallopt parameter numbers, from glibc's malloc.h.
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3

#: glibc's DEFAULT_MMAP_THRESHOLD_MAX on 64-bit systems, and its trim threshold after it.
MMAP_THRESHOLD = 32 << 20
TRIM_THRESHOLD = 2 * MMAP_THRESHOLD

#: Environment variables by which a process sets malloc's parameters itself.
USER_SETTINGS = (
    "MALLOC_MMAP_THRESHOLD_",
    "MALLOC_TRIM_THRESHOLD_",
    "MALLOC_TOP_PAD_",
    "GLIBC_TUNABLES",
)


@functools.cache
def keep_freed_memory() -> bool:
    """Set glibc's mmap and trim thresholds (once per process); return whether they are set."""
    if os.environ.get("ONNXFLOW_TUNE_MALLOC", "1") == "0":
        return False
    if any(name in os.environ for name in USER_SETTINGS):
        return False
    if not sys.platform.startswith("linux") or sys.maxsize <= 2**32:
        return False
    try:
        libc = ctypes.CDLL(None)
        libc.gnu_get_libc_version  # noqa: B018  # glibc only: musl has no mallopt thresholds
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return bool(
        mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD) and mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD)
    )
