"""Feeds for every model stored in the tests (``tests/**/*.onnx``): the feeds stored beside
it where the tests keep some, else values generated from its declared inputs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from onnxflow import InferenceSession
from onnxflow.values import np_dtype

ROOT = Path(__file__).resolve().parents[2]
MICROSOFT = ROOT / "tests" / "microsoft" / "data"

#: Stored transformer models -> the case of ``transformer_inputs.npz`` that feeds them.
_TRANSFORMER_CASES = {"gpt2_past_optimized": "gpt2", "llama_gqa": "llama_prompt", "bert": "bert"}

#: Inputs that take a setting rather than data (generation ops): the value to give them.
_SETTINGS = {
    "max_length": 12,
    "min_length": 1,
    "num_beams": 3,
    "num_return_sequences": 2,
    "length_penalty": 1.0,
    "repetition_penalty": 1.0,
    "top_p": 0.9,
    "temperature": 1.0,
    "vocab_mask": 1,
}

#: Size given to a dimension the model leaves unknown.
_UNKNOWN = 2


def stored_models() -> list[Path]:
    """Every ``.onnx`` file under the repository's tests and examples, sorted."""
    found = [*(ROOT / "tests").rglob("*.onnx"), *(ROOT / "examples").glob("*.onnx")]
    return sorted(found)


def feeds_for(model: Path, session: InferenceSession) -> dict[str, Any]:
    """The feeds to run ``model`` on: stored ones by input name where the tests keep them,
    the others generated (seeded) from their declared type and shape."""
    stored = _stored(model, [a.name for a in session.get_inputs()])
    rng = np.random.default_rng(0)
    feeds = {}
    for arg in session.get_inputs():
        if arg.name in stored:
            feeds[arg.name] = stored[arg.name]
        else:
            feeds[arg.name] = _generated(arg, rng)
    return feeds


def _stored(model: Path, names: list[str]) -> dict[str, np.ndarray]:
    side = model.with_suffix(".npz")
    if side.exists():  # exporters/data: in0_<k> is input k of the first feed set
        with np.load(side) as data:
            return {n: data[f"in0_{k}"] for k, n in enumerate(names) if f"in0_{k}" in data}
    quantized = model.parent / "inputs.npz"
    if quantized.exists() and len(names) == 1:
        with np.load(quantized) as data:
            return {names[0]: data[model.stem]} if model.stem in data else {}
    case = _TRANSFORMER_CASES.get(model.stem)
    if model.parent == MICROSOFT and case:
        with np.load(MICROSOFT / "transformer_inputs.npz") as data:
            return {n: data[f"{case}.{n}"] for n in names if f"{case}.{n}" in data}
    if model.parent == MICROSOFT and model.stem.startswith("gpt2_"):
        with np.load(MICROSOFT / "gpt2_prompts.npz") as data:
            prompts = {"prompt_ids": data["two"], "prompt_mask": data["two_mask"]}
        return {n: v for n, v in prompts.items() if n in names}
    return {}


def _generated(arg: Any, rng: np.random.Generator) -> Any:
    """Values of ``arg``'s declared tensor type: small non-negative integers (valid ids and
    indices), standard normal floats, a setting's own value by its name."""
    dtype = np_dtype(arg.type_proto.tensor_type.elem_type)
    shape = [d if isinstance(d, int) and d >= 0 else _UNKNOWN for d in (arg.shape or [])]
    if arg.name in _SETTINGS:
        return np.full(shape, _SETTINGS[arg.name], dtype)
    if dtype == np.bool_:
        return np.ones(shape, bool)
    if np.issubdtype(dtype, np.integer):
        return rng.integers(0, 2, size=shape).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)
