"""What the fusions of written-out chains read (:mod:`.fuse_norms`, :mod:`.fuse_matmul_bias`):
a graph's constants by value, each value's one reader, and the check that a matched chain's
inner values are read by the chain alone."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence

import numpy as np
from onnx import NodeProto, TensorProto, helper, numpy_helper

from onnxflow.compile.passes.graph_view import GraphView
from onnxflow.ir.domains import is_onnx_op

_F32 = np.dtype(np.float32)


class Chains:
    """One graph as a fusion walks it: who makes and who reads each value, and the values of
    its constants (initializers the caller cannot override, Constant nodes' outputs, and
    Identity nodes of either, as torch.onnx writes parameters equal to others), read
    the first time a pattern asks for one."""

    def __init__(self, view: GraphView) -> None:
        self.view = view
        self.reads: Counter[str] = view.reads()
        self.producer = {o: n for n in view.nodes for o in n.output if o}
        self.readers: dict[str, list[NodeProto]] = {}
        for node in view.nodes:
            for name in dict.fromkeys(node.input):
                if name:
                    self.readers.setdefault(name, []).append(node)
        fixed = view.constants()
        self._inits = {t.name: t for t in view.graph.initializer if t.name in fixed}
        self._values: dict[str, np.ndarray | None] = {}

    def const(self, name: str) -> np.ndarray | None:
        """The value of ``name`` when it is a constant, else None."""
        if name not in self._values:
            self._values[name] = self._read(name)
        return self._values[name]

    def _read(self, name: str) -> np.ndarray | None:
        if name in self._inits:
            return numpy_helper.to_array(self._inits[name])
        node = self.producer.get(name)
        if node is not None and is_onnx_op(node, "Identity"):  # torch's shared parameters
            return self.const(node.input[0])
        if node is None or not is_onnx_op(node, "Constant") or len(node.attribute) != 1:
            return None
        attr = node.attribute[0]
        if attr.name == "value":
            return numpy_helper.to_array(attr.t)
        if attr.name == "value_float":
            return np.array(attr.f, np.float32)
        return None

    def f32(self, name: str, max_ndim: int = 1) -> np.ndarray | None:
        """The value of ``name`` when it is a float32 constant of at most ``max_ndim`` dims."""
        value = self.const(name)
        if value is None or value.dtype != _F32 or value.ndim > max_ndim:
            return None
        return value

    def scalar(self, name: str, expected: float | None = None) -> float | None:
        """The one float32 value of constant ``name`` (equal to ``expected`` when given)."""
        value = self.f32(name)
        if value is None or value.size != 1:
            return None
        found = float(value.reshape(()))
        return found if expected is None or found == expected else None

    def sole(self, name: str, op_type: str) -> NodeProto | None:
        """The one node reading ``name``, when it is the standard op ``op_type``."""
        readers = self.readers.get(name, [])
        if len(readers) != 1 or not is_onnx_op(readers[0], op_type):
            return None
        return readers[0]

    def other(self, node: NodeProto, name: str) -> str | None:
        """The other input of binary ``node``, one of whose inputs is ``name``."""
        ins = list(node.input)
        if len(ins) != 2 or name not in ins:
            return None
        return ins[1] if ins[0] == name else ins[0]

    def declared_other(self, name: str) -> bool:
        """Whether the graph declares ``name`` a tensor of some type other than float32."""
        graph = self.view.graph
        for vi in (*graph.input, *graph.value_info, *graph.output):
            if vi.name == name and vi.type.HasField("tensor_type"):
                elem = vi.type.tensor_type.elem_type
                return elem not in (TensorProto.UNDEFINED, TensorProto.FLOAT)
        return False

    def closed(self, chain: Sequence[NodeProto]) -> bool:
        """Whether every value ``chain`` makes but its last node's output is read by the chain
        alone (no other node, subgraph or graph output)."""
        inside = Counter(name for n in chain for name in n.input)
        return all(self.reads[o] == inside[o] for n in chain[:-1] for o in n.output)


def body(chain: Sequence[NodeProto], inputs: Sequence[str], name: str) -> object:
    """The graph of ``chain`` reading ``inputs`` (types left to the run) and giving the last
    node's output: a fused node's ``body``, which its NumPy form runs as written."""
    return helper.make_graph(
        list(chain),
        name,
        [helper.make_tensor_value_info(i, TensorProto.UNDEFINED, None) for i in inputs],
        [helper.make_empty_tensor_value_info(chain[-1].output[0])],
    )


def outside_inputs(chain: Sequence[NodeProto], first: Sequence[str]) -> list[str]:
    """``first``, then the other values ``chain`` reads that it does not make, in order."""
    made = {o for n in chain for o in n.output}
    found = dict.fromkeys(first)
    found.update((i, None) for n in chain for i in n.input if i and i not in made)
    return list(found)


#: A chain a fusion found, in graph order, and the node that replaces it.
Found = tuple[list[NodeProto], NodeProto]


def replace_chains(
    view: GraphView, find: Callable[[Chains, NodeProto], Found | None]
) -> list[NodeProto] | None:
    """The nodes of ``view`` with each chain ``find`` makes of a node (its chain and the node
    replacing it) as that node, in the place of the chain's last node; a chain sharing a node
    with one found before it is left as written. None when ``find`` finds none."""
    walk = Chains(view)
    fused: dict[int, NodeProto] = {}
    dropped: set[int] = set()
    for node in view.nodes:
        if id(node) in dropped:
            continue
        made = find(walk, node)
        if made is None or any(id(n) in dropped or id(n) in fused for n in made[0]):
            continue
        chain, fused_node = made
        fused[id(chain[-1])] = fused_node
        dropped.update(id(n) for n in chain[:-1])
    if not fused:
        return None
    return [fused.get(id(n), n) for n in view.nodes if id(n) not in dropped]
