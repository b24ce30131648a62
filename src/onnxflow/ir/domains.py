"""How operator domains are spelled: ``ai.onnx`` and ``""`` both name the default domain.

One place for the rule, read by the IR checks, the registry, the compiler and its passes.
"""

from __future__ import annotations

from onnx import NodeProto

#: The two spellings of the default (ai.onnx) domain.
_DEFAULT_SPELLINGS = ("", "ai.onnx")


def is_default_domain(domain: str) -> bool:
    """Whether ``domain`` names the default (ai.onnx) domain, spelled either way."""
    return domain in _DEFAULT_SPELLINGS


def normalize_domain(domain: str) -> str:
    """Return the canonical spelling of a domain (``ai.onnx`` is the default domain ``""``)."""
    return "" if domain in _DEFAULT_SPELLINGS else domain


def is_onnx_op(node: NodeProto, op_type: str) -> bool:
    """Whether ``node`` is the standard (ai.onnx) operator ``op_type``."""
    return node.op_type == op_type and node.domain in _DEFAULT_SPELLINGS
