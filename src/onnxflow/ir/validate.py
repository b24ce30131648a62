"""Checking a model against the ONNX IR rules a runtime relies on.

Checked here, with messages that name the graph, node, op and opset: opset imports are known,
not newer than supported and not contradictory, and resolve every node's domain; names are
assigned once (SSA), also across scopes (a subgraph may read but never redefine an enclosing
scope's name); every name read is defined before it is read (a name defined by a later node means
the node list is not topologically sorted, and a cycle is named as such); graph outputs are
defined; every stored tensor holds as much data as its dims say, in a known element type.
Everything else the ONNX checker knows is left to ``onnx.checker``.

Of the initializers, only those something reads have their data checked (the others are never
decoded): a model of a million tiny initializers is walked here by a few comprehensions and set
operations, not a million times in Python.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import onnx
import onnx.checker
import onnx.defs
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message
from onnx import GraphProto, ModelProto, NodeProto, TensorProto

from onnxflow.errors import ResourceError, UnsupportedVersionError, ValidationError, where
from onnxflow.ir.domains import normalize_domain
from onnxflow.ir.load import all_tensors, nesting_depth
from onnxflow.ir.walk import names_read, subgraphs, without_unread_initializers
from onnxflow.values import np_dtype

#: Newest IR version whose rules onnxflow follows.
MAX_IR_VERSION = onnx.IR_VERSION
#: The deepest nesting of subgraphs accepted. Serialized, each level is three nested messages
#: (node, attribute, graph) and protobuf's parsers stop at 100: onnx's checker, onnxruntime
#: and a model file saved and read back all fail beyond 31 levels.
MAX_NESTING = 31

#: Checker complaints about models that run correctly and that onnxruntime accepts, and whose
#: substance this module checks itself: a graph input or output declared without a shape (rank
#: unknown); a graph output that is not produced by a node of that graph but is one of its
#: inputs or, in a subgraph, an outer-scope value (defined-ness is checked above); an operator
#: without a schema, which the compiler reports together with every other unsupported one.
_BENIGN_CHECKER_COMPLAINTS = (
    "Field 'shape' of 'type' is required but missing",
    "is not an output of any node in graph",
    "No Op registered for",
)


def validate_model(model: ModelProto, run_checker: bool = True) -> None:
    """Raise ValidationError listing every IR rule the model breaks."""
    _check_nesting(model.graph)
    problems: list[str] = []
    too_new: list[str] = []
    if model.ir_version > MAX_IR_VERSION:
        too_new.append(
            f"model IR version {model.ir_version} is newer than supported ({MAX_IR_VERSION})"
        )
    _check_opset_imports(model.opset_import, "the model", problems, too_new)
    for fn in model.functions:
        _check_opset_imports(fn.opset_import, f"function {fn.name!r}", problems, too_new)
    if too_new:  # first: the rules checked below may have changed in a newer version
        raise UnsupportedVersionError(_join(too_new))
    _check_text(model, "model", problems)
    if problems:  # names that are not text make every other message unreadable
        raise ValidationError(_join(problems))
    opsets = opset_map(model.opset_import)
    for vi in [*model.graph.input, *model.graph.output]:
        _check_value_type(vi.type, f"graph {model.graph.name!r}: {vi.name!r}", problems)
    _check_graph(model.graph, opsets, (), problems)
    for fn in model.functions:
        fn_opsets = opset_map(fn.opset_import)
        for node in fn.node:
            _check_node_domain(node, fn_opsets, f"function {fn.name!r}", problems)
    for tensor in all_tensors(model, initializers=False):
        _check_tensor(tensor, problems)
    if problems:
        raise ValidationError(_join(problems))
    if run_checker:
        run_onnx_checker(without_unread_initializers(model))


def run_onnx_checker(model: ModelProto) -> None:
    """Raise ValidationError when ``onnx.checker`` rejects ``model`` for more than the
    complaints onnxflow checks itself (:data:`_BENIGN_CHECKER_COMPLAINTS`); ResourceError when
    it runs out of memory."""
    try:
        onnx.checker.check_model(model)
    except MemoryError as exc:
        raise ResourceError("out of memory while the ONNX checker checked the model") from exc
    except Exception as exc:  # the checker raises its ValidationError, and others on garbage
        if not any(benign in str(exc) for benign in _BENIGN_CHECKER_COMPLAINTS):
            raise ValidationError(f"the ONNX checker rejects the model: {exc}") from exc


def _check_nesting(graph: GraphProto) -> None:
    """Refuse subgraphs nested deeper than :data:`MAX_NESTING`, naming the depth and the
    outermost nodes of the deepest chain, before anything walks them recursively."""
    depth, chain = nesting_depth(graph)
    if depth > MAX_NESTING:
        shown = " > ".join(chain[:3])
        raise ValidationError(
            f"subgraphs nest {depth} levels deep (from {shown} > ...); at most {MAX_NESTING} "
            "are accepted: protobuf parsers (onnx's checker, onnxruntime, reading a saved "
            "model back) refuse deeper models"
        )


def opset_map(imports: Iterable[onnx.OperatorSetIdProto]) -> dict[str, int]:
    """Return ``{domain: version}`` from opset imports, with ``ai.onnx`` spelled ``""``."""
    return {normalize_domain(o.domain): o.version for o in imports}


def _check_opset_imports(
    imports: Iterable[onnx.OperatorSetIdProto],
    owner: str,
    problems: list[str],
    too_new: list[str],
) -> None:
    """Each domain imported once, at a version >= 1 and not newer than onnx knows."""
    known = onnx.defs.C.schema_version_map()
    seen: dict[str, int] = {}
    for o in imports:
        domain = normalize_domain(o.domain)
        label = domain or "ai.onnx"
        if domain in seen and seen[domain] != o.version:
            problems.append(
                f"{owner} imports domain {label!r} twice, at opsets {seen[domain]} and {o.version}"
            )
        seen[domain] = o.version
        if o.version < 1:
            problems.append(f"{owner} imports opset {o.version} of {label!r}; opsets start at 1")
        elif domain in known and o.version > known[domain][1]:
            too_new.append(
                f"{owner} imports opset {o.version} of {label!r}; newest supported is "
                f"{known[domain][1]}"
            )


def _check_text(message: Message, path: str, problems: list[str], limit: int = 5) -> None:
    """Every string field holds valid UTF-8 (protobuf hands out invalid text as bytes); but
    initializers', whose names are checked with the other rules on names (the rest of their
    text is never read)."""
    for field, value in message.ListFields():
        if len(problems) >= limit:
            return
        items = [value] if isinstance(value, (Message, str, bytes)) else value
        if field.name == "initializer" and isinstance(message, GraphProto):
            continue  # their names: _GraphCheck.define_initializers; nothing reads the rest
        if field.type == FieldDescriptor.TYPE_MESSAGE:
            for k, item in enumerate(items):
                where_ = f"{path}.{field.name}" + (f"[{k}]" if len(items) > 1 else "")
                _check_text(item, where_, problems, limit)
        elif field.type == FieldDescriptor.TYPE_STRING:
            bad = next((v for v in items if isinstance(v, bytes)), None)
            if bad is not None:
                problems.append(f"{path}.{field.name} is not valid UTF-8 text: {bad[:40]!r}")


def _check_value_type(tp: onnx.TypeProto, what: str, problems: list[str]) -> None:
    """Element types of a declared input or output type are ones onnxflow can represent."""
    kind = tp.WhichOneof("value")
    if kind in ("tensor_type", "sparse_tensor_type"):
        elem = getattr(tp, kind).elem_type
        if elem and not _known_elem_type(elem):
            problems.append(f"{what} is declared with unknown element type {elem}")
    elif kind == "sequence_type":
        _check_value_type(tp.sequence_type.elem_type, what, problems)
    elif kind == "optional_type":
        _check_value_type(tp.optional_type.elem_type, what, problems)
    elif kind == "map_type":
        if not _known_elem_type(tp.map_type.key_type):
            problems.append(f"{what} is declared with unknown map key type {tp.map_type.key_type}")
        _check_value_type(tp.map_type.value_type, what, problems)


def _known_elem_type(elem: int) -> bool:
    try:
        np_dtype(elem)
    except (KeyError, ValueError, TypeError):
        return False
    return elem != TensorProto.UNDEFINED


#: Bits per element of the element types stored packed in raw_data.
_PACKED_BITS = {
    TensorProto.INT4: 4,
    TensorProto.UINT4: 4,
    TensorProto.FLOAT4E2M1: 4,
    TensorProto.INT2: 2,
    TensorProto.UINT2: 2,
    **{getattr(TensorProto, n): 6 for n in ("FLOAT6E2M3", "FLOAT6E3M2") if hasattr(TensorProto, n)},
}

_TYPED_FIELDS = (
    "float_data",
    "int32_data",
    "string_data",
    "int64_data",
    "double_data",
    "uint64_data",
)


def _check_tensor(t: TensorProto, problems: list[str]) -> None:
    """The element type is known and the stored data has exactly the element count of dims."""
    problem = tensor_problem(t)
    if problem is not None:
        problems.append(problem)


def tensor_problem(t: TensorProto) -> str | None:
    """What is wrong with a stored tensor, naming it, or None: its element type must be known
    and its data hold exactly the element count of its dims."""
    dims = list(t.dims)
    problem = _header_problem(t, dims)
    if problem is None and t.data_location != TensorProto.EXTERNAL:
        problem = _data_problem(t, math.prod(dims))
    return None if problem is None else f"tensor {t.name!r} (dims {dims}): {problem}"


#: The element types TensorProto defines.
_ELEMENT_TYPES = frozenset(TensorProto.DataType.values()) - {TensorProto.UNDEFINED}


def _header_problem(t: TensorProto, dims: list[int]) -> str | None:
    """What is wrong with the element type, dims or layout of ``t``, if anything."""
    if t.data_type not in _ELEMENT_TYPES:
        return f"unknown element type {t.data_type}"
    if any(d < 0 for d in dims):
        return "negative dimension"
    if t.HasField("segment"):
        return "segmented tensors are not supported"
    return None


def _data_problem(t: TensorProto, n: int) -> str | None:
    """What is wrong with the stored data of ``t``, which must hold ``n`` elements."""
    type_name = TensorProto.DataType.Name(t.data_type).lower()
    if t.data_type == TensorProto.STRING:
        if len(t.string_data) != n:
            return f"{type_name} tensor needs {n} strings, found {len(t.string_data)}"
        if any(_not_utf8(s) for s in t.string_data):
            return "a string element is not valid UTF-8"
        return None
    bits = _PACKED_BITS.get(t.data_type)
    if t.HasField("raw_data"):
        if bits is None:
            want = n * onnx.helper.tensor_dtype_to_np_dtype(t.data_type).itemsize
        else:
            want = -(-n * bits // 8)
        if len(t.raw_data) == want:
            return None
        return (
            f"{type_name} data needs {want} bytes of raw_data for {n} elements, "
            f"found {len(t.raw_data)}"
        )
    return _typed_field_problem(t, n, bits, type_name)


def _typed_field_problem(t: TensorProto, n: int, bits: int | None, type_name: str) -> str | None:
    """What is wrong with data stored in the typed field (``float_data``, ...) of ``t``."""
    field = onnx.helper.tensor_dtype_to_field(t.data_type)
    if t.data_type in (TensorProto.COMPLEX64, TensorProto.COMPLEX128):
        want = 2 * n
    elif bits in (2, 4):
        want = -(-n * bits // 8)
    else:
        want = n
    found = len(getattr(t, field))
    others = [f for f in _TYPED_FIELDS if f != field and len(getattr(t, f))]
    if found == want and not others:
        return None
    extra = f" (and data in {others}, which this type does not use)" if others else ""
    return (
        f"{type_name} data needs {want} entries of {field} for {n} elements, found {found}{extra}"
    )


def _not_utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return True
    return False


def _join(problems: list[str]) -> str:
    if len(problems) == 1:
        return problems[0]
    return f"{len(problems)} problems:\n" + "\n".join(f"  - {p}" for p in problems)


def _check_node_domain(
    node: NodeProto, opsets: dict[str, int], graph: str, problems: list[str]
) -> None:
    domain = normalize_domain(node.domain)
    if domain not in opsets:
        problems.append(
            f"{where(node.name, node.op_type, domain, None)} in {graph}: domain "
            f"{domain or 'ai.onnx'!r} is not imported (opset imports: {sorted(opsets)}); "
            f"add onnx.helper.make_opsetid({domain!r}, <version>) to the model's opset_import "
            "(onnxruntime's convert_generation leaves com.microsoft out)"
        )


#: The scopes a graph sees, innermost first: each enclosing graph's names defined so far.
Scopes = tuple[set[str] | frozenset[str], ...]


def _check_graph(
    graph: GraphProto, opsets: dict[str, int], outer: Scopes, problems: list[str]
) -> None:
    """SSA, scoping and order in ``graph`` and its subgraphs; ``outer`` are the names of its
    enclosing scopes, searched one by one (never copied: checking is linear in the nodes)."""
    check = _GraphCheck(graph, outer, problems)
    check.define_inputs()
    for node in graph.node:
        domain = normalize_domain(node.domain)
        desc = where(node.name, node.op_type, domain, opsets.get(domain))
        _check_node_domain(node, opsets, check.label, problems)
        check.reads(node, desc)
        for sub in subgraphs(node):  # checked now: it sees exactly the names defined so far
            _check_graph(sub, opsets, (check.defined, *outer), problems)
        for name in node.output:
            check.define(name, f"output of {desc}")
    for vi in graph.output:
        if not check.visible(vi.name):
            problems.append(f"{check.label}: graph output {vi.name!r} is never defined")
    cycle = _find_cycle(graph, check.producers)
    if cycle:
        path = " -> ".join(where(n.name, n.op_type, n.domain, None) for n in cycle)
        problems.append(f"{check.label}: the nodes form a cycle: {path}")


class _GraphCheck:
    """The names one graph has defined so far, and the problems found defining and reading."""

    def __init__(self, graph: GraphProto, outer: Scopes, problems: list[str]) -> None:
        self.graph = graph
        self.label = f"graph {graph.name!r}"
        self.outer = outer
        self.problems = problems
        self.defined: set[str] = set()
        self.producers = {o: n for n in graph.node for o in n.output if o}

    def in_outer(self, name: str) -> bool:
        return any(name in scope for scope in self.outer)

    def visible(self, name: str) -> bool:
        return name in self.defined or self.in_outer(name)

    def define(self, name: str, what: str, shadows: bool = False) -> None:
        """Define ``name``; ``shadows``: it may hide an enclosing scope's name (a subgraph's
        inputs are its parameters: the IR asks only node outputs to differ from outer names)."""
        if not name:
            return
        if self.in_outer(name) and not shadows:
            self.problems.append(f"{self.label}: {what} redefines {name!r} from an enclosing scope")
        elif name in self.defined:
            self.problems.append(f"{self.label}: {what} assigns {name!r}, which is already defined")
        self.defined.add(name)

    def define_inputs(self) -> None:
        """Define the graph inputs, the initializers that are not inputs too, and the sparse
        initializers."""
        graph = self.graph
        for vi in graph.input:
            self.define(vi.name, "graph input", shadows=True)
        self.define_initializers({vi.name for vi in graph.input})
        for t in graph.sparse_initializer:
            self.define(t.values.name, "sparse initializer")

    def define_initializers(self, inputs: set[str]) -> None:
        """Define the initializers that are not graph inputs too, and check the data of those
        something reads: by set operations, one name at a time only when one breaks a rule (a
        model may hold a million of them)."""
        names = [t.name for t in self.graph.initializer]
        if any(map(bytes.__instancecheck__, names)):
            k, bad = next((k, n) for k, n in enumerate(names) if isinstance(n, bytes))
            self.problems.append(
                f"{self.label}: initializer {k}'s name is not valid UTF-8 text: {bad[:40]!r}"
            )
            return
        read = names_read(self.graph)
        for k, name in enumerate(names):
            if name in read:
                _check_tensor(self.graph.initializer[k], self.problems)
        unique = set(names)
        unique.discard("")
        fresh = unique - inputs
        clash = len(unique) != len(names) - names.count("") or fresh & self.defined
        if clash or any(fresh & scope for scope in self.outer):
            for name in names:
                if name not in inputs:
                    self.define(name, "initializer")
            return
        self.defined |= fresh

    def reads(self, node: NodeProto, desc: str) -> None:
        """A problem for each input of ``node`` not defined yet: produced later, or never."""
        for name in node.input:
            if not name or self.visible(name):
                continue
            later = self.producers.get(name)
            if later is not None:
                self.problems.append(
                    f"{self.label}: nodes are not topologically sorted: {desc} reads {name!r}, "
                    f"which is produced later by "
                    f"{where(later.name, later.op_type, later.domain, None)}"
                )
            else:
                self.problems.append(f"{self.label}: {desc} reads {name!r}, which is never defined")


def _reads(node: NodeProto) -> set[str]:
    """Names a node depends on: its inputs and the outer names its subgraphs read."""
    names = {n for n in node.input if n}
    for sub in subgraphs(node):
        names |= _free_names(sub)
    return names


def _free_names(graph: GraphProto) -> set[str]:
    """Names a graph reads (node inputs, graph outputs) that it does not define itself."""
    defined = {vi.name for vi in graph.input} | {t.name for t in graph.initializer}
    defined |= {t.values.name for t in graph.sparse_initializer}
    read: set[str] = {vi.name for vi in graph.output}
    for node in graph.node:
        read |= _reads(node)
        defined.update(node.output)
    return read - defined


def _find_cycle(graph: GraphProto, producers: dict[str, NodeProto]) -> list[NodeProto]:
    """Return the nodes of one dependency cycle (first node repeated at the end), or []."""
    index = {id(n): i for i, n in enumerate(graph.node)}
    deps = [
        sorted({index[id(producers[r])] for r in _reads(n) if r in producers}) for n in graph.node
    ]
    state = [0] * len(deps)  # 0 unvisited, 1 on the current path, 2 done
    for start in range(len(deps)):
        if state[start]:
            continue
        path, stack = [start], [iter(deps[start])]
        state[start] = 1
        while stack:
            nxt = next(stack[-1], None)
            if nxt is None:
                state[path.pop()] = 2
                stack.pop()
            elif state[nxt] == 1:
                loop = [*path[path.index(nxt) :], nxt]
                return [graph.node[i] for i in reversed(loop)]
            elif state[nxt] == 0:
                state[nxt] = 1
                path.append(nxt)
                stack.append(iter(deps[nxt]))
    return []
