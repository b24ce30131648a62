"""The progress line ``onnxflow run --progress`` draws."""

from __future__ import annotations

import threading
import time
from typing import Any, TextIO

from onnxflow.runtime.observe import Observer


class Progress(Observer):
    """A progress line on a stream for a run that lasts more than ``delay`` seconds: a bar over
    the iterations of the outermost loop while one runs, else the time elapsed (redrawn every
    ``tick`` seconds by a thread of its own, so a run without loops shows it too)."""

    node_events = False

    def __init__(
        self, stream: TextIO, delay: float = 1.0, width: int = 30, tick: float = 0.1
    ) -> None:
        self.stream, self.delay, self.width, self.tick = stream, delay, width, tick
        self.started = self.drawn = 0.0
        self.visible = False
        self.position: tuple[str, int, int | None] | None = None
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._ticker: threading.Thread | None = None

    def run_start(self) -> None:
        """Start the clock and the thread that redraws the line."""
        self.started = time.perf_counter()
        self._done.clear()
        self._ticker = threading.Thread(target=self._tick, name="onnxflow-progress", daemon=True)
        self._ticker.start()

    def _tick(self) -> None:
        while not self._done.wait(self.tick):
            now = time.perf_counter()
            if now - self.started >= self.delay and now - self.drawn >= self.tick:
                self._draw(now, self.position)

    def scope_start(self, scope: tuple[Any, ...], total: int | None) -> None:
        """Remember the outermost loop's position; redraw at most ten times a second."""
        if len(scope) != 1 or isinstance(scope[0][1], str):
            return
        owner, key = scope[0]
        self.position = (owner, key[1] if isinstance(key, tuple) else key, total)
        now = time.perf_counter()
        if now - self.started >= self.delay and now - self.drawn >= 0.1:
            self._draw(now, self.position)

    def _draw(self, now: float, position: tuple[str, int, int | None] | None) -> None:
        """Draw the line: ``done`` iterations of ``owner`` finished out of ``total`` (when
        known), or, with no loop running yet, the seconds elapsed."""
        elapsed = max(now - self.started, 1e-9)
        if position is None:
            line = f"running {elapsed:.1f} s"
        else:
            owner, done, total = position
            rate = f"{done / elapsed:,.0f} it/s"
            if total:
                filled = int(self.width * min(done / total, 1))
                bar = "#" * filled + "." * (self.width - filled)
                line = f"{owner} [{bar}] {done}/{total} {rate}"
            else:
                line = f"{owner} {done} iterations {rate}"
        with self._lock:
            self.drawn, self.visible = now, True
            print(f"\r{line}\033[K", end="", file=self.stream, flush=True)

    def run_end(self) -> None:
        """Stop the thread; draw the final line (every iteration started has finished, or the
        whole run's time) and end it."""
        self._done.set()
        if self._ticker is not None:
            self._ticker.join()
        if self.visible:
            position = self.position
            if position is not None:
                position = (position[0], position[1] + 1, position[2])
            self._draw(time.perf_counter(), position)
            print(file=self.stream)
