"""Options fixed when a session is created."""

from __future__ import annotations

from dataclasses import dataclass

LOOP_CONDITION_MODES = ("spec", "always")


@dataclass
class SessionOptions:
    """How a session compiles its model.

    - ``optimize`` (default True): compute nodes whose inputs are all constants once, when the
      session is created (never random draws); move loop-invariant work out of Loop and Scan
      bodies; batch per-element Scan work over whole sequences. Results are the same; turn it
      off to run every node, every time, exactly as written.
    - ``loop_condition`` (default ``"spec"``): with ``"spec"``, a Loop whose ``cond`` input is
      omitted ignores the condition its body computes, as the operator's table says. With
      ``"always"``, the body's condition stops the loop in every mode, as onnxruntime does and
      as onnxscript's translation of ``for ... break`` expects.
    """

    optimize: bool = True
    loop_condition: str = "spec"

    def __post_init__(self) -> None:
        if self.loop_condition not in LOOP_CONDITION_MODES:
            from onnxflow.errors import InputError

            raise InputError(
                f"SessionOptions.loop_condition must be one of {LOOP_CONDITION_MODES}, "
                f"found {self.loop_condition!r}"
            )
