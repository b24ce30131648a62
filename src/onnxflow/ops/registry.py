"""The one registry of kernels.

A kernel is registered for an operator ``(domain, op_type)`` and the exact ``since_version``\\ s it
serves; decorators stack on one function when versions share semantics. Looking a kernel up for a
model resolves the operator's schema at the model's opset to its ``since_version`` and requires a
registration for exactly that version, so a kernel written for version 1 is never silently used
for a version 13 whose semantics changed.

Two kinds of kernels:

- plain: ``fn(*inputs, **attributes) -> value | tuple``. Attributes present on the node are bound
  once at compile time (``functools.partial``); absent ones take the Python defaults, which must
  be the spec's defaults. A tuple result means several outputs; a ``list`` is one sequence value.
- builder (``build=True``): ``fn(node: NodeContext, **attributes) -> callable``; called once at
  compile time, for kernels that must prepare work (subgraphs, lookup tables, output counts).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from onnxflow.errors import OnnxflowError
from onnxflow.ir.domains import normalize_domain
from onnxflow.ir.schemas import op_schema
from onnxflow.traits import NONE, Traits

ONNX_DOMAIN = ""


@dataclass(frozen=True)
class Kernel:
    """A registered kernel and what it promises (its :class:`~onnxflow.traits.Traits`), which
    the compiler, the passes and the code generator read instead of branching on names."""

    domain: str
    op_type: str
    since: int
    fn: Callable[..., Any]
    build: bool = False
    traits: Traits = NONE


class RegistryError(OnnxflowError):
    """A kernel registration is inconsistent (duplicate, unknown version)."""


class Registry:
    """Kernels by ``(domain, op_type)`` and ``since_version``."""

    def __init__(self) -> None:
        self._kernels: dict[tuple[str, str], dict[int, Kernel]] = {}

    def add(self, kernel: Kernel) -> None:
        """Register one kernel version; registering the same version twice is an error."""
        versions = self._kernels.setdefault((kernel.domain, kernel.op_type), {})
        if kernel.since in versions:
            old = versions[kernel.since].fn
            raise RegistryError(
                f"{kernel.domain or 'ai.onnx'}.{kernel.op_type} version {kernel.since} is "
                f"registered twice: {old.__module__}.{old.__qualname__} and "
                f"{kernel.fn.__module__}.{kernel.fn.__qualname__}"
            )
        versions[kernel.since] = kernel

    def versions(self, domain: str, op_type: str) -> list[int]:
        """Return the since_versions registered for an operator, ascending."""
        return sorted(self._kernels.get((normalize_domain(domain), op_type), {}))

    def has_op(self, domain: str, op_type: str) -> bool:
        """Return whether any version of the operator is registered."""
        return (normalize_domain(domain), op_type) in self._kernels

    def lookup(self, domain: str, op_type: str, opset: int) -> Kernel | None:
        """Return the kernel serving ``op_type`` at ``opset`` of ``domain``, or None."""
        domain = normalize_domain(domain)
        versions = self._kernels.get((domain, op_type))
        if not versions:
            return None
        since = schema_since_version(domain, op_type, opset)
        if since is not None:
            return versions.get(since)
        eligible = [v for v in versions if v <= opset]
        return versions[max(eligible)] if eligible else None

    def all(self) -> list[Kernel]:
        """Return every registered kernel."""
        return [k for vs in self._kernels.values() for k in vs.values()]


def schema_since_version(domain: str, op_type: str, opset: int) -> int | None:
    """Return the since_version of the schema in force at ``opset``, or None if onnx has none."""
    schema = op_schema(domain, op_type, opset)
    return None if schema is None else schema.since_version


REGISTRY = Registry()


def op(
    op_type: str,
    *versions: int,
    domain: str = ONNX_DOMAIN,
    build: bool = False,
    traits: Traits = NONE,
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register the decorated function as the kernel of ``op_type`` for each given version.

    ``traits`` are the kernel's promises (:class:`~onnxflow.traits.Traits`): for instance
    ``passthrough`` (it returns its only input unchanged, so the plan passes the value on
    without a call) or ``pure=False`` (the same inputs may give different outputs: such a node
    is never computed ahead of time nor moved out of a loop).
    """
    if not versions:
        raise RegistryError(f"@op({op_type!r}) names no since_version")

    def register(fn: Callable[..., Any]) -> Callable[..., Any]:
        for since in versions:
            REGISTRY.add(Kernel(normalize_domain(domain), op_type, since, fn, build, traits))
        return fn

    return register
