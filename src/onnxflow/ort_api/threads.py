"""The bound on BLAS's threads a session's ``intra_op_num_threads`` asks for, and the default
bound of a session that leaves it at 0.

One thread budget: ``intra_op_num_threads`` bounds BLAS (through threadpoolctl, around each
run) and onnxflow's compiled kernels (:mod:`onnxflow.native`). These run on the caller's thread
but for the tree ensembles' walk, which splits a large input's rows over the caller's thread and
up to that many less one plain threads, started for the call and joined (no OpenMP, nothing
that spins): the caller's thread plus at most that many BLAS threads, or walk threads.

Left at 0, the bound follows the machine's load (:func:`default_threads`): BLAS gets the cores
the load leaves idle. Measured on a 2-core machine (docs/scaling.md), one BLAS thread ran
GEMM-bound models 1.7-12x faster than OpenBLAS's default of a thread per core once the load
average reached 1, and small models the same within noise; on an idle machine BLAS's own default
can win on GEMM-bound models.
"""

from __future__ import annotations

import math
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from threadpoolctl import OpenBLASController, ThreadpoolController


class BlasThreads:
    """Bounds BLAS's threads while runs are in progress, and restores them after the last.

    The bound is process-wide (the BLAS library's global count): runs that overlap share the
    bound of the first to start, and the original count comes back when the last of them ends.
    threadpoolctl finds the BLAS libraries once (its controller) and lets one thread at a time
    set OpenBLAS's count: the thread of the first run takes that control and gives it back when
    the last run ends (a thread outside onnxflow holding it makes the bound a no-op). The counts
    are read and set through the libraries' own calls, two per library and run: threadpoolctl's
    ``limit`` gathers every library's full description first, about 50 us a run.
    """

    _lock = threading.Lock()
    _active = 0
    _original: list[tuple[Any, int | None]] = []
    _owner: threading.Thread | None = None
    _libraries: list[Any] | None = None

    @classmethod
    @contextmanager
    def limit(cls, threads: int) -> Iterator[None]:
        """Run the body with BLAS using at most ``threads`` threads."""
        with cls._lock:
            if cls._active == 0:
                cls._bound(threads)
            cls._active += 1
        try:
            yield
        finally:
            with cls._lock:
                cls._active -= 1
                if cls._active == 0:
                    cls._restore()

    @classmethod
    def _bound(cls, threads: int) -> None:
        """Set each BLAS library's count to ``threads``, keeping the counts it changes."""
        if cls._libraries is None:
            found = ThreadpoolController().select(user_api="blas")
            cls._libraries = list(found.lib_controllers)
        counts = [(lib, lib.get_num_threads()) for lib in cls._libraries]
        cls._original = [(lib, n) for lib, n in counts if n is not None and n != threads]
        for lib, _ in cls._original:
            lib.set_num_threads(threads)
        cls._owner = threading.current_thread()

    @classmethod
    def _restore(cls) -> None:
        """Restore the original counts from this thread, then release control of OpenBLAS."""
        if cls._owner is not threading.current_thread():  # the first run's thread is done
            OpenBLASController.clear_controlling_thread(force=True)
        for lib, count in cls._original:  # the counts the bound changed
            lib.set_num_threads(count)
        OpenBLASController.clear_controlling_thread()
        cls._original, cls._owner = [], None


#: Seconds one reading of the load average is reused (reading it costs about a microsecond).
LOAD_TTL = 1.0
_reading = [float("-inf"), 0]
#: The time constant, in seconds, of the load average :func:`default_threads` reads (the
#: 1-minute one), over which this process's own share is averaged the same way.
LOAD_WINDOW = 60.0
#: Where Linux counts the CPU time of the whole machine.
PROC_STAT = "/proc/stat"


def default_threads() -> int:
    """The BLAS bound of a session whose ``intra_op_num_threads`` is 0: the cores other
    processes leave idle, at least one (``max(1, cpus - int(others))``), or 0 (BLAS's own
    default, a thread per core) while they leave every core idle. On 2 cores: one thread once
    other work keeps a core busy (BLAS's threads would queue behind other processes' and spin
    waiting for each other), else BLAS's default. ``others`` is the cores other processes kept
    busy since the last reading (the machine's busy time less this process's, from
    :data:`PROC_STAT`); where that cannot be read, the 1-minute load average less this
    process's share of it (:func:`own_load`). The process's own runs never count: a model
    running without pause makes a load of 1 by itself, which would bound it to one thread on
    an idle machine."""
    now = time.monotonic()
    if now - _reading[0] > LOAD_TTL:
        cpus = os.cpu_count() or 1
        others = _others(now)
        idle = cpus - int(others)
        _reading[:] = [now, 0 if idle >= cpus else max(1, idle)]
    return int(_reading[1])


def _others(now: float) -> float:
    """How many cores other processes kept busy (see :func:`default_threads`)."""
    wall, cpu, _, busy = _own
    share = own_load(now)
    machine = machine_busy()
    _own[3] = machine
    if machine is not None and busy is not None and now > wall:
        return max(0.0, (machine - busy - (_own[1] - cpu)) / (now - wall))
    try:
        return max(0.0, os.getloadavg()[0] - share)
    except (AttributeError, OSError):  # no load average here (Windows)
        return 0.0


def machine_busy() -> float | None:
    """The CPU seconds every core of the machine has spent busy since boot (:data:`PROC_STAT`'s
    user, nice, system, irq, softirq and steal), or None where it cannot be read."""
    try:
        with open(PROC_STAT, "rb") as stat:
            fields = stat.readline().split()
        user, nice, system, _, _, irq, softirq, steal = (int(v) for v in fields[1:9])
    except (OSError, ValueError):
        return None
    return (user + nice + system + irq + softirq + steal) / _TICKS


_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
#: This process at its last reading: wall clock, CPU time of all its threads, the cores its
#: threads kept busy averaged as the load is (:func:`own_load`), and the machine's busy CPU
#: seconds (:func:`machine_busy`).
_own = [time.monotonic(), time.process_time(), 0.0, machine_busy()]


def own_load(now: float) -> float:
    """This process's share of the load average: how many cores its threads kept busy since
    the last reading (CPU time over wall time), averaged into the earlier share with the load
    average's own exponential decay (:data:`LOAD_WINDOW`)."""
    wall, cpu, share, busy = _own
    spent = time.process_time()
    if now > wall:
        decay = math.exp(-(now - wall) / LOAD_WINDOW)
        share = share * decay + (spent - cpu) / (now - wall) * (1.0 - decay)
    _own[:] = [now, spent, share, busy]
    return share
