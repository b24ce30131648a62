"""Recurrent networks: RNN, LSTM, GRU (every version; layout 1 from version 14).

One driver runs a cell over time for each direction. The input projection ``X @ W.T + Wb`` of
every time step is computed in one matmul up front; the loop over time only does the recurrent
part. ``sequence_lens`` is honoured with masks: past a batch entry's length its state is frozen
and its output is zero.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from onnxflow.ops import activations as act
from onnxflow.ops import compiled
from onnxflow.ops._common import float_compute_dtype
from onnxflow.ops.memo import WeightMemo
from onnxflow.ops.microsoft.experimental import affine, scaled_tanh
from onnxflow.ops.registry import op
from onnxflow.traits import Traits, native_form

Activation = Callable[[np.ndarray], np.ndarray]


def _sigmoid(x: np.ndarray) -> np.ndarray:
    """The Sigmoid kernel's values, from its function's buffered form into a new array: on a
    time step's small arrays that is about 1 us less a call (fewer NumPy calls)."""
    return act._sigmoid(x, np.empty_like(x))


#: activation (lower case) -> (the registered kernel computing it, the kernel's attributes that
#: activation_alpha and activation_beta set, as the RNN schema's table names them). An omitted
#: value is the kernel's default, as the schema says (LeakyRelu's alpha is 0.01).
_ACTIVATIONS: dict[str, tuple[Callable[..., np.ndarray], tuple[str, ...]]] = {
    "relu": (act.relu, ()),
    "tanh": (np.tanh, ()),  # the Tanh kernel calls this ufunc
    "sigmoid": (_sigmoid, ()),
    "affine": (affine, ("alpha", "beta")),
    "leakyrelu": (act.leaky_relu, ("alpha",)),
    "thresholdedrelu": (act.thresholded_relu, ("alpha",)),
    "scaledtanh": (scaled_tanh, ("alpha", "beta")),
    "hardsigmoid": (act.hard_sigmoid, ("alpha", "beta")),
    "elu": (act.elu, ("alpha",)),
    "softsign": (act.softsign, ()),
    "softplus": (act.softplus, ()),
}


#: An activation resolved: its name (lower case) and the attribute values given for it.
Chosen = tuple[str, dict[str, float]]


def _chosen_activations(
    names: list[str] | None,
    alphas: list[float] | None,
    betas: list[float] | None,
    defaults: Iterable[str],
    n_dirs: int,
) -> list[list[Chosen]]:
    """The activation list resolved per direction: each function's name and the alpha and beta
    values given for it.

    ``activation_alpha``/``activation_beta`` are consumed in order by the functions that take
    them; a list naming only one direction's functions serves both directions.
    """
    defaults = list(defaults)
    names = list(defaults) if not names else list(names)
    per_dir = len(defaults)
    if len(names) == per_dir and n_dirs == 2:
        names = names * 2
    if len(names) != per_dir * n_dirs:
        raise ValueError(
            f"activations lists {len(names)} functions, expected {per_dir} per direction "
            f"x {n_dirs} direction(s)"
        )
    given = {"alpha": iter(alphas or []), "beta": iter(betas or [])}
    resolved: list[Chosen] = []
    for name in names:
        entry = _ACTIVATIONS.get(name.lower())
        if entry is None:
            raise ValueError(f"unknown activation {name!r}; expected one of {sorted(_ACTIVATIONS)}")
        values = {a: next(given[a], None) for a in entry[1]}
        resolved.append((name.lower(), {a: v for a, v in values.items() if v is not None}))
    return [resolved[d * per_dir : (d + 1) * per_dir] for d in range(n_dirs)]


def _activations(
    names: list[str] | None,
    alphas: list[float] | None,
    betas: list[float] | None,
    defaults: list[str],
    n_dirs: int,
) -> list[list[Activation]]:
    """Resolve the activation list into one list of callables per direction (the kernels
    convert alpha and beta to their input's dtype), see :func:`_chosen_activations`."""
    chosen = _chosen_activations(names, alphas, betas, defaults, n_dirs)
    return [[_bound(*c) for c in per_dir] for per_dir in chosen]


def _bound(name: str, values: dict[str, float]) -> Activation:
    """The activation ``name`` with the attribute ``values`` given for it."""
    kernel = _ACTIVATIONS[name][0]
    return functools.partial(kernel, **values) if values else kernel


@dataclass
class _Weights:
    """One direction's parameters, already split into input and recurrent parts."""

    xw: np.ndarray  # (T, B, G*H): X @ W.T + Wb for every step
    rt: np.ndarray  # (H, G*H): R transposed, contiguous (np.dot's fast path)
    rb: np.ndarray  # (G*H,)
    p: np.ndarray | None  # (3*H,) LSTM peepholes i, o, f


Cell = Callable[[_Weights, int, list[np.ndarray], list[Activation]], list[np.ndarray]]


@dataclass(frozen=True)
class _Static:
    """One direction's weights as every run reads them: made once per set of weights."""

    wt: np.ndarray  # (I, G*H): W transposed
    wb: np.ndarray  # (G*H,): the bias added to every step's input projection
    rt: np.ndarray  # (H, G*H): R transposed, contiguous (np.dot's fast path)
    rb: np.ndarray  # (G*H,): the bias added to every step's recurrent product (zero when in wb)
    p: np.ndarray | None  # (3*H,) LSTM peepholes i, o, f

    def weights(self, xs: np.ndarray) -> _Weights:
        """The weights of one run over the inputs ``xs`` (T, B, I)."""
        xw = xs @ self.wt + self.wb
        return _Weights(xw=xw, rt=self.rt, rb=self.rb, p=self.p)

    @functools.cached_property
    def native(self) -> Any:
        """These weights as the compiled loop takes them (:class:`onnxflow.native._rnn.Weights`),
        made at the first run that uses them."""
        p = _NO_PEEPHOLES if self.p is None else self.p
        return _NATIVE.Weights(self.wb, self.rt, self.rb, p)


@dataclass(frozen=True)
class _CellKind:
    """What sets RNN, LSTM and GRU apart for the driver."""

    n_gates: int
    n_states: int  # Y_h, and Y_c for LSTM
    default_activations: tuple[str, ...]
    #: Rb is added where Wb is (into every step's input projection, once): every gate sums
    #: both biases with its products (GRU's hidden gate scales its Rb by the reset gate).
    biases_together: bool = True


_RNN = _CellKind(1, 1, ("Tanh",))
_LSTM = _CellKind(4, 2, ("Sigmoid", "Tanh", "Tanh"))
_GRU = _CellKind(3, 1, ("Sigmoid", "Tanh"), biases_together=False)


@dataclass(frozen=True)
class _Recurrence:
    """The attributes the three operators share."""

    direction: str
    hidden_size: int | None
    layout: int
    activations: list[str] | None
    alphas: list[float] | None
    betas: list[float] | None


_DIRECTIONS = {"forward": (False,), "reverse": (True,), "bidirectional": (False, True)}

_NATIVE = compiled.module("_rnn")


@dataclass(frozen=True)
class _Loop:
    """A node's compiled time loop (:func:`onnxflow.native._rnn.recur`): its cell and each
    direction's activations, clip and flag (:class:`onnxflow.native._rnn.Gates`); also the
    activations (codes, alphas, betas), clip (NaN: none) and flag (LSTM's input_forget, GRU's
    linear_before_reset) they were made of. It serves float32 weights of the shapes it reads;
    the NumPy cell serves the rest."""

    kind: str
    activations: list[tuple[np.ndarray, np.ndarray, np.ndarray]]
    clip: float
    flag: int
    gates: list[Any]

    def serves(
        self, q: _Static, xs: np.ndarray, states: list[np.ndarray], lens: np.ndarray
    ) -> bool:
        """Whether the compiled loop takes these weights, inputs, states and lengths."""
        _, batch, size = xs.shape
        hidden = states[0].shape[-1]
        width = q.rt.shape[-1]
        return (
            batch < _BLAS_BATCH[self.kind]
            and xs.dtype == np.float32
            and q.wt.shape == (size, width)
            and q.wb.shape == q.rb.shape == (width,)
            and q.rt.shape == (hidden, width)
            and (q.p is None or q.p.shape == (3 * hidden,))
            and lens.shape == (batch,)
        )

    def run(
        self,
        d: int,
        q: _Static,
        xs: np.ndarray,
        states: list[np.ndarray],
        lens: np.ndarray,
        backwards: bool,
    ) -> tuple[np.ndarray, list[np.ndarray]]:
        """Direction ``d`` through time: Y (T, B, H) and the final states (``states``, which
        the loop overwrites). The input projection of every step is one GEMM; its bias is
        added in the loop."""
        seq, batch, size = xs.shape
        xw = np.dot(xs.reshape(seq * batch, size), q.wt).reshape(seq, batch, -1)
        y = np.empty((seq, batch, states[0].shape[-1]), np.float32)
        h, c = (states * 2)[:2]  # c is LSTM's: h stands in for the others
        _NATIVE.recur(self.gates[d], q.native, xw, h, c, lens, y, backwards)
        return y, states


_NO_PEEPHOLES = np.zeros(0, np.float32)
#: From these batch sizes on the NumPy form runs, its product one BLAS call per step: measured
#: (one thread, hidden 32 to 256), the compiled loop was 2x faster for LSTM and GRU at batch 32
#: and 10-15% slower from 64 on at hidden 128; RNN's few NumPy calls a step catch up by batch 8.
_BLAS_BATCH = {"RNN": 8, "LSTM": 64, "GRU": 64}


def _loop(kind: _CellKind, spec: _Recurrence, clip: float | None, flag: int) -> _Loop | None:
    """The compiled loop of a node of ``kind`` (None when its module was not built or the
    direction is not one the spec names: the NumPy form then says what is wrong)."""
    if _NATIVE is None or spec.direction not in _DIRECTIONS:
        return None
    listed = [None if v is None else tuple(v) for v in (spec.activations, spec.alphas, spec.betas)]
    return _made_loop(kind, len(_DIRECTIONS[spec.direction]), *listed, clip, flag)


@functools.cache
def _made_loop(
    kind: _CellKind,
    n_dirs: int,
    names: tuple[str, ...] | None,
    alphas: tuple[float, ...] | None,
    betas: tuple[float, ...] | None,
    clip: float | None,
    flag: int,
) -> _Loop:
    """:func:`_loop`'s value, made once for each set of attributes."""
    chosen = _chosen_activations(
        None if names is None else list(names),
        None if alphas is None else list(alphas),
        None if betas is None else list(betas),
        kind.default_activations,
        n_dirs,
    )
    name = {_RNN: "RNN", _LSTM: "LSTM", _GRU: "GRU"}[kind]
    bound = np.nan if clip is None else float(clip)
    activations = [_native_activations(c) for c in chosen]
    code = _NATIVE.KINDS[name]
    gates = [_NATIVE.Gates(code, *a, bound, flag) for a in activations]
    return _Loop(name, activations, bound, flag, gates)


def _native_activations(chosen: list[Chosen]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One direction's activations as the compiled loop takes them: codes, alphas, betas (the
    values the NumPy kernels use: given or their defaults, in float32)."""
    codes, values = [], {"alpha": [], "beta": []}
    for name, given in chosen:
        codes.append(_NATIVE.ACTIVATIONS[name])
        parameters = inspect.signature(_ACTIVATIONS[name][0]).parameters
        for a, out in values.items():
            default = parameters[a].default if a in parameters else 0.0
            out.append(float(np.float32(given.get(a, default))))
    return (
        np.array(codes, np.intc),
        np.array(values["alpha"], np.float64),
        np.array(values["beta"], np.float64),
    )


def _run(
    cell: Cell,
    kind: _CellKind,
    inputs: tuple[np.ndarray | None, ...],
    spec: _Recurrence,
    peepholes: np.ndarray | None = None,
    memo: WeightMemo[list[_Static]] | None = None,
    loop: _Loop | None = None,
) -> tuple[np.ndarray, ...]:
    """Run ``cell`` over the sequence in each direction; return Y, Y_h (and Y_c for LSTM).
    ``memo``: where the weights prepared for the arrays given last are kept; ``loop``: the
    compiled time loop, run instead of ``cell`` where it serves."""
    x, w, r, b, seq_lens, *initial = inputs
    if spec.direction not in _DIRECTIONS:
        raise ValueError(
            f"direction must be forward, reverse or bidirectional, found {spec.direction!r}"
        )
    directions = _DIRECTIONS[spec.direction]
    if spec.layout:
        x = x.transpose(1, 0, 2)
        initial = [None if s is None else s.transpose(1, 0, 2) for s in initial]
    _check_weights(w, r, kind, len(directions), spec)
    work = float_compute_dtype(x.dtype)
    seq, batch, _ = x.shape
    lens = _lengths(seq_lens, seq, batch)
    functions = functools.partial(
        _activations,
        spec.activations,
        spec.alphas,
        spec.betas,
        list(kind.default_activations),
        len(directions),
    )
    if loop is None:
        functions()  # the activations checked before any work
    xs = x.astype(work, copy=False)

    def make() -> list[_Static]:
        return [_static(w, r, b, peepholes, d, kind, work) for d in range(len(directions))]

    statics = make() if memo is None else memo.get((w, r, b, peepholes, work), make)
    ys, finals = [], []
    for d, backwards in enumerate(directions):
        states = _initial_states(initial, d, kind.n_states, (batch, r.shape[-1]), work)
        if loop is not None and loop.serves(statics[d], xs, states, lens):
            y, states = loop.run(d, statics[d], xs, states, lens, backwards)
        else:
            weights = statics[d].weights(xs)
            y, states = _over_time(cell, weights, states, functions()[d], lens, backwards)
        ys.append(y)
        finals.append(states)
    outs = _stacked(ys, finals)
    if spec.layout:
        outs = [outs[0].transpose(2, 0, 1, 3)] + [o.transpose(1, 0, 2) for o in outs[1:]]
    return tuple(o.astype(x.dtype, copy=False) for o in outs)


def _stacked(ys: list[np.ndarray], finals: list[list[np.ndarray]]) -> list[np.ndarray]:
    """Y (T, D, B, H) and each final state (D, B, H) from every direction's, in new arrays
    (which the session hands out without copying)."""
    return [np.stack(ys, axis=1)] + [np.stack(s) for s in zip(*finals, strict=True)]


def _lengths(seq_lens: np.ndarray | None, seq: int, batch: int) -> np.ndarray:
    """Each batch entry's sequence length (int64): ``seq_lens``, or ``seq`` for every one."""
    return np.full(batch, seq) if seq_lens is None else seq_lens.astype(np.int64).reshape(-1)


def _initial_states(
    initial: list[np.ndarray | None],
    d: int,
    n_states: int,
    shape: tuple[int, int],
    work: np.dtype,
) -> list[np.ndarray]:
    """Direction ``d``'s initial hidden (and cell) state in ``work``: zeros where not given."""
    given = (initial + [None] * n_states)[:n_states]
    return [np.zeros(shape, work) if s is None else s[d].astype(work) for s in given]


def _check_weights(
    w: np.ndarray, r: np.ndarray, kind: _CellKind, n_dirs: int, spec: _Recurrence
) -> None:
    """Check W's shape against the direction count, the gate count and hidden_size."""
    hidden = r.shape[-1]
    gates = kind.n_gates
    if (
        w.shape[0] != n_dirs
        or w.shape[1] != gates * hidden
        or (spec.hidden_size or hidden) != hidden
    ):
        raise ValueError(
            f"W has shape {w.shape}, expected ({n_dirs}, {gates}*{hidden}, input_size) for "
            f"direction {spec.direction!r} and hidden_size {spec.hidden_size or hidden}"
        )


def _static(
    w: np.ndarray,
    r: np.ndarray,
    b: np.ndarray | None,
    peepholes: np.ndarray | None,
    d: int,
    kind: _CellKind,
    work: np.dtype,
) -> _Static:
    """Direction ``d``'s weights in the ``work`` dtype, Rb added to Wb when the kind adds its
    biases together (Rb is then zero)."""
    size = kind.n_gates * r.shape[-1]
    bias = np.zeros(2 * size, work) if b is None else b[d].astype(work)
    wb, rb = bias[:size], bias[size:]
    if kind.biases_together:
        wb, rb = wb + rb, np.zeros_like(rb)
    rt = np.ascontiguousarray(r[d].astype(work, copy=False).T)
    return _Static(
        wt=w[d].astype(work, copy=False).T,
        wb=wb,
        rt=rt,
        rb=rb,
        p=None if peepholes is None else peepholes[d].astype(work),
    )


def _over_time(
    cell: Cell,
    weights: _Weights,
    states: list[np.ndarray],
    functions: list[Activation],
    lens: np.ndarray,
    backwards: bool,
) -> tuple[np.ndarray, list[np.ndarray]]:
    """Step ``cell`` through time; return Y (T, B, H) and the final states.

    Past a batch entry's sequence length its state is frozen and its output is zero.
    """
    seq, batch = weights.xw.shape[:2]
    steps = reversed(range(seq)) if backwards else range(seq)
    unmasked = (lens >= seq).all()  # no entry ends early: no masks to apply
    if unmasked and cell is _lstm_default_cell:
        return _lstm_default_steps(weights, states, steps)
    y = np.zeros((seq, batch, states[0].shape[-1]), states[0].dtype)
    if unmasked:
        for t in steps:
            states = cell(weights, t, states, functions)
            y[t] = states[0]
        return y, states
    for t in steps:
        valid = (t < lens)[:, None]
        new = cell(weights, t, states, functions)
        states = [np.where(valid, n, s) for n, s in zip(new, states)]
        y[t] = np.where(valid, new[0], 0)
    return y, states


def _clipper(clip: float | None) -> Activation:
    return (lambda v: v) if clip is None else (lambda v: np.clip(v, -clip, clip))


def _rnn_cell(
    bound: Activation, p: _Weights, t: int, s: list[np.ndarray], f: list[Activation]
) -> list[np.ndarray]:
    """Ht = f(Xt W^T + Ht-1 R^T + Wb + Rb) (Rb is in ``xw``)."""
    return [f[0](bound(p.xw[t] + np.dot(s[0], p.rt)))]


def _lstm_cell(
    bound: Activation,
    input_forget: int,
    q: _Weights,
    t: int,
    s: list[np.ndarray],
    f: list[Activation],
) -> list[np.ndarray]:
    """Gates i, o, f, c with optional peepholes; ``input_forget`` couples f to 1 - i."""
    h, c = s
    return lstm_gates(bound, input_forget, q.xw[t] + np.dot(h, q.rt), c, q.p, f)  # Rb is in xw


def lstm_gates(
    bound: Activation,
    input_forget: int,
    pre: np.ndarray,
    c: np.ndarray,
    p: np.ndarray | None,
    f: list[Activation],
) -> list[np.ndarray]:
    """The new hidden and cell states from a step's gate pre-activations ``pre`` (i, o, f, c
    side by side), the cell state ``c`` and peepholes ``p``: onnx LSTM's equations."""
    gi, go, gf, gc = np.split(pre, 4, axis=1)
    pi, po, pf = np.split(p, 3) if p is not None else (0, 0, 0)
    i = f[0](bound(gi + pi * c))
    forget = 1 - i if input_forget else f[0](bound(gf + pf * c))
    c_new = forget * c + i * f[1](bound(gc))
    o = f[0](bound(go + po * c_new))
    return [o * f[2](c_new), c_new]


def _lstm_default_cell(
    q: _Weights, t: int, s: list[np.ndarray], f: list[Activation]
) -> list[np.ndarray]:
    """:func:`_lstm_cell` with the default activations and no peepholes, clip or coupling:
    the three sigmoid gates (i, o, f lie side by side) in one call, the same arithmetic."""
    h, c = s
    pre = q.xw[t] + np.dot(h, q.rt)  # Rb is in xw
    hidden = h.shape[-1]
    gates = _sigmoid(pre[:, : 3 * hidden])
    i, o, forget = gates[:, :hidden], gates[:, hidden : 2 * hidden], gates[:, 2 * hidden :]
    c_new = forget * c + i * np.tanh(pre[:, 3 * hidden :])
    return [o * np.tanh(c_new), c_new]


def _lstm_default_steps(
    q: _Weights, states: list[np.ndarray], steps: Iterable[int]
) -> tuple[np.ndarray, list[np.ndarray]]:
    """:func:`_lstm_default_cell` through every step (no sequence ends early), bit for bit,
    with every call writing into buffers made once."""
    h, c = states
    seq, batch, width = q.xw.shape
    hidden = width // 4
    c = np.array(c, copy=True)  # written over at every step
    y = np.empty((seq, batch, hidden), h.dtype)
    g, term = np.empty((batch, width), h.dtype), np.empty((batch, hidden), h.dtype)
    sig, cand = g[:, : 3 * hidden], g[:, 3 * hidden :]
    scratch = np.empty_like(sig)
    i, o, forget = g[:, :hidden], g[:, hidden : 2 * hidden], g[:, 2 * hidden : 3 * hidden]
    rt, xs, ys, sigmoid = q.rt, list(q.xw), list(y), act._sigmoid  # each step's views made once
    dot, add, tanh, multiply = np.dot, np.add, np.tanh, np.multiply
    for t in steps:
        dot(h, rt, out=g)
        add(xs[t], g, out=g)
        sigmoid(sig, out=sig, scratch=scratch)
        tanh(cand, out=cand)
        multiply(forget, c, out=c)
        add(c, multiply(i, cand, out=term), out=c)
        h = multiply(o, tanh(c, out=term), out=ys[t])
    return y, [h, c]


def _gru_cell(
    bound: Activation,
    linear_before_reset: int,
    q: _Weights,
    t: int,
    s: list[np.ndarray],
    f: list[Activation],
) -> list[np.ndarray]:
    """Gates z, r, h; ``linear_before_reset`` applies R_h before the reset gate."""
    (h,) = s
    xz, xr, xh = np.split(q.xw[t], 3, axis=1)
    rz, rr, rh = np.split(q.rt, 3, axis=1)
    bz, br, bh = np.split(q.rb, 3)
    z = f[0](bound(xz + h @ rz + bz))
    reset = f[0](bound(xr + h @ rr + br))
    recurrent = reset * (h @ rh + bh) if linear_before_reset else (reset * h) @ rh + bh
    cand = f[1](bound(xh + recurrent))
    return [(1 - z) * cand + z * h]


Kernel = Callable[..., tuple[np.ndarray, ...]]


def _memoized(kernel: Kernel) -> Callable[[], Kernel]:
    """What makes ``kernel``'s stateful form: the kernel with a memo of its own."""
    return lambda: functools.partial(kernel, weights_memo=WeightMemo())


def _prepared(kernel: Kernel, op_type: str) -> Callable[[], Kernel]:
    """What makes the compiled stateful form of ``kernel`` (RNN, LSTM or GRU)."""
    kind = {"RNN": _RNN, "LSTM": _LSTM, "GRU": _GRU}[op_type]
    return lambda: _NATIVE.Stateful(_Prepared(kernel, kind))


class _Prepared:
    """What a node's stateful compiled form (:class:`onnxflow.native._rnn.Stateful`) calls
    for what its direct call does not take: the kernel, whose first call on float32 weights the
    compiled loop serves also prepares the direct call (:class:`onnxflow.native._rnn.Direct`)
    that later calls on the same weight arrays and inputs that fit go straight to (the same GEMM
    and loop in C, minus the kernel's per-call checks and setup)."""

    def __init__(self, kernel: Kernel, kind: _CellKind) -> None:
        self.kernel, self.kind, self.memo = kernel, kind, WeightMemo()

    def __call__(self, form: Any, inputs: tuple[Any, ...], attrs: dict) -> tuple[np.ndarray, ...]:
        """The node's outputs for ``inputs`` (X, W, R, B, sequence_lens, the initial states
        and, for LSTM, P) and the node's attributes; ``form``'s direct call made anew."""
        outs = self.kernel(*inputs, weights_memo=self.memo, compiled=True, **attrs)
        form.direct = _direct(self.kind, inputs, self.memo, attrs)
        return outs


def _padded(inputs: tuple[Any, ...]) -> tuple[Any, ...]:
    """A recurrent node's eight inputs (X, W, R, B, sequence_lens, initial_h, initial_c, P),
    None for those not given."""
    return (tuple(inputs) + (None,) * 8)[:8]


def _direct(
    kind: _CellKind, inputs: tuple[Any, ...], memo: WeightMemo[list[_Static]], attrs: dict
) -> Any:
    """The direct call (:class:`onnxflow.native._rnn.Direct`) for a node whose kernel just ran
    on ``inputs`` with ``attrs`` and kept its weights in ``memo``: one direction's compiled loop
    over float32 inputs, layout 0, full-length sequences, made once for one set of weight
    arrays; None where the compiled loop would not serve it."""
    direction = attrs.get("direction", "forward")
    given = _padded(inputs)
    if (
        _NATIVE is None
        or attrs.get("layout", 0)
        or direction not in ("forward", "reverse")
        or given[0].dtype != np.float32
        or given[4] is not None  # sequence lengths: the kernel's (the call never fits)
        or memo.kept is None
        or len(memo.kept[1]) != 1
    ):
        return None
    spec = _Recurrence(
        direction,
        attrs.get("hidden_size"),
        0,
        attrs.get("activations"),
        attrs.get("activation_alpha"),
        attrs.get("activation_beta"),
    )
    flag = attrs.get("input_forget", attrs.get("linear_before_reset", 0))
    loop = _loop(kind, spec, attrs.get("clip"), flag)
    static, hidden, batch = memo.kept[1][0], given[2].shape[-1], given[0].shape[1]
    state = [np.zeros((batch, hidden), np.float32)]
    if loop is None or not loop.serves(static, given[0], state, np.zeros(batch)):
        return None
    weights = (given[1], given[2], given[3], given[7])
    backwards, limit = direction == "reverse", _BLAS_BATCH[loop.kind]
    return _NATIVE.Direct(loop.gates[0], static.native, weights, static.wt, backwards, limit)


def recurrent(
    op_type: str, *versions: int, domain: str = "", memo: bool = True
) -> Callable[[Kernel], Kernel]:
    """Register a recurrent kernel (which takes ``compiled``, and ``weights_memo`` when
    ``memo``) with its stateful form (keeping its weights prepared) and its compiled form,
    ``<kernel>_compiled``: the same kernel with its time loop compiled (when
    :mod:`onnxflow.native._rnn` was built)."""

    def register(kernel: Kernel) -> Kernel:
        def form(*args: Any, **attrs: Any) -> tuple[np.ndarray, ...]:
            return kernel(*args, compiled=True, **attrs)

        functools.update_wrapper(form, kernel)
        form.__name__ = form.__qualname__ = f"{kernel.__name__}_compiled"
        native = native_form(
            form if _NATIVE is not None else None,
            stateful=_prepared(kernel, op_type) if memo else None,
        )
        traits = Traits(stateful=_memoized(kernel) if memo else None, native=native)
        return op(op_type, *versions, domain=domain, traits=traits)(kernel)

    return register


@recurrent("RNN", 1, 7, 14, 22)
def rnn(
    x: np.ndarray,
    w: np.ndarray,
    r: np.ndarray,
    b: np.ndarray | None = None,
    sequence_lens: np.ndarray | None = None,
    initial_h: np.ndarray | None = None,
    *,
    activation_alpha: list[float] | None = None,
    activation_beta: list[float] | None = None,
    activations: list[str] | None = None,
    clip: float | None = None,
    direction: str = "forward",
    hidden_size: int | None = None,
    layout: int = 0,
    output_sequence: int = 0,
    weights_memo: WeightMemo[list[_Static]] | None = None,
    compiled: bool = False,
) -> tuple[np.ndarray, ...]:
    """Simple RNN: Ht = f(Xt W^T + Ht-1 R^T + Wb + Rb); returns (Y, Y_h)."""
    spec = _Recurrence(
        direction, hidden_size, layout, activations, activation_alpha, activation_beta
    )
    cell = functools.partial(_rnn_cell, _clipper(clip))
    inputs = (x, w, r, b, sequence_lens, initial_h)
    loop = _loop(_RNN, spec, clip, 0) if compiled else None
    return _run(cell, _RNN, inputs, spec, memo=weights_memo, loop=loop)


@recurrent("LSTM", 1, 7, 14, 22)
def lstm(
    x: np.ndarray,
    w: np.ndarray,
    r: np.ndarray,
    b: np.ndarray | None = None,
    sequence_lens: np.ndarray | None = None,
    initial_h: np.ndarray | None = None,
    initial_c: np.ndarray | None = None,
    p: np.ndarray | None = None,
    *,
    activation_alpha: list[float] | None = None,
    activation_beta: list[float] | None = None,
    activations: list[str] | None = None,
    clip: float | None = None,
    direction: str = "forward",
    hidden_size: int | None = None,
    input_forget: int = 0,
    layout: int = 0,
    output_sequence: int = 0,
    weights_memo: WeightMemo[list[_Static]] | None = None,
    compiled: bool = False,
) -> tuple[np.ndarray, ...]:
    """LSTM with gates i, o, f, c, optional peepholes and coupled input/forget; (Y, Y_h, Y_c)."""
    spec = _Recurrence(
        direction, hidden_size, layout, activations, activation_alpha, activation_beta
    )
    cell: Cell = functools.partial(_lstm_cell, _clipper(clip), input_forget)
    if p is None and clip is None and not input_forget and activations is None:
        cell = _lstm_default_cell
    inputs = (x, w, r, b, sequence_lens, initial_h, initial_c)
    loop = _loop(_LSTM, spec, clip, input_forget) if compiled else None
    return _run(cell, _LSTM, inputs, spec, peepholes=p, memo=weights_memo, loop=loop)


@recurrent("GRU", 1, 3, 7, 14, 22)
def gru(
    x: np.ndarray,
    w: np.ndarray,
    r: np.ndarray,
    b: np.ndarray | None = None,
    sequence_lens: np.ndarray | None = None,
    initial_h: np.ndarray | None = None,
    *,
    activation_alpha: list[float] | None = None,
    activation_beta: list[float] | None = None,
    activations: list[str] | None = None,
    clip: float | None = None,
    direction: str = "forward",
    hidden_size: int | None = None,
    layout: int = 0,
    linear_before_reset: int = 0,
    output_sequence: int = 0,
    weights_memo: WeightMemo[list[_Static]] | None = None,
    compiled: bool = False,
) -> tuple[np.ndarray, ...]:
    """GRU with gates z, r, h; linear_before_reset applies R_h before the reset gate."""
    spec = _Recurrence(
        direction, hidden_size, layout, activations, activation_alpha, activation_beta
    )
    cell = functools.partial(_gru_cell, _clipper(clip), linear_before_reset)
    inputs = (x, w, r, b, sequence_lens, initial_h)
    loop = _loop(_GRU, spec, clip, linear_before_reset) if compiled else None
    return _run(cell, _GRU, inputs, spec, memo=weights_memo, loop=loop)
