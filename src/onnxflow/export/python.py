"""Write an ONNX model as a standalone NumPy module (issue 21): ``run(feeds) -> list``.

The graph is exported as written (after loading and validation, before onnxflow's compile
passes), so the module reads like the model its user knows: one line per node, one function
per graph and per Loop, Scan, SequenceMap or If body (nested, so a body reads the outer values
it captures by name). A node whose kernel declares an inline form
(:class:`onnxflow.traits.Traits` ``ufunc``, ``numpy`` or ``passthrough``) becomes it, with
the source of the :mod:`onnxflow.ops.numpy_forms` functions it calls copied into the module;
any other calls onnxflow's kernel through :func:`onnxflow.export.support.kernel` (a one-node
model listing exactly the node's outputs, for a kernel built per node), and the module's
docstring names those ops: a module with none imports nothing of onnxflow. Initializers
and Constant values of more than one element go to a side ``.npz`` beside the module, read
relative to the module's file. A contrib operator holding a subgraph (GreedySearch's decoder)
calls its kernel with the subgraph, stored serialized in the weights.
"""

from __future__ import annotations

import importlib
import inspect
import keyword
import os
import re
from dataclasses import dataclass, field
from importlib.metadata import version
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import GraphProto, ModelProto, NodeProto

from onnxflow.compile.attributes import decode_attribute
from onnxflow.compile.compiler import returns_several
from onnxflow.errors import UnsupportedOperatorError
from onnxflow.ir.domains import normalize_domain
from onnxflow.ir.load import load_model
from onnxflow.ir.names import fresh_name
from onnxflow.ir.validate import validate_model
from onnxflow.ops import numpy_forms
from onnxflow.ops.custom import CustomOp, CustomOps, parse_custom_ops
from onnxflow.ops.registry import REGISTRY, schema_since_version
from onnxflow.runtime.stacking import empty_element
from onnxflow.traits import NumpyCall
from onnxflow.values import tensor_to_array


@dataclass
class _Writer:
    """The module's text being written, its weights and its names."""

    opsets: dict[str, int]
    weights: dict[str, np.ndarray] = field(default_factory=dict)
    names: dict[str, str] = field(default_factory=dict)
    taken: set[str] = field(default_factory=set)
    functions: int = 0
    plain: int = 0
    kernels: int = 0
    #: Some weight has an ml_dtypes type: the module imports ml_dtypes (onnxflow's dependency).
    ml_dtypes: bool = False
    #: Some kernel call takes a subgraph attribute, stored serialized in the weights.
    subgraphs: bool = False
    #: The operators the user gives as Python functions (``custom_ops``), and those called.
    custom: dict[tuple[str, str], CustomOp] = field(default_factory=dict)
    custom_used: dict[str, CustomOp] = field(default_factory=dict)
    #: The ops (``domain.op_type``) of the nodes written as calls into onnxflow's kernels.
    kernel_ops: set[str] = field(default_factory=set)

    def ident(self, name: str) -> str:
        """The Python identifier standing for the ONNX value ``name`` (same name, same one)."""
        if not name:
            return "_"
        if name not in self.names:
            base = re.sub(r"\W", "_", name)
            if not base or base[0].isdigit() or keyword.iskeyword(base) or base in _RESERVED:
                base = f"v_{base}"
            self.names[name] = self.fresh(base)
        return self.names[name]

    def fresh(self, base: str) -> str:
        """A name of the module's own (a function, a loop's rows) that no value's ident takes."""
        return fresh_name(base, self.taken)

    def constant(self, name: str, value: np.ndarray) -> str:
        """An expression for a constant: inline when a scalar, else read from the weights."""
        if value.size == 1 and value.dtype.kind in "biuf" and _numpy_dtype(value.dtype):
            literal = _literal(value.item())
            return f"np.array({literal}, dtype=np.{value.dtype.name}).reshape({value.shape})"
        key = f"w{len(self.weights)}"
        if value.dtype.kind == "O":  # strings: stored as NumPy's unicode, read back as objects
            self.weights[key] = value.astype(str)
            return f'WEIGHTS["{key}"].astype(object)  # {name}'
        if _numpy_dtype(value.dtype):
            self.weights[key] = value
            return f'WEIGHTS["{key}"]  # {name}'
        # ml_dtypes (bfloat16, float8, int4...): stored as their bytes, viewed back on load
        self.weights[key] = value.view(f"u{value.dtype.itemsize}")
        self.ml_dtypes = True
        return f'WEIGHTS["{key}"].view(ml_dtypes.{value.dtype.name})  # {name}'


#: Names the module itself uses: an ONNX value whose name is one of them gets ``v_`` before it.
_RESERVED = {
    *("np", "ml_dtypes", "kernel", "padded", "subgraph", "WEIGHTS", "run", "main_graph", "_"),
    *("Path", "state", "scans", "it", "go", "cond_out", "results", "stack", "value", "xs", "t"),
    *("b", "inits", "batch", "steps", "lens", "finals", "rows", "seqs", "final", "row"),
    *("mapped", "feeds", "float", "bool", "int", "len", "range", "zip", "list", "isinstance"),
    *("custom_ops", "CUSTOM_OPS", "importlib", "KeyError"),
    *(name for name in vars(numpy_forms) if name.startswith("onnx_")),
}


def _numpy_dtype(dtype: np.dtype) -> bool:
    """Whether ``dtype`` is NumPy's own (``np.<name>`` names it), not an ml_dtypes type."""
    return getattr(np, dtype.name, None) is dtype.type


def _literal(value: Any) -> str:
    """Python source for an attribute or scalar value; inf and NaN as ``float("inf")``..."""
    if isinstance(value, float) and not np.isfinite(value):
        return f'float("{value}")'
    if isinstance(value, list):
        return "[" + ", ".join(_literal(v) for v in value) + "]"
    return repr(value)


def export_python(
    model: Any, path: str | os.PathLike[str], custom_ops: CustomOps | None = None
) -> Path:
    """Write ``model`` (a path, bytes or ModelProto) as the NumPy module ``path``.

    Its weights are written beside it as ``path`` with the suffix ``.npz``. Returns the
    module's path. Raises :class:`~onnxflow.errors.UnsupportedOperatorError` naming a node
    that cannot be exported (an op onnxflow has no kernel for, one holding a list of graphs).

    ``custom_ops`` (as a session takes them): the module calls the user's function for each of
    these operators. Its ``run(feeds, custom_ops=None)`` takes the functions by the same keys;
    one not given is imported from where it was defined when it was exported (its module and
    name), which a function of a script run as ``__main__``, a lambda or a closure has not.
    """
    return write_module(model, path, custom_ops)[0]


def write_module(
    model: Any, path: str | os.PathLike[str], custom_ops: CustomOps | None = None
) -> tuple[Path, int, int]:
    """:func:`export_python`, also saying how many nodes it wrote as plain NumPy and how many
    as calls into onnxflow's kernels or the user's functions: ``(path, plain, kernels)``."""
    proto = load_model(model)
    validate_model(proto)
    path = Path(path)
    writer = _Writer({normalize_domain(o.domain): o.version for o in proto.opset_import})
    writer.custom = parse_custom_ops(custom_ops)
    body = _graph_function(writer, proto.graph, "main_graph", "")
    if writer.custom_used:  # nested body functions read it from main_graph's scope
        head = body[0].removesuffix("):")
        body[0] = f"{head}{', ' if not head.endswith('(') else ''}custom_ops):"
    text = _module_text(writer, proto, body, path.with_suffix(".npz").name)
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez(path.with_suffix(".npz"), **writer.weights)
    path.write_text(text)
    return path, writer.plain, writer.kernels


def _module_text(writer: _Writer, proto: ModelProto, body: list[str], npz: str) -> str:
    __version__ = version("onnxflow")
    outputs = ", ".join(writer.ident(o.name) for o in proto.graph.output)
    feeds = [
        f'feeds["{i.name}"]'
        if i.name not in _initializers(proto.graph)
        else f'feeds.get("{i.name}")'
        for i in proto.graph.input
    ]
    if writer.custom_used:
        feeds.append("_custom_ops(custom_ops)")
    head = [
        f'"""NumPy module exported by onnxflow {__version__} from the ONNX graph '
        f"{proto.graph.name!r}.",
        "",
        "Run it with: ``import model; outputs = model.run({input name: array, ...})``.",
        f"The weights are read from {npz} beside this file.",
        *_kernel_note(writer),
        '"""',
        "",
        "from pathlib import Path",
        "",
        "import numpy as np",
    ]
    if writer.ml_dtypes:
        head.insert(head.index("import numpy as np"), "import ml_dtypes")
    support = [
        name for name, used in (("kernel", writer.kernels), ("subgraph", writer.subgraphs)) if used
    ]
    if support:
        head.append(f"from onnxflow.export.support import {', '.join(support)}")
    head += [
        "",
        f'WEIGHTS = dict(np.load(Path(__file__).with_name("{npz}")))',
        *_custom_table(writer),
        "",
        "",
        *_helpers(body),
        *body,
        "",
        "",
        *_run_head(writer),
        f"    {outputs}, = main_graph({', '.join(feeds)})"
        if len(proto.graph.output) == 1
        else f"    {outputs} = main_graph({', '.join(feeds)})",
        f"    return [{outputs}]",
        "",
    ]
    return "\n".join(head)


def _run_head(writer: _Writer) -> list[str]:
    """The first lines of the module's ``run``."""
    if not writer.custom_used:
        return [
            "def run(feeds: dict) -> list:",
            '    """The graph\'s outputs, in graph order, for ``feeds`` (input name -> array)."""',
        ]
    return [
        "def run(feeds: dict, custom_ops: dict | None = None) -> list:",
        '    """The graph\'s outputs, in graph order, for ``feeds`` (input name -> array);',
        '    ``custom_ops`` gives or replaces the functions of CUSTOM_OPS, by the same keys."""',
    ]


def _custom_table(writer: _Writer) -> list[str]:
    """``CUSTOM_OPS`` and ``_custom_ops``: where the module finds the user's functions."""
    if not writer.custom_used:
        return []
    rows = [f"    {key!r}: {_importable(op.fn)!r}," for key, op in writer.custom_used.items()]
    return [
        "",
        "#: The operators this model uses that the user gave as Python functions when it was",
        "#: exported: where each function is imported from (None: run's custom_ops must give it).",
        "CUSTOM_OPS = {",
        *rows,
        "}",
        "",
        "",
        "def _custom_ops(given: dict | None) -> dict:",
        '    """Each custom operator\'s function: given to run, else imported from CUSTOM_OPS."""',
        "    import importlib",
        "",
        "    found = dict(given or {})",
        "    for key, where in CUSTOM_OPS.items():",
        "        if key in found:",
        "            continue",
        "        if where is None:",
        "            raise KeyError(",
        '                f"this model uses the custom operator {key!r}: run it as "',
        '                f"run(feeds, custom_ops={{{key!r}: fn}})"',
        "            )",
        "        found[key] = getattr(importlib.import_module(where[0]), where[1])",
        "    return found",
    ]


def _importable(fn: Any) -> tuple[str, str] | None:
    """``(module, name)`` that imports ``fn`` back, or None (a script's, a lambda, a closure)."""
    module, name = getattr(fn, "__module__", None), getattr(fn, "__name__", None)
    if not module or not name or module == "__main__":
        return None
    try:
        found = getattr(importlib.import_module(module), name, None)
    except Exception:  # a module that does not import again is no place to import it from
        return None
    return (module, name) if found is fn else None


def _kernel_note(writer: _Writer) -> list[str]:
    """The header's lines saying which ops, if any, call onnxflow's kernels."""
    if not writer.kernel_ops:
        return ["Every node is plain NumPy: the module imports nothing of onnxflow."]
    ops = ", ".join(sorted(writer.kernel_ops))
    return ["", "These ops have no NumPy form here and call onnxflow's kernels:", f"{ops}."]


#: A call of one of :mod:`onnxflow.ops.numpy_forms`' functions.
_HELPER_CALL = re.compile(r"\b(onnx_\w+)\(")


def _helpers(body: list[str]) -> list[str]:
    """The source of each :mod:`onnxflow.ops.numpy_forms` function ``body`` calls, and of
    those they call, in the order the module defines them."""
    wanted: set[str] = set()
    todo = set(_HELPER_CALL.findall("\n".join(body)))
    while todo:
        name = todo.pop()
        if name in wanted or not hasattr(numpy_forms, name):
            continue
        wanted.add(name)
        todo |= set(_HELPER_CALL.findall(inspect.getsource(getattr(numpy_forms, name))))
    defined = [n for n in vars(numpy_forms) if n in wanted]
    return [line for n in defined for line in [inspect.getsource(getattr(numpy_forms, n)), ""]]


def _initializers(graph: GraphProto) -> set[str]:
    return {t.name for t in graph.initializer}


def _graph_function(writer: _Writer, graph: GraphProto, fname: str, indent: str) -> list[str]:
    """The lines defining ``graph`` as the function ``fname``."""
    args = [writer.ident(i.name) for i in graph.input]
    lines = [f"{indent}def {fname}({', '.join(args)}):"]
    inner = indent + "    "
    for t in graph.initializer:
        value = writer.constant(t.name, tensor_to_array(t))
        if t.name in {i.name for i in graph.input}:
            ident = writer.ident(t.name)
            lines.append(f"{inner}{ident} = {value} if {ident} is None else {ident}")
        else:
            lines.append(f"{inner}{writer.ident(t.name)} = {value}")
    for node in graph.node:
        lines += _node_lines(writer, node, inner)
    outs = ", ".join(writer.ident(o.name) for o in graph.output)
    lines.append(f"{inner}return {outs}," if len(graph.output) == 1 else f"{inner}return {outs}")
    return lines


def _node_lines(writer: _Writer, node: NodeProto, indent: str) -> list[str]:
    """The lines computing ``node``'s outputs."""
    domain = normalize_domain(node.domain)
    if domain == "" and node.op_type == "Constant":
        return _constant(writer, node, indent)
    if domain == "" and node.op_type in _CONTROL:
        writer.plain += 1
        return _CONTROL[node.op_type](writer, node, indent)
    if (domain, node.op_type) in writer.custom:
        return [f"{indent}{_custom_call(writer, writer.custom[domain, node.op_type], node)}"]
    kernel = _kernel_for(writer, node, domain)
    ins = [writer.ident(i) if i else "None" for i in node.input]
    comment = f"  # {_where(node)}"
    plain = _plain_call(writer, kernel, node, ins)
    if plain is not None:
        writer.plain += 1
        outs = ", ".join(writer.ident(o) if o else "_" for o in node.output)
        return [f"{indent}{outs} = {plain}{comment}"]
    writer.kernels += 1
    writer.kernel_ops.add(f"{domain + '.' if domain else ''}{node.op_type}")
    return [f"{indent}{_kernel_call(writer, kernel, node, domain, ins)}{comment}"]


def _kernel_call(writer: _Writer, kernel: Any, node: NodeProto, domain: str, ins: list[str]) -> str:
    """``outputs = kernel(...)(inputs)``: the node run by onnxflow's kernel for its version."""
    attrs = "".join(
        f", {a.name}={_attr_expr(writer, a)}" for a in node.attribute if not a.ref_attr_name
    )
    opset = writer.opsets.get(domain, 1)
    since = schema_since_version(domain, node.op_type, opset) or kernel.since
    outs = ", ".join(writer.ident(o) if o else "_" for o in node.output)
    if kernel.traits.several or returns_several(node, domain, opset):  # a tuple: take the
        n = len(node.output)  # outputs the node lists, the omitted ones kept omitted
        omitted = tuple(k for k, o in enumerate(node.output) if not o)
        if omitted:
            attrs = f", _omitted={omitted}{attrs}"
        call = f'kernel("{domain}", "{node.op_type}", {since}, _outputs={n}{attrs})'
        return f"{outs}, = {call}({', '.join(ins)})[:{n}]"
    return f'{outs} = kernel("{domain}", "{node.op_type}", {since}{attrs})({", ".join(ins)})'


def _custom_call(writer: _Writer, op: CustomOp, node: NodeProto) -> str:
    """``outputs = custom_ops[key](inputs, attributes)``: the user's function for the node."""
    writer.kernels += 1
    writer.custom_used[op.key] = op
    args = [writer.ident(i) if i else "None" for i in node.input]
    args += [f"{a.name}={_attr_expr(writer, a)}" for a in node.attribute if not a.ref_attr_name]
    outs = ", ".join(writer.ident(o) if o else "_" for o in node.output)
    return f"{outs} = custom_ops[{op.key!r}]({', '.join(args)})  # {_where(node)}"


def _where(node: NodeProto) -> str:
    return f"{node.op_type} {node.name!r}" if node.name else node.op_type


def _kernel_for(writer: _Writer, node: NodeProto, domain: str) -> Any:
    """The registered kernel that runs ``node`` at the model's opset; an error naming the node
    when there is none or the node holds a subgraph the exporter cannot write."""
    opset = writer.opsets.get(domain, 1)
    missing = [(domain, node.op_type, opset)]
    if any(a.type == onnx.AttributeProto.GRAPHS for a in node.attribute):
        raise UnsupportedOperatorError(
            f"{_where(node)}: its list of subgraphs cannot be exported as NumPy yet", missing
        )
    kernel = REGISTRY.lookup(domain, node.op_type, opset)
    if kernel is None:
        raise UnsupportedOperatorError(
            f"{_where(node)} ({domain or 'ai.onnx'} opset {opset}): no kernel", missing
        )
    return kernel


def _plain_call(writer: _Writer, kernel: Any, node: NodeProto, ins: list[str]) -> str | None:
    """The plain NumPy expression for a node whose kernel's traits declare one (a ufunc, a
    NumPy form, or a passthrough of its one input), else None."""
    if callable(kernel.traits.numpy):
        if any(a.ref_attr_name for a in node.attribute) or not node.output[0]:
            return None
        src = {a.name: _attr_expr(writer, a) for a in node.attribute}
        attrs = {a.name: decode_attribute(a) for a in node.attribute}
        outputs = len(node.output)
        return kernel.traits.numpy(NumpyCall(ins, attrs, src, kernel.since, outputs))
    if node.attribute or len(node.output) != 1:
        return None
    if kernel.traits.passthrough and len(ins) == 1 and not kernel.build:
        return ins[0]
    if kernel.traits.ufunc is not None:
        return f"np.{kernel.traits.ufunc.__name__}({', '.join(ins)})"
    if kernel.traits.numpy is not None and "None" not in ins:
        return kernel.traits.numpy.format(*ins)
    return None


def _attr_expr(writer: _Writer, attr: onnx.AttributeProto) -> str:
    if attr.type == onnx.AttributeProto.GRAPH:  # a contrib op's decoder: run by its kernel
        stored = np.frombuffer(attr.g.SerializeToString(), np.uint8)
        writer.subgraphs = True
        return f"subgraph({writer.constant(attr.name, stored).split('  #')[0]})"
    value = decode_attribute(attr)
    if isinstance(value, np.ndarray):
        return writer.constant(attr.name, value).split("  #")[0]
    return _literal(value)


def _constant(writer: _Writer, node: NodeProto, indent: str) -> list[str]:
    """A Constant node: its value inline (a scalar) or from the weights."""
    attr = node.attribute[0]
    value = decode_attribute(attr)
    if attr.name.startswith("value_") and not isinstance(value, np.ndarray):
        dtype = {"value_float": np.float32, "value_floats": np.float32}.get(attr.name, np.int64)
        value = np.array(value, dtype=dtype) if attr.name != "value_string" else np.array(value)
    writer.plain += 1
    return [f"{indent}{writer.ident(node.output[0])} = {writer.constant(node.output[0], value)}"]


def _body(
    writer: _Writer, node: NodeProto, attr: str, indent: str
) -> tuple[str, list[str], GraphProto]:
    """A nested function for the subgraph attribute ``attr`` of ``node``: its name, its lines
    and the subgraph."""
    graph = next(a.g for a in node.attribute if a.name == attr)
    writer.functions += 1
    fname = writer.fresh(
        f"{node.op_type.lower()}_{writer.functions}_{attr.removesuffix('_branch')}"
    )
    return fname, _graph_function(writer, graph, fname, indent), graph


def _targets(writer: _Writer, node: NodeProto) -> list[str]:
    """The names a control-flow node's outputs are assigned to (an unused one for each omitted
    output)."""
    return [writer.ident(o) if o else writer.fresh("_unused") for o in node.output]


def _attributes(node: NodeProto) -> dict[str, Any]:
    """The node's attributes but its body, decoded."""
    return {a.name: decode_attribute(a) for a in node.attribute if a.name != "body"}


def _loop(writer: _Writer, node: NodeProto, indent: str) -> list[str]:
    """Loop as a Python ``while``: trip count and condition as the spec says, scans stacked."""
    fname, lines, graph = _body(writer, node, "body", indent)
    n_states = len(node.input) - 2
    n_scans = len(graph.output) - 1 - n_states
    trip = writer.ident(node.input[0]) if node.input[0] else "None"
    cond = (
        f"bool({writer.ident(node.input[1])})" if len(node.input) > 1 and node.input[1] else "True"
    )
    states = [writer.ident(i) for i in node.input[2:]]
    outs = _targets(writer, node)
    i = indent
    lines += [
        f"{i}# Loop {node.name!r}: trip count {trip}, condition {cond}",
        f"{i}state = [{', '.join(states)}]",
        f"{i}scans = [[] for _ in range({n_scans})]",
        f"{i}it, go = 0, {cond}",
        f"{i}while go and ({trip} is None or it < {trip}):" if trip != "None" else f"{i}while go:",
        f"{i}    cond_out, *results = {fname}(np.array(it, dtype=np.int64), np.array(go), *state)",
        *_carry(i + "    ", n_states),
        f"{i}    it, go = it + 1, bool(cond_out)"
        if cond != "True"
        else f"{i}    it += 1  # no cond input: the body's condition is ignored (the spec's table)",
    ]
    rows = [writer.fresh(f"{o}_rows") for o in outs[n_states:]]
    targets = outs[:n_states] + rows
    lines.append(f"{i}{', '.join(targets) + ',' if targets else '_'} = *state, *scans")
    for o, r, declared in zip(outs[n_states:], rows, graph.output[1 + n_states :], strict=True):
        lines.append(f"{i}{o} = np.stack({r}) if {r} else {_empty(writer, declared)}")
    return lines


def _empty(writer: _Writer, declared: onnx.ValueInfoProto) -> str:
    """What a loop that ran no iteration gives for a scan output: an empty array of the body
    output's declared element type, its static dimensions after the new first one (0 for a
    dimension not known), as onnxflow's loops do."""
    dims, dtype = empty_element(declared)
    return f"np.empty({(0, *dims)}, dtype={_dtype(writer, dtype)})"


def _dtype(writer: _Writer, dtype: np.dtype) -> str:
    """The Python expression for ``dtype``."""
    if dtype.kind == "O":
        return "object"
    if _numpy_dtype(dtype):
        return f"np.{dtype.name}"
    writer.ml_dtypes = True
    return f"ml_dtypes.{dtype.name}"


def _if(writer: _Writer, node: NodeProto, indent: str) -> list[str]:
    """If as a Python ``if`` calling one branch function or the other."""
    then_name, then_lines, _ = _body(writer, node, "then_branch", indent)
    else_name, else_lines, _ = _body(writer, node, "else_branch", indent)
    outs = ", ".join(writer.ident(o) if o else "_" for o in node.output)
    target = f"{outs}," if len(node.output) == 1 else outs
    cond = writer.ident(node.input[0])
    call = f"{then_name}() if bool({cond}) else {else_name}()"
    return [*then_lines, *else_lines, f"{indent}{target} = {call}  # If {node.name!r}"]


def _carry(i: str, n_states: int) -> list[str]:
    """A loop step's last lines: its first ``n_states`` results carried on, the rest stacked."""
    return [
        f"{i}state = list(results[:{n_states}])",
        f"{i}for stack, value in zip(scans, results[{n_states}:], strict=True):",
        f"{i}    stack.append(value)",
    ]


def _scan(writer: _Writer, node: NodeProto, indent: str) -> list[str]:
    """Scan (opset 9 on) as a Python ``for`` over the scan inputs' axes and directions, the
    scan outputs stacked along theirs."""
    if writer.opsets.get("", 1) < 9:
        return _scan8(writer, node, indent)
    fname, lines, graph = _body(writer, node, "body", indent)
    attrs = _attributes(node)
    m = attrs["num_scan_inputs"]
    n_states = len(node.input) - m
    k = len(graph.output) - n_states
    in_axes = attrs.get("scan_input_axes", [0] * m)
    in_dirs = attrs.get("scan_input_directions", [0] * m)
    out_axes = attrs.get("scan_output_axes", [0] * k)
    out_dirs = attrs.get("scan_output_directions", [0] * k)
    xs = [
        (f"np.moveaxis({writer.ident(x)}, {a}, 0)" if a else writer.ident(x)) + ("[::-1]" * d)
        for x, a, d in zip(node.input[n_states:], in_axes, in_dirs, strict=True)
    ]
    outs = _targets(writer, node)
    i = indent
    lines += [
        f"{i}# Scan {node.name!r}: {m} scan input(s), {n_states} state(s), {k} scan output(s)",
        f"{i}state = [{', '.join(writer.ident(x) for x in node.input[:n_states])}]",
        f"{i}xs = [{', '.join(xs)}]",
        f"{i}scans = [[] for _ in range({k})]",
        f"{i}for t in range(xs[0].shape[0]):",
        f"{i}    results = {fname}(*state, *(x[t] for x in xs))",
        *_carry(i + "    ", n_states),
    ]
    if n_states:
        lines.append(f"{i}{', '.join(outs[:n_states])}, = state")
    declared = graph.output[n_states:]
    for j, (o, a, d) in enumerate(zip(outs[n_states:], out_axes, out_dirs, strict=True)):
        empty = _empty(writer, declared[j])
        stacked = f"(np.stack(scans[{j}]{'[::-1]' * d}) if scans[{j}] else {empty})"
        lines.append(f"{i}{o} = np.moveaxis({stacked}, 0, {a})" if a else f"{i}{o} = {stacked}")
    return lines


def _scan8(writer: _Writer, node: NodeProto, indent: str) -> list[str]:
    """Scan 8 as Python ``for`` loops: over the batch (axis 0), then over each entry's first
    ``sequence_lens[b]`` steps (axis 1, reversed where ``directions`` says); final states
    stacked per batch entry, scan outputs padded with zeros to the longest sequence."""
    fname, lines, graph = _body(writer, node, "body", indent)
    attrs = _attributes(node)
    m = attrs["num_scan_inputs"]
    n_states = len(node.input) - 1 - m
    k = len(graph.output) - n_states
    dirs = attrs.get("directions") or [0] * m
    lens = writer.ident(node.input[0]) if node.input[0] else "None"
    inits = [writer.ident(x) for x in node.input[1 : 1 + n_states]]
    xs = [writer.ident(x) for x in node.input[1 + n_states :]]
    outs = _targets(writer, node)
    i = indent
    seqs = [f"{x}[b, : lens[b]]" + ("[::-1]" if d else "") for x, d in zip(xs, dirs, strict=True)]
    lines += [
        f"{i}# Scan {node.name!r} (opset 8): batch axis 0, sequence axis 1, {m} scan input(s)",
        f"{i}inits = [{', '.join(inits)}]",
        f"{i}batch, steps = {xs[0]}.shape[:2]",
        f"{i}lens = [steps] * batch if {lens} is None else [int(v) for v in {lens}]",
        f"{i}finals, rows = [[] for _ in inits], [[] for _ in range({k})]",
        f"{i}for b in range(batch):",
        f"{i}    state = [s[b] for s in inits]",
        f"{i}    seqs = [{', '.join(seqs)}]",
        f"{i}    scans = [[] for _ in range({k})]",
        f"{i}    for t in range(lens[b]):",
        f"{i}        results = {fname}(*state, *(x[t] for x in seqs))",
        *_carry(i + "        ", n_states),
        f"{i}    for final, value in zip(finals, state, strict=True):",
        f"{i}        final.append(value)",
        f"{i}    for row, stack in zip(rows, scans, strict=True):",
        f"{i}        row.append(stack)",
    ]
    for j, o in enumerate(outs[:n_states]):
        lines.append(f"{i}{o} = np.stack(finals[{j}]) if finals[{j}] else inits[{j}]")
    for j, o in enumerate(outs[n_states:]):
        empty = _empty(writer, graph.output[n_states + j])
        lines.append(f"{i}{o} = onnx_padded(rows[{j}], steps, {empty})")
    return lines


def _sequence_map(writer: _Writer, node: NodeProto, indent: str) -> list[str]:
    """SequenceMap as a Python ``for`` over the first input's elements: each further input is
    a sequence (its element taken) or a tensor (passed every time); outputs are lists."""
    fname, lines, _ = _body(writer, node, "body", indent)
    ins = [writer.ident(x) for x in node.input]
    outs = _targets(writer, node)
    i = indent
    args = ", ".join(f"{x}[t] if isinstance({x}, list) else {x}" for x in ins[1:])
    return [
        *lines,
        f"{i}# SequenceMap {node.name!r}: the body once per element of {ins[0]}",
        f"{i}mapped = [[] for _ in range({len(outs)})]",
        f"{i}for t in range(len({ins[0]})):",
        f"{i}    results = {fname}({ins[0]}[t]{', ' + args if args else ''})",
        f"{i}    for stack, value in zip(mapped, results, strict=True):",
        f"{i}        stack.append(value)",
        f"{i}{', '.join(outs)}, = mapped",
    ]


_CONTROL = {"Loop": _loop, "If": _if, "Scan": _scan, "SequenceMap": _sequence_map}
