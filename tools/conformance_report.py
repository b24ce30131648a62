"""Run the ONNX backend node suite through onnxflow and report passed/total per kernel family.

    python tools/conformance_report.py            # print the table and the failing cases
    python tools/conformance_report.py --readme   # also rewrite the table in README.md

A case belongs to the operator of its single node (an ``_expanded`` case to that of the case it
expands), else to the operator its name starts with (``test_reduce_sum_...`` -> ReduceSum), and
to the family module that registers that operator's kernel (``ops/reduction.py`` -> reduction).
"""

from __future__ import annotations

import argparse
import re
import sys
import warnings
from collections import defaultdict
from pathlib import Path

import onnx.defs
from onnx.backend.test.loader import load_model_tests

import onnxflow
from onnxflow.backend import assert_similar_outputs
from onnxflow.ops import REGISTRY, load_all
from onnxflow.values import proto_to_value

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "conformance"))
from expected_failures import applies_to_installed_onnx, read_expected_failures

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
START, END = "<!-- conformance:start -->", "<!-- conformance:end -->"


def _snake(name: str) -> str:
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", name).lower()


def _op_index() -> dict[str, tuple[str, str]]:
    index = {}
    for schema in onnx.defs.get_all_schemas_with_history():
        index[_snake(schema.name)] = (schema.domain, schema.name)
        index[schema.name.lower()] = (schema.domain, schema.name)
    index.update(
        {
            "basic_conv": ("", "Conv"),
            "conv_with": ("", "Conv"),
            "batchnorm": ("", "BatchNormalization"),
            "instancenorm": ("", "InstanceNormalization"),
            "layer_normalization": ("", "LayerNormalization"),
        }
    )
    return index


def case_op(case: str, index: dict[str, tuple[str, str]]) -> tuple[str, str] | None:
    """Return (domain, op) a node-suite case tests, by the longest op name its name starts with."""
    body = case.removeprefix("test_").removeprefix("ai_onnx_ml_")
    best = None
    for snake, op in index.items():
        if (body == snake or body.startswith(snake + "_") or body.startswith(snake)) and (
            best is None or len(snake) > len(best[0])
        ):
            best = (snake, op)
    return best[1] if best else None


def family_of(op: tuple[str, str] | None) -> str:
    """The family module registering ``op``'s kernel, or where it is missing."""
    if op is None:
        return "other"
    domain, name = op
    kernels = [k for k in REGISTRY.all() if k.op_type == name and k.domain == (domain or "")]
    if not kernels:
        return "function expansion" if _has_function(domain, name) else "not implemented"
    newest = max(kernels, key=lambda k: k.since)  # the suite tests the current version
    module = newest.fn.__module__.removeprefix("onnxflow.ops.")
    return module.replace(".", "/")


def _has_function(domain: str, name: str) -> bool:
    try:
        schema = onnx.defs.get_schema(name, domain)
    except onnx.defs.SchemaError:
        return False
    return bool(schema.has_function or schema.has_context_dependent_function)


def run_case(case) -> str | None:
    """Run one case; return None when it passes, else a one-line reason."""
    try:
        sess = onnxflow.InferenceSession(case.model)
        names = [a.name for a in sess.get_inputs()]
        for inputs, expected in case.data_sets:
            inputs = [proto_to_value(v) for v in inputs]
            expected = [proto_to_value(v) for v in expected]
            got = sess.run(None, dict(zip(names, inputs)))
            assert_similar_outputs(expected, got, rtol=case.rtol, atol=case.atol)
    except Exception as exc:  # a report collects every kind of failure
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        return f"{type(exc).__name__}: {first}"[:160]
    return None


def main(argv: list[str] | None = None) -> int:
    """Run every case and print (and optionally write) the per-family table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--readme", action="store_true", help="rewrite the table in README.md")
    parser.add_argument("-k", default="", help="only cases whose name contains this")
    args = parser.parse_args(argv)
    warnings.simplefilter("ignore")
    load_all()
    index = _op_index()
    totals: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    failures: dict[str, str] = {}
    ran: set[str] = set()
    cases = [c for c in load_model_tests(kind="node") if args.k in c.name]
    single = {
        c.name: (c.model.graph.node[0].domain, c.model.graph.node[0].op_type)
        for c in cases
        if len(c.model.graph.node) == 1
    }
    for case in cases:
        ran.add(case.name)
        base = case.name.split("_expanded")[0]
        family = family_of(single.get(case.name) or single.get(base) or case_op(case.name, index))
        reason = run_case(case)
        totals[family][1] += 1
        if reason is None:
            totals[family][0] += 1
        else:
            failures[case.name] = reason
    expected = {n: r for n, r in read_expected_failures().items() if applies_to_installed_onnx(r)}
    table = render(totals) + _why_failing(failures, expected)
    print(table)
    unexpected = sorted(set(failures) - set(expected))
    fixed = sorted(n for n in expected if n in ran and n not in failures)
    print(
        f"\n{len(failures)} failing; {len(unexpected)} not in expected_failures.txt; "
        f"{len(fixed)} listed there now pass"
    )
    for name in unexpected:
        print(f"  FAIL {name}  # {failures[name]}")
    for name in fixed:
        print(f"  PASSES NOW {name}")
    if args.readme:
        text = README.read_text()
        head, _, rest = text.partition(START)
        _, _, tail = rest.partition(END)
        README.write_text(f"{head}{START}\n{table}\n{END}{tail}")
    return 0


def _why_failing(failures: dict[str, str], expected: dict[str, str]) -> str:
    """A sentence counting the failing cases by the tag their expected-failure reason opens
    with (``[random]``, ``[onnx<1.24]``...)."""
    tags: dict[str, int] = defaultdict(int)
    for name in failures:
        reason = expected.get(name, "")
        tags[reason[1 : reason.index("]")] if reason.startswith("[") else ""] += 1
    parts = [f"{n} {_tag_meaning(tag)}" for tag, n in sorted(tags.items())]
    if not parts:
        return ""
    listed = "each listed with its reason in `tests/conformance/expected_failures.txt`"
    return f"\n\nThe failing cases, {listed}: {'; '.join(parts)}."


def _tag_meaning(tag: str) -> str:
    if tag == "random":
        return "draw random numbers the suite drew itself"
    if tag.startswith("onnx"):
        return f"fail on this onnx's test data only ({tag}: the case's expected output changed)"
    return "not yet supported"


def render(totals: dict[str, list[int]]) -> str:
    """Markdown table of passed/total per family, with the overall count first."""
    passed = sum(p for p, _ in totals.values())
    total = sum(t for _, t in totals.values())
    lines = [
        f"**{passed} / {total}** ONNX backend node-suite cases pass "
        f"(onnx {onnx.__version__}, opset {onnx.defs.onnx_opset_version()}).",
        "",
        "| family | passed | total |",
        "| --- | ---: | ---: |",
    ]
    for family, (p, t) in sorted(totals.items(), key=lambda kv: (-kv[1][1], kv[0])):
        lines.append(f"| {family} | {p} | {t} |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
