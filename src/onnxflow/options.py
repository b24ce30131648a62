"""Options fixed when a session is created."""

from __future__ import annotations

from dataclasses import dataclass

LOOP_CONDITION_MODES = ("spec", "always")
FLOAT16_ROUNDINGS = ("each_op", "outputs")


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
    - ``float16_rounding`` (default ``"each_op"``): float16 values are held in float32 and, with
      ``"each_op"``, every op's float16 result is rounded to float16, as the model's types say.
      With ``"outputs"``, they are computed in float32 from op to op and rounded only where the
      model casts to float16 and at the graph's outputs, as onnxruntime's CPU provider runs
      float16 models (it computes them in float32 and drops the casts between ops): faster, and
      its results differ from the spec's by float16 roundings. Applies with ``optimize``.
    """

    optimize: bool = True
    loop_condition: str = "spec"
    float16_rounding: str = "each_op"

    def __post_init__(self) -> None:
        for name, allowed in (
            ("loop_condition", LOOP_CONDITION_MODES),
            ("float16_rounding", FLOAT16_ROUNDINGS),
        ):
            if getattr(self, name) not in allowed:
                from onnxflow.errors import InputError

                raise InputError(
                    f"SessionOptions.{name} must be one of {allowed}, found {getattr(self, name)!r}"
                )
