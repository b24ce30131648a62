"""The bound on BLAS's threads a session's ``intra_op_num_threads`` asks for."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from threadpoolctl import OpenBLASController, ThreadpoolController


class BlasThreads:
    """Bounds BLAS's threads while runs are in progress, and restores them after the last.

    The bound is process-wide (threadpoolctl sets the BLAS library's global count): runs that
    overlap share the bound of the first to start, and the original count comes back when the
    last of them ends. threadpoolctl lets one thread at a time set OpenBLAS's count: the
    thread of the first run takes that control and gives it back when the last run ends (a
    thread outside onnxflow holding it makes the bound a no-op).
    """

    _lock = threading.Lock()
    _active = 0
    _limiter: Any = None
    _owner: threading.Thread | None = None
    _controller: Any = None

    @classmethod
    @contextmanager
    def limit(cls, threads: int) -> Iterator[None]:
        """Run the body with BLAS using at most ``threads`` threads."""
        with cls._lock:
            if cls._active == 0:
                if cls._controller is None:
                    cls._controller = ThreadpoolController()
                cls._limiter = cls._controller.limit(limits=threads, user_api="blas")
                cls._owner = threading.current_thread()
            cls._active += 1
        try:
            yield
        finally:
            with cls._lock:
                cls._active -= 1
                if cls._active == 0:
                    cls._restore()

    @classmethod
    def _restore(cls) -> None:
        """Restore the original count from this thread, then release control of OpenBLAS."""
        if cls._owner is not threading.current_thread():  # the first run's thread is done
            OpenBLASController.clear_controlling_thread(force=True)
        cls._limiter.restore_original_limits()
        OpenBLASController.clear_controlling_thread()
        cls._limiter = cls._owner = None
