"""GreedySearch, BeamSearch and Sampling (com.microsoft) on a tiny GPT-2 wrapped by onnxruntime's
convert_generation (built by make_generation_models.py): onnxflow generates the sequences
onnxruntime does, for batch 1 and left-padded batch 2, across the attributes and inputs; a
greedy oracle calling the decoder in a Python loop agrees; each decoding step is a scope that
a Trace sees; RunOptions.terminate stops between steps.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest

import onnxflow
from onnxflow.observers import Observer, Trace
from onnxflow.ops.microsoft.generation_search import refuse_presence_penalty

DATA = Path(__file__).parent / "data"
VOCAB, EOS = 96, 95  # EOS is the pad token too, as convert_generation makes it for GPT-2
PROMPTS = dict(np.load(DATA / "gpt2_prompts.npz"))

#: model -> its generation operator
MODELS = {
    "gpt2_greedy.onnx": "GreedySearch",
    "gpt2_greedy_masks.onnx": "GreedySearch",
    "gpt2_beam.onnx": "BeamSearch",
    "gpt2_beam_ngram.onnx": "BeamSearch",
    "gpt2_sampling.onnx": "Sampling",
}


@functools.cache
def sessions(model: str) -> tuple[onnxflow.InferenceSession, ort.InferenceSession]:
    path = str(DATA / model)
    return onnxflow.InferenceSession(path), ort.InferenceSession(path)


def allowed(*tokens: int) -> np.ndarray:
    mask = np.zeros(VOCAB, dtype=np.int32)
    mask[list(tokens)] = 1
    return mask


def feeds(prompt: str, max_length: int, **inputs: Any) -> dict[str, np.ndarray]:
    """The feeds of one call: a prompt of PROMPTS (its mask as prompt_mask when asked), the
    length limits, and the other inputs by name (scalars as shape-(1) arrays)."""
    out = {"prompt_ids": PROMPTS[prompt], "max_length": np.array([max_length], np.int32)}
    out["min_length"] = np.array([inputs.pop("min_length", 1)], np.int32)
    out["repetition_penalty"] = np.array([inputs.pop("repetition_penalty", 1.0)], np.float32)
    if inputs.pop("masked", False):
        out["prompt_mask"] = PROMPTS[f"{prompt}_mask"]
    for name, value in inputs.items():
        is_float = isinstance(value, float)
        out[name] = (
            np.array([value], np.float32 if is_float else np.int32) if np.isscalar(value) else value
        )
    return out


def generated(sequences: np.ndarray) -> int:
    """How many columns hold tokens: onnxruntime leaves the columns after the last step
    unwritten when every sequence ended early, onnxflow fills them with the pad token."""
    rows = sequences.reshape(-1, sequences.shape[-1])
    busy = np.nonzero((rows != EOS).any(axis=0))[0]
    return int(busy[-1]) + 2 if busy.size else 0


def assert_same_sequences(ours: np.ndarray, theirs: np.ndarray) -> None:
    assert ours.shape == theirs.shape and ours.dtype == theirs.dtype
    n = generated(ours)
    np.testing.assert_array_equal(ours[..., :n], theirs[..., :n])
    assert (ours[..., n:] == EOS).all()


def compare(model: str, f: dict[str, np.ndarray]) -> list[np.ndarray]:
    """Run both; the sequences must be equal, the scores close. Return onnxflow's outputs."""
    flow, rt = sessions(model)
    ours, theirs = flow.run(None, f), rt.run(None, f)
    assert_same_sequences(ours[0], theirs[0])
    for a, b in zip(ours[1:], theirs[1:], strict=True):
        assert a.shape == b.shape and a.dtype == b.dtype
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4)
    return ours


@pytest.mark.parametrize("model", MODELS)
def test_model_holds_the_operator_over_a_plain_onnx_decoder(model: str) -> None:
    proto = onnx.load(DATA / model)
    (node,) = proto.graph.node
    assert (node.domain, node.op_type) == ("com.microsoft", MODELS[model])
    decoder = next(a.g for a in node.attribute if a.name == "decoder")
    assert {n.domain for n in decoder.node} <= {"", "ai.onnx"}


GREEDY = {
    "batch1": ("gpt2_greedy.onnx", feeds("one", 16)),
    "batch2_pad_tokens_masked": ("gpt2_greedy.onnx", feeds("two", 16)),
    "repetition_penalty": ("gpt2_greedy.onnx", feeds("two", 20, repetition_penalty=1.6)),
    "penalty_below_one": ("gpt2_greedy.onnx", feeds("one", 12, repetition_penalty=0.7)),
    "one_step": ("gpt2_greedy.onnx", feeds("one", 6)),
    "masks_and_no_repeat_bigram": (
        "gpt2_greedy_masks.onnx",
        feeds(
            "two",
            18,
            masked=True,
            vocab_mask=1 - allowed(29, 48, 55),
            prefix_vocab_mask=np.tile(allowed(*range(40)), (2, 1)),
        ),
    ),
    "eos_ends_rows_then_all": (
        "gpt2_greedy_masks.onnx",
        feeds(
            "two",
            24,
            masked=True,
            vocab_mask=allowed(3, 7, 11, EOS),
            prefix_vocab_mask=np.ones((2, VOCAB), np.int32),
        ),
    ),
    "min_length_holds_eos_back": (
        "gpt2_greedy_masks.onnx",
        feeds(
            "two",
            24,
            masked=True,
            min_length=20,
            vocab_mask=allowed(3, 7, 11, EOS),
            prefix_vocab_mask=np.ones((2, VOCAB), np.int32),
        ),
    ),
}


@pytest.mark.parametrize("scenario", GREEDY)
def test_greedy_search_matches_onnxruntime(scenario: str) -> None:
    model, f = GREEDY[scenario]
    (sequences,) = compare(model, f)
    np.testing.assert_array_equal(sequences[:, : f["prompt_ids"].shape[1]], f["prompt_ids"])


def test_eos_and_min_length_change_where_sequences_end() -> None:
    _, early = GREEDY["eos_ends_rows_then_all"]
    _, late = GREEDY["min_length_holds_eos_back"]
    flow, _ = sessions("gpt2_greedy_masks.onnx")
    ends = [generated(flow.run(None, f)[0]) for f in (early, late)]
    assert ends[0] < 20 <= ends[1]


BEAM = {
    "batch2_masked_scores": (
        "gpt2_beam.onnx",
        feeds("two", 14, masked=True, num_beams=3, num_return_sequences=2, length_penalty=1.0),
    ),
    "batch1_one_beam": (
        "gpt2_beam.onnx",
        feeds(
            "one",
            12,
            masked=False,
            prompt_mask=np.ones((1, 5), np.int32),
            num_beams=1,
            num_return_sequences=1,
            length_penalty=1.0,
        ),
    ),
    "all_beams_returned_min_length": (
        "gpt2_beam.onnx",
        feeds(
            "two",
            18,
            masked=True,
            min_length=16,
            num_beams=4,
            num_return_sequences=4,
            length_penalty=1.0,
            repetition_penalty=1.3,
        ),
    ),
    "ngram_vocab_mask_short_penalty": (
        "gpt2_beam_ngram.onnx",
        feeds(
            "two",
            16,
            vocab_mask=1 - allowed(29, 43),
            num_beams=4,
            num_return_sequences=3,
            length_penalty=0.5,
        ),
    ),
    "early_stopping_with_eos": (
        "gpt2_beam_ngram.onnx",
        feeds(
            "two",
            24,
            vocab_mask=allowed(3, 7, 11, 20, 30, 40, 50, EOS),
            num_beams=3,
            num_return_sequences=3,
            length_penalty=0.3,
        ),
    ),
    "eos_long_penalty": (
        "gpt2_beam_ngram.onnx",
        feeds(
            "one",
            20,
            vocab_mask=allowed(3, 7, 11, EOS),
            num_beams=2,
            num_return_sequences=1,
            length_penalty=2.0,
        ),
    ),
}


@pytest.mark.parametrize("scenario", BEAM)
def test_beam_search_matches_onnxruntime(scenario: str) -> None:
    model, f = BEAM[scenario]
    sequences, scores, *_ = compare(model, f)
    batch, returned = f["prompt_ids"].shape[0], int(f["num_return_sequences"][0])
    assert sequences.shape == (batch, returned, int(f["max_length"][0]))
    assert (np.diff(scores, axis=1) <= 0).all()  # best first


def test_beam_scores_output_holds_each_steps_scores() -> None:
    model, f = BEAM["batch2_masked_scores"]
    *_, step_scores = compare(model, f)
    steps = int(f["max_length"][0]) - f["prompt_ids"].shape[1]
    assert step_scores.shape == (steps, 2, 3, VOCAB)
    # the first step extends one beam per entry: the others start at -1e9
    assert (step_scores[0, :, 1:] < -1e8).all() and (step_scores[0, :, 0] > -1e8).all()


def sampling_model(**attributes: float) -> bytes:
    """The sampling model with some attributes changed."""
    proto = onnx.load(DATA / "gpt2_sampling.onnx")
    for a in proto.graph.node[0].attribute:
        if a.name in attributes:
            a.f = attributes[a.name]
    return proto.SerializeToString()


SAMPLING = {
    "batch1": feeds("one", 14, seed=1, prompt_mask=np.ones((1, 5), np.int32)),
    "batch2_masked_penalty": feeds("two", 16, masked=True, seed=7, repetition_penalty=1.4),
}


@pytest.mark.parametrize("scenario", SAMPLING)
def test_sampling_with_a_tiny_top_p_matches_onnxruntime_and_greedy(scenario: str) -> None:
    f = SAMPLING[scenario]
    (sampled,) = compare("gpt2_sampling.onnx", f)  # the nucleus is the best token alone
    greedy, _ = sessions("gpt2_greedy.onnx")  # its mask: 0 at pad tokens, as prompt_mask is
    plain = {k: v for k, v in f.items() if k not in ("seed", "prompt_mask")}
    np.testing.assert_array_equal(sampled, greedy.run(None, plain)[0])


def test_sampling_draws_depend_on_the_seed_only() -> None:
    sess = onnxflow.InferenceSession(sampling_model(top_p=0.95, temperature=1.5))
    runs = {seed: sess.run(None, feeds("two", 20, masked=True, seed=seed))[0] for seed in (1, 2)}
    again = sess.run(None, feeds("two", 20, masked=True, seed=1))[0]
    np.testing.assert_array_equal(runs[1], again)
    assert not np.array_equal(runs[1], runs[2])
    assert ((runs[1] >= 0) & (runs[1] < VOCAB)).all()


def test_sampling_keeps_to_the_top_p_nucleus() -> None:
    """With top_p 0.5 every sampled token is among the most probable ones whose probabilities
    reach one half, as the decoder ranks them (checked with the greedy oracle's decoder)."""
    f = feeds("one", 12, seed=5, prompt_mask=np.ones((1, 5), np.int32))
    (sampled,) = onnxflow.InferenceSession(sampling_model(top_p=0.5)).run(None, f)
    decoder = decoder_session("gpt2_greedy.onnx")
    for t in range(5, 12):
        logits = step_logits(decoder, sampled[:, :t])[0]
        probs = np.exp(logits - logits.max())
        probs /= probs.sum()
        order = np.argsort(-probs)
        nucleus = order[: np.searchsorted(np.cumsum(probs[order]), 0.5) + 1]
        assert sampled[0, t] in nucleus


def presence_model(presence_penalty: float) -> bytes:
    """The sampling model with a presence_mask graph input and the given presence_penalty."""
    proto = onnx.load_from_string(sampling_model(presence_penalty=presence_penalty))
    node = proto.graph.node[0]
    node.input[7] = "presence_mask"
    proto.graph.input.append(
        onnx.helper.make_tensor_value_info("presence_mask", onnx.TensorProto.INT32, ["b", VOCAB])
    )
    return proto.SerializeToString()


def test_sampling_without_a_presence_penalty_ignores_the_mask_as_onnxruntime() -> None:
    model = presence_model(0.0)
    f = feeds("two", 14, masked=True, seed=3, presence_mask=np.ones((2, VOCAB), np.int32))
    ours = onnxflow.InferenceSession(model).run(None, f)[0]
    assert_same_sequences(ours, ort.InferenceSession(model).run(None, f)[0])
    no_mask = {k: v for k, v in f.items() if k != "presence_mask"}
    np.testing.assert_array_equal(ours, sessions("gpt2_sampling.onnx")[0].run(None, no_mask)[0])


def test_sampling_with_a_presence_penalty_and_no_mask_is_onnxruntime() -> None:
    model = sampling_model(presence_penalty=5.0)
    f = feeds("two", 14, masked=True, seed=3)
    ours = onnxflow.InferenceSession(model).run(None, f)[0]
    assert_same_sequences(ours, ort.InferenceSession(model).run(None, f)[0])


def test_presence_penalty_with_a_mask_is_refused_naming_the_mask() -> None:
    """onnxruntime lowers token 0 of the first row only, by penalty times the mask's sum,
    whichever tokens the mask names (here the mask names token 5 of the second row): that is
    no per-token rule to follow, so onnxflow refuses the pair."""
    f = feeds("two", 12, masked=True, seed=3)
    mask = np.zeros((2, VOCAB), np.int32)
    mask[1, 5] = 1
    theirs = ort.InferenceSession(presence_model(-1000.0)).run(None, {**f, "presence_mask": mask})
    plain = sessions("gpt2_sampling.onnx")[1].run(None, f)[0]
    assert (theirs[0][0, 6:] == 0).all() and (plain[0, 6:] != 0).all()
    np.testing.assert_array_equal(theirs[0][1], plain[1])
    with pytest.raises(onnxflow.InputError, match="presence_mask with presence_penalty -1000"):
        refuse_presence_penalty("Sampling 'gen'", mask, -1000.0)
    refuse_presence_penalty("Sampling 'gen'", mask, 0.0)
    refuse_presence_penalty("Sampling 'gen'", None, -1000.0)


def test_a_sampling_model_fed_a_presence_mask_with_a_penalty_is_refused_at_run() -> None:
    session = onnxflow.InferenceSession(presence_model(5.0))
    f = feeds("two", 12, masked=True, seed=3, presence_mask=np.ones((2, VOCAB), np.int32))
    with pytest.raises(onnxflow.InputError, match="presence_mask with presence_penalty 5"):
        session.run(None, f)


# the oracle: GreedySearch as the schema says, the decoder subgraph called in a Python loop


def decoder_session(model: str) -> onnxflow.InferenceSession:
    proto = onnx.load(DATA / model)
    decoder = next(a.g for a in proto.graph.node[0].attribute if a.name == "decoder")
    return onnxflow.InferenceSession(
        onnx.helper.make_model(decoder, opset_imports=proto.opset_import)
    )


def step_logits(decoder: onnxflow.InferenceSession, ids: np.ndarray) -> np.ndarray:
    """The last position's logits for ``ids`` (no padding), the whole sequence at once."""
    n_past = len(decoder.get_inputs()) - 3
    positions = np.broadcast_to(np.arange(ids.shape[1], dtype=np.int32), ids.shape)
    pasts = {f"past_{i}": np.zeros((2, ids.shape[0], 2, 0, 16), np.float32) for i in range(n_past)}
    f = {"input_ids": ids, "position_ids": positions, "attention_mask": np.ones_like(ids), **pasts}
    return decoder.run(["logits"], f)[0][:, -1, :]


def greedy_oracle(
    decoder: onnxflow.InferenceSession, ids: np.ndarray, max_length: int
) -> np.ndarray:
    """Append the argmax token until max_length (no eos among the tokens chosen here)."""
    while ids.shape[1] < max_length:
        ids = np.concatenate(
            [ids, step_logits(decoder, ids).argmax(axis=1)[:, None].astype(ids.dtype)], axis=1
        )
    return ids


@pytest.mark.parametrize("prompt", ["one", "two_unpadded"])
def test_greedy_search_agrees_with_the_oracle(prompt: str) -> None:
    ids = PROMPTS["one"] if prompt == "one" else PROMPTS["two"][:, 2:]
    flow, _ = sessions("gpt2_greedy.onnx")
    f = feeds("one", 15)
    f["prompt_ids"] = ids
    (ours,) = flow.run(None, f)
    expected = greedy_oracle(decoder_session("gpt2_greedy.onnx"), ids, 15)
    assert (expected[:, ids.shape[1] :] != EOS).all()  # no sequence ended early
    np.testing.assert_array_equal(ours, expected)


def test_a_trace_sees_each_decoding_step() -> None:
    flow, _ = sessions("gpt2_greedy.onnx")
    trace = Trace()
    (sequences,) = flow.run(None, feeds("one", 9), observers=[trace])
    (node,) = onnx.load(DATA / "gpt2_greedy.onnx").graph.node
    assert trace.iterations_of(node.name) == [0, 1, 2, 3]
    first, later = trace.at(node.name, 0), trace.at(node.name, 2)
    np.testing.assert_array_equal(first["input_ids"], PROMPTS["one"])
    assert first["past_0"].shape == (2, 1, 2, 0, 16)
    np.testing.assert_array_equal(later["input_ids"], sequences[:, 6:7])
    np.testing.assert_array_equal(later["position_ids"], [[6]])
    assert later["past_0"].shape == (2, 1, 2, 6, 16) and later["present_0"].shape == (
        2,
        1,
        2,
        7,
        16,
    )
    assert later["logits"].shape == (1, 1, VOCAB)


class TerminateAt(Observer):
    """Sets RunOptions.terminate when a given decoding step starts."""

    node_events = False

    def __init__(self, options: onnxflow.RunOptions, step: int) -> None:
        self.options, self.step = options, step

    def scope_start(self, scope: Any, total: int | None) -> None:
        if scope[-1][1] == self.step:
            self.options.terminate = True


@pytest.mark.parametrize("model", ["gpt2_greedy.onnx", "gpt2_beam.onnx"])
def test_run_options_terminate_stops_between_steps(model: str) -> None:
    flow, _ = sessions(model)
    f = BEAM["batch2_masked_scores"][1] if "beam" in model else feeds("one", 16)
    options = onnxflow.RunOptions()
    with pytest.raises(onnxflow.CancelledError, match="at iteration 2|step 3"):
        flow.run(None, f, options, observers=[TerminateAt(options, 2)])


def with_attribute(model: str, name: str, value: int) -> bytes:
    proto = onnx.load(DATA / model)
    node = proto.graph.node[0]
    kept = [a for a in node.attribute if a.name != name]
    del node.attribute[:]
    node.attribute.extend([*kept, onnx.helper.make_attribute(name, value)])
    return proto.SerializeToString()


@pytest.mark.parametrize(
    ("model", "name", "value", "message"),
    [
        ("gpt2_greedy.onnx", "model_type", 1, "model_type 1 .* not supported"),
        ("gpt2_beam.onnx", "model_type", 2, "model_type 2 .* not supported"),
        ("gpt2_sampling.onnx", "custom", 1, "custom sampling .* not supported"),
    ],
)
def test_unsupported_modes_are_refused_when_the_model_loads(
    model: str, name: str, value: int, message: str
) -> None:
    with pytest.raises(onnxflow.ValidationError, match=message):
        onnxflow.InferenceSession(with_attribute(model, name, value))


def test_max_length_must_exceed_the_prompt() -> None:
    flow, _ = sessions("gpt2_greedy.onnx")
    with pytest.raises(onnxflow.InputError, match=r"max_length \(5\) must exceed .* \(5\)"):
        flow.run(None, feeds("one", 5))


@pytest.mark.parametrize("penalty", [0.0, -0.5, float("nan")])
def test_repetition_penalty_must_be_positive(penalty: float) -> None:
    """The schema accepts repetition_penalty > 0 (onnxruntime refuses the rest too)."""
    flow, ort = sessions("gpt2_greedy.onnx")
    given = feeds("one", 8, repetition_penalty=penalty)
    with pytest.raises(onnxflow.InputError, match="repetition_penalty must be greater than 0"):
        flow.run(None, given)
    with pytest.raises(Exception, match="repetition_penalty"):
        ort.run(None, given)


def with_init_decoder(model: str, favoured: int) -> bytes:
    """``model`` with an init_decoder: its decoder with logits raised by 100 at ``favoured``."""
    proto = onnx.load(DATA / model)
    node = proto.graph.node[0]
    init = onnx.GraphProto()
    init.CopyFrom(next(a.g for a in node.attribute if a.name == "decoder"))
    init.name = "init decoder"
    for n in init.node:
        n.output[:] = ["raw_logits" if o == "logits" else o for o in n.output]
    bias = np.zeros(VOCAB, np.float32)
    bias[favoured] = 100.0
    init.initializer.append(onnx.numpy_helper.from_array(bias, "favour"))
    init.node.append(onnx.helper.make_node("Add", ["raw_logits", "favour"], ["logits"]))
    node.attribute.append(onnx.helper.make_attribute("init_decoder", init))
    return proto.SerializeToString()


@pytest.mark.parametrize("model", ["gpt2_greedy.onnx", "gpt2_beam.onnx"])
def test_init_decoder_makes_the_first_step_only(model: str) -> None:
    proto = with_init_decoder(model, favoured=7)
    f = BEAM["batch2_masked_scores"][1] if "beam" in model else feeds("two", 12)
    ours, theirs = (
        onnxflow.InferenceSession(proto).run(None, f),
        ort.InferenceSession(proto).run(None, f),
    )
    assert_same_sequences(ours[0], theirs[0])
    prompt = f["prompt_ids"].shape[1]
    assert (ours[0][..., prompt] == 7).all() and (ours[0][..., prompt + 1 :] != 7).any()


# encoder-decoder (model_type 1): t5_beam.onnx, pad 0, eos 1, decoder_start_token_id 0

T5_VOCAB = 80
T5_PROMPT = np.array([[0, 0, 12, 40, 7, 33], [5, 61, 9, 27, 0, 0]], np.int32)  # pads lead, trail


def t5_feeds(max_length: int, beams: int, returned: int, **inputs: Any) -> dict[str, np.ndarray]:
    f = {"prompt_ids": T5_PROMPT, "max_length": np.array([max_length], np.int32)}
    f["min_length"] = np.array([inputs.pop("min_length", 1)], np.int32)
    f["num_beams"] = np.array([beams], np.int32)
    f["num_return_sequences"] = np.array([returned], np.int32)
    f["length_penalty"] = np.array([inputs.pop("length_penalty", 1.0)], np.float32)
    f["repetition_penalty"] = np.array([inputs.pop("repetition_penalty", 1.0)], np.float32)
    f["vocab_mask"] = inputs.pop("vocab_mask", np.ones(T5_VOCAB, np.int32))
    return f


def compare_bytes(proto: bytes, f: dict[str, np.ndarray], eos: int = 1) -> list[np.ndarray]:
    ours, theirs = (
        onnxflow.InferenceSession(proto).run(None, f),
        ort.InferenceSession(proto).run(None, f),
    )
    np.testing.assert_array_equal(ours[0], theirs[0])
    for a, b in zip(ours[1:], theirs[1:], strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4)
    return ours


T5_BEAM = {
    "three_beams_two_returned": t5_feeds(10, 3, 2),
    "one_beam": t5_feeds(8, 1, 1),
    "all_returned_penalties": t5_feeds(12, 4, 4, repetition_penalty=2.0, length_penalty=0.6),
    "eos_reachable_min_length": t5_feeds(
        14,
        3,
        3,
        min_length=6,
        vocab_mask=np.isin(np.arange(T5_VOCAB), [1, 16, 25, 60]).astype(np.int32),
    ),
}


@pytest.mark.parametrize("scenario", T5_BEAM)
def test_encoder_decoder_beam_search_matches_onnxruntime(scenario: str) -> None:
    f = T5_BEAM[scenario]
    sequences, _ = compare_bytes((DATA / "t5_beam.onnx").read_bytes(), f)
    assert (sequences[..., 0] == 0).all()  # decoder_start_token_id
    assert not np.array_equal(sequences[0], sequences[1])  # the entries' encodings differ


def t5_as_greedy() -> bytes:
    """t5_beam.onnx with its node made a GreedySearch (convert_generation makes BeamSearch
    only for T5): same subgraphs and attributes but early_stopping, greedy's inputs."""
    proto = onnx.load(DATA / "t5_beam.onnx")
    node = proto.graph.node[0]
    node.op_type, node.name = "GreedySearch", "GreedySearch_t5"
    kept = [a for a in node.attribute if a.name != "early_stopping"]
    del node.attribute[:]
    node.attribute.extend(kept)
    node.input[:] = ["prompt_ids", "max_length", "min_length", "repetition_penalty", "vocab_mask"]
    node.output[:] = ["sequences"]
    del proto.graph.output[1:]
    drop = {"num_beams", "num_return_sequences", "length_penalty"}
    kept_inputs = [i for i in proto.graph.input if i.name not in drop]
    del proto.graph.input[:]
    proto.graph.input.extend(kept_inputs)
    return proto.SerializeToString()


def test_encoder_decoder_greedy_search_is_beam_search_with_one_beam() -> None:
    """onnxruntime runs GreedySearch for GPT-2 only; with no eos reached, greedy decoding is
    onnxruntime's beam search with one beam."""
    beam = t5_feeds(12, 1, 1)  # a penalty would apply to logits here, log-probabilities there
    names = ("prompt_ids", "max_length", "min_length", "repetition_penalty", "vocab_mask")
    (greedy,) = onnxflow.InferenceSession(t5_as_greedy()).run(None, {k: beam[k] for k in names})
    expected = ort.InferenceSession(str(DATA / "t5_beam.onnx")).run(None, beam)[0][:, 0]
    assert (expected[:, 1:] != 1).all()
    np.testing.assert_array_equal(greedy, expected)


def test_a_decoder_reading_whole_sequences_is_fed_them() -> None:
    """A decoder whose input_ids are not declared (batch, 1) gets the whole sequence each
    step (its presents still fed back), as onnxruntime feeds it."""
    proto = onnx.load(DATA / "t5_beam.onnx")
    decoder = next(a.g for a in proto.graph.node[0].attribute if a.name == "decoder")
    decoder.input[0].type.tensor_type.shape.dim[1].dim_param = "sequence"
    compare_bytes(proto.SerializeToString(), t5_feeds(7, 2, 2))


def test_a_trace_sees_the_encoder_then_each_step() -> None:
    trace = Trace(nodes=["BeamSearch_t5"])
    onnxflow.InferenceSession(str(DATA / "t5_beam.onnx")).run(
        None, t5_feeds(6, 2, 1), observers=[trace]
    )
    assert trace.iterations_of("BeamSearch_t5") == ["encoder", 0, 1, 2, 3, 4]
    encoder = trace.at("BeamSearch_t5", "encoder")
    np.testing.assert_array_equal(
        encoder["encoder_attention_mask"][::2], [[0, 0, 1, 1, 1, 1], [1] * 6]
    )
    step = trace.at("BeamSearch_t5", 3)
    assert step["input_ids"].shape == (4, 1) and step["past_key_self_0"].shape[2] == 3


def test_t5_attention_mask_input_is_used_as_given() -> None:
    proto = onnx.load(DATA / "t5_beam.onnx")
    proto.graph.node[0].input[9] = "prompt_mask"
    proto.graph.input.append(
        onnx.helper.make_tensor_value_info("prompt_mask", onnx.TensorProto.INT32, ["b", "s"])
    )
    f = t5_feeds(9, 2, 2)
    f["prompt_mask"] = np.array([[0, 1, 1, 1, 1, 1], [1, 1, 1, 1, 1, 0]], np.int32)
    masked = compare_bytes(proto.SerializeToString(), f)[0]
    assert not np.array_equal(
        masked,
        onnxflow.InferenceSession(str(DATA / "t5_beam.onnx")).run(None, t5_feeds(9, 2, 2))[0],
    )
