"""``onnxflow view``: one self-contained HTML page showing a model's graph, and, when asked, its
values, times and divergences on that graph.

The page holds a JSON document (``View.document``) and the script that draws it; it loads
nothing from a network. The document's parts:

- ``model``: name, producer, opsets, node count;
- ``graphs``: ``{id: {"label", "parent", "inputs", "outputs", "nodes", "values", "consts"}}``,
  the main graph as ``"main"``, a body as ``"<parent id>/<node key>.<attribute>"``, a local
  function as ``"fn:<domain>.<name>"`` (:mod:`onnxflow.view.graph`);
- ``code``: ``{graph id: {node key: generated line}}`` (:mod:`onnxflow.view.code`);
- with a run: ``stats``, ``iterations``, ``times``, ``top`` (:mod:`onnxflow.view.stats`);
- with a comparison: ``compare`` (:mod:`onnxflow.view.diverge`).

The layout is dagre's (``@dagrejs/dagre`` on npm, MIT, vendored in ``vendor/`` with its licence).
"""

from __future__ import annotations

import html
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from onnxflow.errors import OnnxflowError
from onnxflow.ir.load import load_model
from onnxflow.session import InferenceSession
from onnxflow.view.code import code_lines
from onnxflow.view.diverge import divergences
from onnxflow.view.graph import describe
from onnxflow.view.stats import collect

__all__ = ["View", "view"]

HERE = Path(__file__).parent


@dataclass(frozen=True)
class View:
    """A rendered view: ``html`` (the whole page), ``document`` (the data it shows);
    ``save(path)`` writes the page, and Jupyter displays it inline."""

    document: dict[str, Any]
    html: str

    def save(self, path: str | Path) -> Path:
        """Write the page to ``path``; return it."""
        path = Path(path)
        path.write_text(self.html, encoding="utf-8")
        return path

    def _repr_html_(self) -> str:
        """The page in an iframe (its script runs there, apart from the notebook's)."""
        return (
            f'<iframe srcdoc="{html.escape(self.html, quote=True)}" '
            'style="width:100%;height:640px;border:1px solid #ccc"></iframe>'
        )


def view(
    model: str | Path | onnx.ModelProto,
    feeds: dict[str, Any] | None = None,
    run: bool = False,
    against: str | Path | onnx.ModelProto | None = None,
    values: bool = False,
    rtol: float = 1e-4,
    atol: float = 1e-5,
) -> View:
    """A page showing ``model``'s graph; with ``run=True`` (or ``feeds`` given) each value's
    statistics and each node's time from a run on ``feeds`` (generated from the declared
    inputs when None, as ``onnxflow run`` does); with ``against`` ("onnxruntime", "reference"
    or another model) each value's error against that side, the first divergence and its
    origins. ``values=True`` also stores the tensors themselves (up to 10,000 elements each)."""
    proto = load_model(model)
    document = describe(proto)
    wanted = run or feeds is not None or against is not None
    try:
        sess = InferenceSession(proto)
    except OnnxflowError as exc:
        if wanted:
            raise
        document["note"] = f"onnxflow cannot compile this model, so no generated code: {exc}"
        return View(document, page(document))
    document["code"] = code_lines(sess.plan, proto.graph)
    if wanted:
        feeds = dict(feeds) if feeds is not None else generated_feeds(sess)
        document.update(collect(sess, proto, feeds, values))
        if against is not None:
            other = against if isinstance(against, str | onnx.ModelProto) else str(against)
            if isinstance(other, str) and other not in ("onnxruntime", "reference"):
                other = load_model(other)
            document["compare"] = divergences(proto, feeds, other, rtol, atol)
    return View(document, page(document))


def generated_feeds(sess: InferenceSession, seed: int = 0) -> dict[str, Any]:
    """Random feeds of the model's declared input types (unknown dimensions 1), as ``onnxflow
    run`` makes them without ``--input``."""
    from onnxflow.cli.feeds import generate_input  # the cli package imports this one

    rng = np.random.default_rng(seed)
    return {arg.name: generate_input(arg, {}, rng) for arg in sess.get_inputs()}


def page(document: dict[str, Any]) -> str:
    """The self-contained HTML page showing ``document``."""
    data = json.dumps(_clean(document), default=_jsonable, allow_nan=False)
    data = data.replace("</", "<\\/")  # no "</script>" inside the data's script element
    title = html.escape(f"onnxflow view: {document['model']['name'] or 'model'}")
    return (
        "<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'>"
        f"<title>{title}</title><style>{(HERE / 'view.css').read_text()}</style></head>"
        f"<body>{BODY}"
        f"<script type='application/json' id='onnxflow-data'>{data}</script>"
        f"<script>{(HERE / 'vendor' / 'dagre.min.js').read_text()}</script>"
        f"<script>{(HERE / 'view.js').read_text()}</script></body></html>\n"
    )


#: The page's elements, which view.js fills.
BODY = (
    "<header><b id='title'></b><nav id='crumbs'></nav>"
    "<input id='search' type='search' placeholder='search node or value' autocomplete='off'>"
    "<div id='results'></div></header>"
    "<main><svg id='canvas'><g id='viewport'></g></svg>"
    "<aside id='panel'><p class='hint'>Click a node to see it; double-click a Loop, Scan, If "
    "or function call to open its body. Drag to pan, wheel to zoom.</p></aside>"
    "<section id='overview'></section></main>"
)


def _clean(value: Any) -> Any:
    """``value`` with its non-finite floats as the strings "inf", "-inf" and "nan" (JSON has
    no such numbers)."""
    if isinstance(value, float | np.floating):
        return float(value) if math.isfinite(value) else str(float(value))
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_clean(v) for v in value]
    return value


def _jsonable(value: Any) -> Any:
    if isinstance(value, np.generic):
        return _clean(value.item())
    return str(value)
