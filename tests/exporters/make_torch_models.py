"""Export the PyTorch models of test_torch_models.py into tests/exporters/data/.

Each case becomes ``<name>.onnx`` and ``<name>.npz``; the archive holds one or more input sets
(``in<k>_<i>``: input i of set k, in graph-input order) and PyTorch's own outputs for each
(``out<k>_<j>``). The first input set is the one the model was exported with; the others take
the paths the first does not (the other branch, more or fewer iterations, another length).

Run from the repository root with torch 2.13 and onnxscript installed::

    python3 tests/exporters/make_torch_models.py
"""

from __future__ import annotations

import inspect
import io
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx
import torch
from torch._higher_order_ops import scan

DATA = Path(__file__).parent / "data"


class CondLinear(torch.nn.Module):
    """torch.cond on the sign of the input's sum; each branch uses its own weights."""

    def __init__(self) -> None:
        super().__init__()
        self.pos = torch.nn.Linear(4, 3)
        self.neg = torch.nn.Linear(4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        def when_pos(x: torch.Tensor) -> torch.Tensor:
            return torch.relu(self.pos(x)) * 2.0

        def when_neg(x: torch.Tensor) -> torch.Tensor:
            return torch.tanh(self.neg(x)) - 1.0

        return torch.cond(x.sum() > 0, when_pos, when_neg, (x,))


class NestedCond(torch.nn.Module):
    """A torch.cond inside a branch of another, with two outputs."""

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        def inner_true(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            return x + y, x * y

        def inner_false(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            return x - y, x / (y.abs() + 1.0)

        def outer_true(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            return torch.cond(y.mean() > 0, inner_true, inner_false, (x, y))

        def outer_false(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            return x.exp(), y.sin()

        return torch.cond(x.max() > 0.5, outer_true, outer_false, (x, y))


class WhileDoubling(torch.nn.Module):
    """torch.while_loop: double x (plus a bias captured from the module) until it is large."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("bias", torch.tensor([0.5, -0.25, 1.0]))

    def forward(self, i: torch.Tensor, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        def cond_fn(i: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
            return x.abs().sum() < 100.0

        def body_fn(i: torch.Tensor, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            return i + 1, x * 2.0 + self.bias

        return torch.while_loop(cond_fn, body_fn, (i, x))


class WhileCounter(torch.nn.Module):
    """torch.while_loop counting to a bound given as an input; a second carry sums a series."""

    def forward(
        self, n: torch.Tensor, i: torch.Tensor, acc: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        def cond_fn(i: torch.Tensor, acc: torch.Tensor) -> torch.Tensor:
            return i < n

        def body_fn(i: torch.Tensor, acc: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            return i + 1, acc + acc.mean() / (i.float() + 1.0)

        return torch.while_loop(cond_fn, body_fn, (i, acc))


class ScanCumulative(torch.nn.Module):
    """scan: a running sum over the rows with a stacked output of the running sums' doubles."""

    def forward(self, init: torch.Tensor, xs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        def step(carry: torch.Tensor, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            new = carry + x
            return new, new * 2.0

        return scan(step, init, xs)


class ScanRnnCell(torch.nn.Module):
    """scan as an Elman RNN over time, reversed, with weights captured from the module."""

    def __init__(self) -> None:
        super().__init__()
        self.ih = torch.nn.Linear(3, 5)
        self.hh = torch.nn.Linear(5, 5, bias=False)

    def forward(self, h0: torch.Tensor, xs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        def step(h: torch.Tensor, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            h = torch.tanh(self.ih(x) + self.hh(h))
            return h, h.clone()

        return scan(step, h0, xs, dim=1, reverse=True)


class ScanTwoCarries(torch.nn.Module):
    """scan with two carries, two scanned inputs and two stacked outputs."""

    def forward(
        self, a: torch.Tensor, b: torch.Tensor, xs: torch.Tensor, ys: torch.Tensor
    ) -> tuple[torch.Tensor, ...]:
        def step(
            carry: tuple[torch.Tensor, torch.Tensor], row: tuple[torch.Tensor, torch.Tensor]
        ) -> tuple[tuple[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]:
            a, b = carry
            x, y = row
            a = a * 0.9 + x
            b = torch.maximum(b, y.sum())
            return (a, b), (a + b, y.mean())

        (a, b), (sums, means) = scan(step, (a, b), (xs, ys))
        return a, b, sums, means


class CondInScan(torch.nn.Module):
    """A torch.cond inside the scan's step: add or subtract each row by the sign of its sum.

    (A torch.cond inside a torch.while_loop body does not export in torch 2.13: the exporter's
    inliner fails on the 'pkg.torch.__subgraph__' function's opset.)
    """

    def forward(self, h: torch.Tensor, xs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        def step(h: torch.Tensor, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            h = torch.cond(x.sum() > 0, lambda h, x: h + x, lambda h, x: h - x, (h, x))
            return h, h.clone()

        return scan(step, h, xs)


@torch.jit.script
def _collatz_steps(x: torch.Tensor, limit: int) -> torch.Tensor:
    """Count the steps each element of the (positive integer) tensor needs to reach 1."""
    steps = torch.zeros_like(x)
    for _ in range(limit):
        if bool((x == 1).all()):
            break
        active = x != 1
        x = torch.where(active, torch.where(x % 2 == 0, x // 2, 3 * x + 1), x)
        steps = steps + active.to(steps.dtype)
    return steps


@torch.jit.script
def _newton_sqrt(a: torch.Tensor) -> torch.Tensor:
    """Newton's square root, iterating while any element still moves by more than 1e-6."""
    y = torch.ones_like(a)
    delta = torch.ones_like(a)
    while bool(delta.abs().max() > 1e-6):
        new = 0.5 * (y + a / y)
        delta = new - y
        y = new
    return y


@torch.jit.script
def _running_products(a: torch.Tensor) -> torch.Tensor:
    """The products of a's first 1, 2, ... elements, collected in a list and stacked."""
    products: list[torch.Tensor] = []
    acc = torch.ones_like(a[0])
    for i in range(a.size(0)):
        acc = acc * a[i]
        products.append(acc)
    return torch.stack(products)


class ScriptedLoops(torch.nn.Module):
    """Loops written with torch.jit.script: a for with break, a while, a for building a list."""

    def forward(
        self, n: torch.Tensor, a: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return _collatz_steps(n, 200), _newton_sqrt(a), _running_products(a)


class LstmModel(torch.nn.Module):
    """Two-layer bidirectional LSTM, batch first, with initial states."""

    def __init__(self) -> None:
        super().__init__()
        self.lstm = torch.nn.LSTM(4, 6, num_layers=2, bidirectional=True, batch_first=True)

    def forward(
        self, x: torch.Tensor, h0: torch.Tensor, c0: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        y, (h, c) = self.lstm(x, (h0, c0))
        return y, h, c


class GruModel(torch.nn.Module):
    """Two-layer GRU, sequence first, with no initial state."""

    def __init__(self) -> None:
        super().__init__()
        self.gru = torch.nn.GRU(4, 5, num_layers=2)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.gru(x)


class SmallTransformer(torch.nn.Module):
    """Two TransformerEncoder layers, d_model 16, with a key-padding mask."""

    def __init__(self) -> None:
        super().__init__()
        layer = torch.nn.TransformerEncoderLayer(
            16, nhead=4, dim_feedforward=32, dropout=0.0, batch_first=True
        )
        self.encoder = torch.nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.encoder(x)


@dataclass
class Case:
    """One model exported one way: the factory, its input sets and how to export it."""

    name: str
    make: Callable[[], torch.nn.Module]
    inputs: list[tuple[torch.Tensor, ...]]
    dynamo: bool
    opset: int | None
    dynamic: dict[str, dict[int, str]] = field(default_factory=dict)


def _randn(*shape: int, seed: int) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


LSTM_INPUTS = [
    (_randn(2, 5, 4, seed=8), _randn(4, 2, 6, seed=9), _randn(4, 2, 6, seed=10)),
    (_randn(3, 2, 4, seed=11), _randn(4, 3, 6, seed=12), _randn(4, 3, 6, seed=13)),
]
LSTM_INPUTS_SAME_LENGTH = [
    LSTM_INPUTS[0],
    (_randn(3, 5, 4, seed=11), _randn(4, 3, 6, seed=12), _randn(4, 3, 6, seed=13)),
]
LSTM_DYNAMIC = {"x": {0: "batch", 1: "seq"}, "h0": {1: "batch"}, "c0": {1: "batch"}}
GRU_DYNAMIC = {"x": {0: "seq", 1: "batch"}}
TRANSFORMER_DYNAMIC = {"x": {0: "batch", 1: "seq"}}

# name, module, input sets, dynamic axes, opsets (None: the exporter's default).
# Older opsets: the dynamo exporter writes opset 18 and converts down; the conversion of
# ReduceMax/ReduceMean (noop_with_empty_axes) inside If/Loop/Scan bodies leaves them
# invalid (onnx.checker rejects them), so those cases take 18.
# Sequence lengths other than the example's: the dynamo GRU and the TorchScript
# TransformerEncoder bake the example's length into a Reshape (onnxruntime fails the same way),
# and the dynamo LSTM converted to opset 17 declares it as a fixed dimension, so their second
# input set keeps the length and changes the batch.
DYNAMO_MODELS = [
    (
        "cond_linear",
        CondLinear,
        [(_randn(2, 4, seed=1).abs(),), (-_randn(3, 4, seed=2).abs(),)],
        {"x": {0: "batch"}},
        (None, 17),
    ),
    (
        "nested_cond",
        NestedCond,
        [
            (torch.tensor([0.9, 0.1]), torch.tensor([0.3, 0.4])),
            (torch.tensor([0.9, 0.1]), torch.tensor([-0.3, -0.4])),
            (torch.tensor([0.2, 0.1]), torch.tensor([0.3, 0.4])),
        ],
        {},
        (None, 18),
    ),
    (
        "while_doubling",
        WhileDoubling,
        [
            (torch.tensor(0), torch.tensor([0.1, 0.2, 0.3])),
            (torch.tensor(7), torch.tensor([60.0, -50.0, 1.0])),
            (torch.tensor(0), torch.tensor([20.0, 0.0, 0.0])),
        ],
        {},
        (None, 17),
    ),
    (
        "while_counter",
        WhileCounter,
        [
            (torch.tensor(5), torch.tensor(0), torch.ones(2, 3)),
            (torch.tensor(0), torch.tensor(0), torch.ones(2, 3)),
            (torch.tensor(9), torch.tensor(2), _randn(2, 3, seed=3)),
        ],
        {},
        (None, 18),
    ),
    (
        "scan_cumulative",
        ScanCumulative,
        [
            (torch.zeros(4), _randn(5, 4, seed=4)),
            (torch.ones(4), _randn(2, 4, seed=5)),
            (torch.ones(4), _randn(1, 4, seed=5)),
        ],
        {"xs": {0: "length"}},
        (None, 17),
    ),
    (
        "scan_rnn_cell",
        ScanRnnCell,
        [
            (_randn(2, 5, seed=6), _randn(2, 7, 3, seed=7)),
            (_randn(3, 5, seed=8), _randn(3, 4, 3, seed=9)),
        ],
        {"h0": {0: "batch"}, "xs": {0: "batch", 1: "time"}},
        (None, 17),
    ),
    (
        "scan_two_carries",
        ScanTwoCarries,
        [(torch.zeros(3), torch.tensor(0.0), _randn(4, 3, seed=20), _randn(4, 2, seed=21))],
        {},
        (None, 18),
    ),
    (
        "cond_in_scan",
        CondInScan,
        [(torch.zeros(3), _randn(6, 3, seed=22)), (torch.ones(3), _randn(3, 3, seed=23))],
        {"xs": {0: "length"}},
        (None, 17),
    ),
    ("lstm", LstmModel, LSTM_INPUTS, LSTM_DYNAMIC, (None,)),
    ("lstm", LstmModel, LSTM_INPUTS_SAME_LENGTH, LSTM_DYNAMIC, (17,)),
    (
        "gru",
        GruModel,
        [(_randn(5, 2, 4, seed=14),), (_randn(5, 1, 4, seed=15),)],
        GRU_DYNAMIC,
        (None, 17),
    ),
    (
        "transformer",
        SmallTransformer,
        [(_randn(2, 5, 16, seed=16),), (_randn(1, 3, 16, seed=17),)],
        TRANSFORMER_DYNAMIC,
        (None, 17),
    ),
]
TORCHSCRIPT_MODELS = [
    (
        "scripted_loops",
        ScriptedLoops,
        [
            (torch.tensor([1, 6, 7, 27]), torch.tensor([2.0, 9.0, 0.25])),
            (torch.tensor([1, 1]), torch.tensor([1.0])),
        ],
        {"n": {0: "n"}, "a": {0: "a"}},
        (None, 13),
    ),
    ("lstm", LstmModel, LSTM_INPUTS, LSTM_DYNAMIC, (None, 13)),
    (
        "gru",
        GruModel,
        [(_randn(5, 2, 4, seed=14),), (_randn(3, 1, 4, seed=15),)],
        GRU_DYNAMIC,
        (None, 13),
    ),
    # scaled_dot_product_attention exports from opset 14 on.
    (
        "transformer",
        SmallTransformer,
        [(_randn(2, 5, 16, seed=16),), (_randn(1, 5, 16, seed=17),)],
        TRANSFORMER_DYNAMIC,
        (None, 14),
    ),
]


def _cases() -> list[Case]:
    cases = []
    for exporter, dynamo, models in (
        ("dynamo", True, DYNAMO_MODELS),
        ("torchscript", False, TORCHSCRIPT_MODELS),
    ):
        for name, make, inputs, dynamic, opsets in models:
            for opset in opsets:
                suffix = "default" if opset is None else f"opset{opset}"
                cases.append(
                    Case(f"{name}_{exporter}_{suffix}", make, inputs, dynamo, opset, dynamic)
                )
    return cases


def _export(case: Case, module: torch.nn.Module) -> onnx.ModelProto:
    args = case.inputs[0]
    names = list(inspect.signature(module.forward).parameters)
    if case.dynamo:
        dims = {d: torch.export.Dim(d) for axes in case.dynamic.values() for d in axes.values()}
        shapes = {
            arg: {axis: dims[d] for axis, d in case.dynamic.get(arg, {}).items()} or None
            for arg in names
        }
        program = torch.onnx.export(
            module,
            args,
            dynamo=True,
            opset_version=case.opset,
            dynamic_shapes=shapes if case.dynamic else None,
        )
        return program.model_proto
    buffer = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            module,
            args,
            buffer,
            dynamo=False,
            opset_version=case.opset,
            input_names=names,
            dynamic_axes=case.dynamic,
        )
    return onnx.load_from_string(buffer.getvalue())


def export_case(case: Case) -> None:
    """Export one case and store its model, input sets and PyTorch's outputs."""
    torch.manual_seed(0)
    module = case.make().eval()
    model = _export(case, module)
    onnx.checker.check_model(model, full_check=True)
    arrays: dict[str, np.ndarray] = {}
    with torch.no_grad():
        for k, args in enumerate(case.inputs):
            outputs = module(*args)
            outputs = outputs if isinstance(outputs, tuple) else (outputs,)
            for i, x in enumerate(args):
                arrays[f"in{k}_{i}"] = x.numpy()
            for j, y in enumerate(outputs):
                arrays[f"out{k}_{j}"] = y.numpy()
    onnx.save(model, DATA / f"{case.name}.onnx")
    np.savez(DATA / f"{case.name}.npz", **arrays)


def main() -> None:
    DATA.mkdir(exist_ok=True)
    failed = []
    for case in _cases():
        try:
            export_case(case)
        except Exception as error:
            failed.append(case.name)
            print(f"{case.name}: export failed: {type(error).__name__}: {error}")
        else:
            print(f"{case.name}: exported")
    if failed:
        raise SystemExit(f"{len(failed)} cases failed to export: {', '.join(failed)}")


if __name__ == "__main__":
    main()
