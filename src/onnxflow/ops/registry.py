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

Kernel modules load on demand: :data:`REGISTRY` knows from :mod:`onnxflow.ops.kernel_index`
which module registers each operator and imports it the first time the operator is looked up,
so a session imports the kernel families its model uses. :meth:`Registry.all` imports them all.

Loading a module is all-or-nothing: an import that fails part way (an error, or a
``KeyboardInterrupt`` landing in it) takes back the registrations that module made, and a module
executed again (Python discards a module whose import failed, so the next lookup imports it anew)
replaces whatever its earlier instance registered rather than colliding with it.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from onnxflow.errors import OnnxflowError
from onnxflow.ir.domains import normalize_domain
from onnxflow.ir.schemas import op_schema
from onnxflow.ops.kernel_index import KERNEL_MODULES
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
    #: The module whose import registered it (what :mod:`onnxflow.ops.kernel_index` lists).
    module: str = ""


class RegistryError(OnnxflowError):
    """A kernel registration is inconsistent (duplicate, unknown version)."""


#: What :meth:`Registry.lookup`'s memo holds for arguments not looked up since the last change.
_UNKNOWN = object()


class Registry:
    """Kernels by ``(domain, op_type)`` and ``since_version``.

    ``modules``: for each operator, the modules whose import registers its kernels; each is
    imported the first time the operator is looked up (or :meth:`all` is called).
    """

    def __init__(self, modules: Mapping[tuple[str, str], tuple[str, ...]] | None = None) -> None:
        self._kernels: dict[tuple[str, str], dict[int, Kernel]] = {}
        #: The modules still to import for an operator.
        self._unloaded: dict[tuple[str, str], tuple[str, ...]] = dict(modules or {})
        #: For each module that registered kernels, the namespace of the instance that did.
        self._origins: dict[str, dict[str, Any]] = {}
        #: What :meth:`lookup` found, by its arguments; emptied whenever a kernel is added or
        #: dropped (a compile asks for the same few operators once per node and per pass).
        self._found: dict[tuple[str, str, int], Kernel | None] = {}

    def _load(self, key: tuple[str, str]) -> None:
        """Import the modules that register ``key``'s kernels, if not done yet.

        Forgotten only once imported: a thread looking the operator up meanwhile imports
        them too, and so waits for the import in progress (Python's lock on each module).
        """
        modules = self._unloaded.get(key)
        if modules:
            try:
                for module in modules:
                    importlib.import_module(module)
            except BaseException:
                self._discard_stale()
                raise
            self._unloaded.pop(key, None)

    def add(self, kernel: Kernel, namespace: dict[str, Any] | None = None) -> None:
        """Register one kernel version; registering the same version twice is an error.

        ``namespace``: the globals of the module instance registering it. The first
        registration by a new instance of a module (executed again after a failed import)
        first drops every kernel the module's earlier instance registered.
        """
        if namespace is not None and kernel.module:
            if self._origins.get(kernel.module, namespace) is not namespace:
                self._drop(kernel.module)
            self._origins[kernel.module] = namespace
        self._found.clear()
        versions = self._kernels.setdefault((kernel.domain, kernel.op_type), {})
        if kernel.since in versions:
            old = versions[kernel.since].fn
            raise RegistryError(
                f"{kernel.domain or 'ai.onnx'}.{kernel.op_type} version {kernel.since} is "
                f"registered twice: {old.__module__}.{old.__qualname__} and "
                f"{kernel.fn.__module__}.{kernel.fn.__qualname__}"
            )
        versions[kernel.since] = kernel

    def _discard_stale(self) -> None:
        """Drop the kernels of every module instance that Python no longer holds (its import
        failed or was interrupted), so the registry keeps no half-loaded module."""
        for module, namespace in list(self._origins.items()):
            if getattr(sys.modules.get(module), "__dict__", None) is not namespace:
                self._drop(module)

    def _drop(self, module: str) -> None:
        """Forget the kernels registered by ``module``."""
        self._origins.pop(module, None)
        self._found.clear()
        for key, versions in list(self._kernels.items()):
            kept = {v: k for v, k in versions.items() if k.module != module}
            if kept:
                self._kernels[key] = kept
            else:
                del self._kernels[key]

    def versions(self, domain: str, op_type: str) -> list[int]:
        """Return the since_versions registered for an operator, ascending."""
        key = (normalize_domain(domain), op_type)
        self._load(key)
        return sorted(self._kernels.get(key, {}))

    def has_op(self, domain: str, op_type: str) -> bool:
        """Return whether any version of the operator is registered."""
        key = (normalize_domain(domain), op_type)
        self._load(key)
        return key in self._kernels

    def lookup(self, domain: str, op_type: str, opset: int) -> Kernel | None:
        """Return the kernel serving ``op_type`` at ``opset`` of ``domain``, or None."""
        key = (domain, op_type, opset)
        found = self._found.get(key, _UNKNOWN)
        if found is _UNKNOWN:
            found = self._found[key] = self._find(normalize_domain(domain), op_type, opset)
        return found  # type: ignore[return-value]

    def _find(self, domain: str, op_type: str, opset: int) -> Kernel | None:
        """:meth:`lookup`, ``domain`` normalized, without its memo."""
        self._load((domain, op_type))
        versions = self._kernels.get((domain, op_type))
        if not versions:
            return None
        since = schema_since_version(domain, op_type, opset)
        if since is not None:
            return versions.get(since)
        eligible = [v for v in versions if v <= opset]
        return versions[max(eligible)] if eligible else None

    def all(self) -> list[Kernel]:
        """Return every registered kernel (importing every kernel module first)."""
        for key in list(self._unloaded):
            self._load(key)
        return self.registered()

    def registered(self) -> list[Kernel]:
        """Return the kernels registered so far, importing nothing (what tools/kernel_index.py
        reads after importing every module, whatever the index says)."""
        return [k for vs in self._kernels.values() for k in vs.values()]


def schema_since_version(domain: str, op_type: str, opset: int) -> int | None:
    """Return the since_version of the schema in force at ``opset``, or None if onnx has none."""
    schema = op_schema(domain, op_type, opset)
    return None if schema is None else schema.since_version


REGISTRY = Registry(KERNEL_MODULES)


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
        module, namespace = _importing_module()
        for since in versions:
            kernel = Kernel(normalize_domain(domain), op_type, since, fn, build, traits, module)
            REGISTRY.add(kernel, namespace)
        return fn

    return register


def _importing_module() -> tuple[str, dict[str, Any] | None]:
    """The module whose top-level code is running the registration, and its globals: the
    innermost one being imported (a helper of another module may be making the call)."""
    frame = sys._getframe(2)
    while frame is not None and frame.f_code.co_name != "<module>":
        frame = frame.f_back  # type: ignore[assignment]
    if frame is None:
        return "", None
    return frame.f_globals.get("__name__", ""), frame.f_globals


def kernel_modules(kernels: list[Kernel]) -> dict[tuple[str, str], tuple[str, ...]]:
    """For each operator of ``kernels`` that a module of this package registers, those modules,
    sorted: the contents of :data:`~onnxflow.ops.kernel_index.KERNEL_MODULES` once every kernel
    module is imported (kernels registered from elsewhere, as tests do, need no index)."""
    found: dict[tuple[str, str], set[str]] = {}
    for k in kernels:
        if k.module.startswith(f"{__package__}."):
            found.setdefault((k.domain, k.op_type), set()).add(k.module)
    return {key: tuple(sorted(found[key])) for key in sorted(found)}
