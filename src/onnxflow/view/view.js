// onnxflow view: draws the document of onnxflow.view (graphs, statistics, times, divergences)
// as SVG. Each graph is laid out by dagre the first time it is opened (lazily), then cached.
"use strict";
(function () {
  const D = JSON.parse(document.getElementById("onnxflow-data").textContent);
  const G = D.graphs;
  const svg = document.getElementById("canvas");
  const viewport = document.getElementById("viewport");
  const panel = document.getElementById("panel");
  const state = { stack: ["main"], layouts: {}, selected: null, iteration: {}, t: { x: 0, y: 0, k: 1 } };
  const timing = {};
  window.onnxflowView = { document: D, state: state, timing: timing, open: open, select: select, reveal: reveal, sections: (gid) => sections(gid) };

  function esc(s) {
    return String(s).replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]);
  }
  function num(v) {
    if (v === null || v === undefined) return "-";
    if (typeof v === "string") return v;
    if (Number.isInteger(v)) return String(v);
    return Math.abs(v) >= 1e5 || (Math.abs(v) < 1e-3 && v !== 0) ? v.toExponential(4) : v.toPrecision(6).replace(/\.?0+$/, "");
  }
  function typeText(t) {
    if (!t) return "";
    const short = { float32: "f32", float64: "f64", float16: "f16", int64: "i64", int32: "i32", int8: "i8", uint8: "u8", bool: "bool" };
    const dt = short[t.dtype] || t.dtype || "?";
    return t.shape ? dt + "[" + t.shape.join(",") + "]" : dt;
  }

  // ---- layout ---------------------------------------------------------------------------------
  // A graph of more than SECTION nodes is laid out and drawn one section (SECTION nodes in the
  // model's order) at a time: dagre's ordering grows faster than linearly with the graph, so
  // sections keep every open under a second; stubs stand for the values that cross sections.
  const SECTION = 150;
  function sections(gid) { return Math.max(1, Math.ceil(G[gid].nodes.length / SECTION)); }
  function sectionOf(index) { return Math.floor(index / SECTION); }
  function layout(gid, section) {
    const cacheKey = gid + "#" + section;
    if (state.layouts[cacheKey]) return state.layouts[cacheKey];
    const t0 = performance.now();
    const g = G[gid];
    const first = section * SECTION, last = Math.min(g.nodes.length, first + SECTION);
    const many = sections(gid) > 1;
    const dg = new dagre.graphlib.Graph({ multigraph: true });
    dg.setGraph({ rankdir: "TB", nodesep: 24, ranksep: 34, edgesep: 8, marginx: 20, marginy: 20 });
    dg.setDefaultEdgeLabel(() => ({}));
    const producer = {}, boxes = {}, edges = [];
    const add = (id, box) => { if (!boxes[id]) { boxes[id] = box; dg.setNode(id, { width: box.w, height: box.h }); } };
    const link = (from, to, name) => { dg.setEdge(from, to, {}, from + ">" + to + ">" + name); edges.push({ from: from, to: to, name: name }); };
    const made = producers(gid);
    const reads = (n) => new Set(n.inputs.filter((x) => x && !(x in g.consts)));
    g.inputs.forEach((name) => { if (!many || section === 0) producer[name] = "i:" + name; });
    for (let i = first; i < last; i++) {
      const n = g.nodes[i];
      n.outputs.forEach((o) => { if (o) producer[o] = "n" + i; });
      const sub = n.name && n.name !== n.op ? n.name : (n.name ? "" : n.outputs[0] || "");
      add("n" + i, { kind: "node", index: i, w: Math.max(width(n.op, 70), width(sub, 70) * 0.85), h: sub ? 38 : 28, sub: sub });
    }
    Object.keys(producer).forEach((name) => { if (producer[name][0] === "i") add("i:" + name, { kind: "io", name: name, w: width(name, 60), h: 26 }); });
    for (let i = first; i < last; i++) {
      reads(g.nodes[i]).forEach((name) => {
        if (!(name in producer)) {
          const earlier = name in made;
          producer[name] = "x:" + name;
          add("x:" + name, { kind: earlier ? "from" : "outer", name: name, label: (earlier ? "\u2191 " : "") + name, w: width(name, 60), h: 26, node: earlier ? made[name] : null });
        }
        link(producer[name], "n" + i, name);
      });
    }
    g.outputs.forEach((name) => {
      if (producer[name] && producer[name][0] !== "x") { add("o:" + name, { kind: "io", name: name, w: width(name, 60), h: 26 }); link(producer[name], "o:" + name, name); }
    });
    if (many) later(gid, last).forEach((name) => {
      if (producer[name] && producer[name][0] === "n") { add("y:" + name, { kind: "to", name: name, label: "\u2193 " + name, w: width(name, 60), h: 26 }); link(producer[name], "y:" + name, name); }
    });
    dagre.layout(dg);
    Object.keys(boxes).forEach((id) => { const p = dg.node(id); boxes[id].x = p.x; boxes[id].y = p.y; });
    edges.forEach((e) => { e.points = dg.edge(e.from, e.to, e.from + ">" + e.to + ">" + e.name).points; });
    const info = dg.graph();
    const result = { boxes: boxes, edges: edges, width: info.width || 100, height: info.height || 100 };
    timing[cacheKey] = { layout: performance.now() - t0, nodes: last - first };
    state.layouts[cacheKey] = result;
    return result;
  }
  function producers(gid) {
    const made = {};
    G[gid].nodes.forEach((n, i) => n.outputs.forEach((o) => { if (o) made[o] = i; }));
    return made;
  }
  function later(gid, from) {
    const names = new Set();
    const g = G[gid];
    for (let i = from; i < g.nodes.length; i++) g.nodes[i].inputs.forEach((x) => { if (x) names.add(x); });
    return names;
  }
  function width(text, least) { return Math.min(240, Math.max(least, 7 * String(text).length + 18)); }

  // ---- drawing --------------------------------------------------------------------------------
  function heat(fraction) {
    const f = Math.max(0, Math.min(1, fraction));
    return "rgb(255," + Math.round(250 - 130 * f) + "," + Math.round(240 - 220 * f) + ")";
  }
  function nodeClasses(gid, n) {
    const cls = ["node"];
    if (n.bodies.length || n.function) cls.push("control");
    const cmp = D.compare;
    if (cmp) {
      const errs = (cmp.errors[gid] || {});
      const outs = n.outputs.filter((o) => errs[o]);
      if (outs.some((o) => !errs[o].within)) cls.push("beyond");
      else if (outs.some((o) => !errs[o].exact)) cls.push("differs");
      if ((cmp.path[gid] || []).includes(n.key)) cls.push("onpath");
      if (cmp.origins.some((o) => o.graph === gid && o.node === n.key)) cls.push("origin");
      if ((cmp.amplified || []).some((a) => a.graph === gid && a.node === n.key)) cls.push("amplified");
      if (cmp.first && cmp.first.graph === gid && cmp.first.node === n.key) cls.push("first");
      if (cmp.first && cmp.first.graph && cmp.first.graph.startsWith(gid + "/" + n.key + ".")) cls.push("first");
    }
    return cls.join(" ");
  }
  // an edge's label: the declared or inferred type, with the run's shape where it has one
  function edgeText(gid, name) {
    const t = G[gid].values[name];
    const ran = findStats(gid, name) || lastIteration(gid, name);
    if (ran && ran.shape && t && (!t.shape || t.shape.some((d) => typeof d !== "number"))) return typeText({ dtype: t.dtype, shape: ran.shape });
    return typeText(t);
  }
  function lastIteration(gid, name) {
    const runs = ((D.iterations || {})[gid] || {}).values;
    const series = runs && runs[name];
    return series ? series[series.length - 1] : null;
  }
  function draw(gid) {
    const t0 = performance.now();
    const L = layout(gid, state.section);
    const g = G[gid];
    const times = (D.times || {})[gid] || {};
    const most = Math.max(1e-12, ...Object.values(times));
    const path = new Set(((D.compare || {}).path || {})[gid] || []);
    const parts = ["<defs><marker id='arrow' viewBox='0 0 10 10' refX='9' refY='5' markerWidth='7' markerHeight='7' markerUnits='userSpaceOnUse' orient='auto'><path d='M0,0L10,5L0,10z' fill='#8a94a6'/></marker></defs>"];
    L.edges.forEach((e) => {
      const d = "M" + e.points.map((p) => p.x.toFixed(1) + "," + p.y.toFixed(1)).join("L");
      const onpath = e.from[0] === "n" && e.to[0] === "n" && path.has(g.nodes[+e.from.slice(1)].key) && path.has(g.nodes[+e.to.slice(1)].key);
      parts.push("<path class='edge" + (onpath ? " onpath" : "") + "' data-value='" + esc(e.name) + "' d='" + d + "'/>");
      const label = edgeText(gid, e.name);
      if (label) {
        const mid = e.points[Math.floor(e.points.length / 2)];
        parts.push("<text class='elabel' x='" + (mid.x + 4).toFixed(1) + "' y='" + (mid.y - 2).toFixed(1) + "' text-anchor='start'>" + esc(label) + "</text>");
      }
    });
    Object.keys(L.boxes).forEach((id) => {
      const b = L.boxes[id];
      const at = "transform='translate(" + (b.x - b.w / 2).toFixed(1) + "," + (b.y - b.h / 2).toFixed(1) + ")'";
      const rect = "<rect width='" + b.w + "' height='" + b.h + "'";
      if (b.kind !== "node") {
        parts.push("<g class='io " + b.kind + "' data-value='" + esc(b.name) + "'" + (b.node !== null && b.node !== undefined ? " data-goto='" + b.node + "'" : "") + " " + at + ">" + rect + "/><text x='" + b.w / 2 + "' y='17' text-anchor='middle' font-size='11'>" + esc(b.label || b.name) + "</text></g>");
        return;
      }
      const n = g.nodes[b.index];
      const fill = n.key in times ? " style='fill:" + heat(times[n.key] / most) + "'" : "";
      parts.push("<g class='" + nodeClasses(gid, n) + "' data-node='" + esc(n.key) + "' data-graph='" + esc(gid) + "' data-index='" + b.index + "' " + at + ">" + rect + fill + "/>" +
        "<text x='" + b.w / 2 + "' y='" + (b.sub ? 15 : 18) + "'>" + esc(n.op) + (n.bodies.length || n.function ? " \u25b8" : "") + "</text>" +
        (b.sub ? "<text class='sub' x='" + b.w / 2 + "' y='30'>" + esc(b.sub.length > 34 ? b.sub.slice(0, 32) + "\u2026" : b.sub) + "</text>" : "") + "</g>");
    });
    viewport.innerHTML = parts.join("");
    timing[gid + "#" + state.section].draw = performance.now() - t0;
  }

  // ---- navigation -----------------------------------------------------------------------------
  function chain(gid) {
    const ids = [];
    for (let at = gid; at; at = G[at].parent) ids.unshift(at);
    if (ids[0] !== "main") ids.unshift("main");
    return ids;
  }
  function open(gid, stack, section) {
    state.stack = stack || chain(gid);
    state.section = section || 0;
    state.selected = null;
    draw(gid);
    fit();
    crumbs();
    overview();
    svg.setAttribute("data-graph", gid);
    svg.setAttribute("data-section", state.section);
  }
  function current() { return state.stack[state.stack.length - 1]; }
  function crumbs() {
    const nav = document.getElementById("crumbs");
    nav.innerHTML = state.stack.map((gid, i) => (i ? "<span class='sep'>\u203a</span>" : "") +
      (i === state.stack.length - 1 ? "<b>" + esc(G[gid].label) + "</b>" : "<a data-depth='" + i + "'>" + esc(G[gid].label) + "</a>")).join("") + sectionControls();
    nav.querySelectorAll("a").forEach((a) => a.addEventListener("click", () => {
      const stack = state.stack.slice(0, +a.dataset.depth + 1);
      open(stack[stack.length - 1], stack);
    }));
    nav.querySelectorAll("button[data-section]").forEach((b) => b.addEventListener("click", () => open(current(), state.stack, +b.dataset.section)));
  }
  function sectionControls() {
    const count = sections(current());
    if (count < 2) return "";
    const s = state.section;
    return " <span class='sections'>nodes " + (s * SECTION + 1) + "–" + Math.min(G[current()].nodes.length, (s + 1) * SECTION) + " of " + G[current()].nodes.length +
      " <button data-section='" + Math.max(0, s - 1) + "'" + (s ? "" : " disabled") + ">◂ previous</button>" +
      "<button data-section='" + Math.min(count - 1, s + 1) + "'" + (s < count - 1 ? "" : " disabled") + ">next ▸</button></span>";
  }
  function fit() {
    const L = layout(current(), state.section);
    const w = svg.clientWidth || 800, h = svg.clientHeight || 600;
    const whole = Math.min(w / L.width, h / L.height) * 0.95;
    const k = Math.min(1.5, Math.max(whole, Math.min(0.6, (w / L.width) * 0.95)));
    state.t = { k: k, x: (w - L.width * k) / 2, y: L.height * k <= h ? (h - L.height * k) / 2 : 10 };
    apply();
  }
  function apply() {
    const t = state.t;
    viewport.setAttribute("transform", "translate(" + t.x + "," + t.y + ") scale(" + t.k + ")");
    svg.classList.toggle("small", t.k < 0.55);
  }
  function reveal(gid, key) {
    const index = G[gid].nodes.findIndex((n) => n.key === key);
    if (index < 0) return;
    if (current() !== gid || state.section !== sectionOf(index)) open(gid, current() === gid ? state.stack : null, sectionOf(index));
    const b = layout(gid, state.section).boxes["n" + index];
    const w = svg.clientWidth || 800, h = svg.clientHeight || 600;
    state.t.k = Math.max(state.t.k, 0.8);
    state.t.x = w / 2 - b.x * state.t.k;
    state.t.y = h / 2 - b.y * state.t.k;
    apply();
    select(gid, index);
  }
  function drill(gid, n) {
    const target = n.bodies.length ? n.bodies[0][1] : n.function;
    if (target) open(target, state.stack.concat([target]));
  }

  // ---- the side panel -------------------------------------------------------------------------
  function select(gid, index) {
    viewport.querySelectorAll("g.node.selected").forEach((e) => e.classList.remove("selected"));
    const el = viewport.querySelector("g.node[data-index='" + index + "']");
    if (el) el.classList.add("selected");
    state.selected = { graph: gid, index: index };
    const n = G[gid].nodes[index];
    panel.innerHTML = nodePanel(gid, n);
    panel.querySelectorAll("button[data-open]").forEach((b) => b.addEventListener("click", () => open(b.dataset.open, state.stack.concat([b.dataset.open]))));
    panel.querySelectorAll(".spark rect.it").forEach((r) => r.addEventListener("click", () => {
      state.iteration[r.closest("svg.spark").dataset.graph] = +r.dataset.iteration;
      select(gid, index);
    }));
  }
  function showValue(gid, name) {
    viewport.querySelectorAll("g.node.selected").forEach((el) => el.classList.remove("selected"));
    const users = G[gid].nodes.filter((n) => n.inputs.includes(name)).map((n) => n.op + " " + n.key);
    panel.innerHTML = "<h2>value " + esc(name) + "</h2>" + valueBox(gid, name) + (users.length ? "<h3>read by</h3>" + users.map((u) => "<div>" + esc(u) + "</div>").join("") : "");
    panel.querySelectorAll(".spark rect.it").forEach((r) => r.addEventListener("click", () => {
      state.iteration[r.closest("svg.spark").dataset.graph] = +r.dataset.iteration;
      showValue(gid, name);
    }));
  }
  function nodePanel(gid, n) {
    const out = ["<h2 data-node='" + esc(n.key) + "'>" + esc(n.op) + " <span style='font-weight:normal'>" + esc(n.name || n.key) + "</span></h2>"];
    const k = n.kernel && D.kernels[n.kernel];
    if (k) {
      out.push("<div class='kernel'>kernel: " + (k.since === null ? "<span class='bad'>none registered for " + esc((k.domain || "ai.onnx") + "." + k.op) + " at opset " + k.opset + "</span>"
        : esc(k.domain + "." + k.op) + " since_version " + k.since + " (model opset " + k.opset + ")<br><code>" + esc(k.function) + "</code>") + "</div>");
    }
    if (n.function) out.push("<div>model-local function: <button data-open='" + esc(n.function) + "'>open body</button></div>");
    if (k && k.traits.length) out.push("<div class='traits'>traits: " + k.traits.map((t) => "<span class='chip'>" + esc(t) + "</span>").join("") + "</div>");
    const line = ((D.code || {})[gid] || {})[n.key];
    out.push("<h3>generated code</h3>" + (line ? "<pre class='code'>" + esc(line) + "</pre>" : "<p class='hint'>no line of its own (folded, fused or run inside another node's function)</p>"));
    const t = ((D.times || {})[gid] || {})[n.key];
    if (t !== undefined) out.push("<div class='time'>time: <b>" + (t * 1e3).toFixed(3) + " ms</b></div>");
    else if (D.times) out.push("<div class='time hint'>no time of its own: the compiler folded it or fused it into another node</div>");
    n.bodies.forEach((b) => out.push("<button data-open='" + esc(b[1]) + "'>open " + esc(b[0]) + " (" + G[b[1]].nodes.length + " nodes)</button>"));
    const attrs = Object.keys(n.attrs);
    out.push("<h3>attributes</h3>" + (attrs.length ? "<table class='attrs'>" + attrs.map((a) => "<tr><th>" + esc(a) + "</th><td data-attr='" + esc(a) + "'>" + esc(n.attrs[a]) + "</td></tr>").join("") + "</table>" : "<p class='hint'>none</p>"));
    out.push("<h3>inputs</h3>" + n.inputs.map((v) => valueBox(gid, v)).join(""));
    out.push("<h3>outputs</h3>" + n.outputs.map((v) => valueBox(gid, v)).join(""));
    return out.join("");
  }
  function lookupType(gid, name) {
    for (let at = gid; at; at = G[at].parent) if (G[at].values[name]) return G[at].values[name];
    return null;
  }
  function valueBox(gid, name) {
    if (!name) return "<div class='value hint'>(omitted)</div>";
    const g = G[gid];
    const out = ["<div class='value' data-value='" + esc(name) + "'><span class='vname'>" + esc(name) + "</span> " + esc(typeText(lookupType(gid, name))) + (name in g.consts ? " <span class='chip'>initializer</span>" : "")];
    const err = (((D.compare || {}).errors || {})[gid] || {})[name];
    if (err) {
      out.push("<div class='error" + (err.within ? "" : " bad") + "' data-error='" + esc(name) + "'>vs " + esc(D.compare.against) + ": " + (err.exact ? "identical" : "max abs err " + num(err.abs) + ", max rel err " + num(err.rel) + (err.ulp !== null ? ", " + num(err.ulp) + " ulp" : "") + (err.within ? " (within tolerance)" : " (beyond tolerance" + (err.reason ? ": " + esc(err.reason) : "") + ")")) + "</div>");
    }
    let at = gid;  // a value read from an enclosing body: that body's runs
    while (at && !((((D.iterations || {})[at] || {}).values || {})[name])) at = G[at].parent;
    if (at) out.push(iterationsBox(at, D.iterations[at], name));
    else {
      const s = findStats(gid, name);
      if (s) out.push(statsTable(s));
    }
    out.push("</div>");
    return out.join("");
  }
  function findStats(gid, name) {
    for (let at = gid; at; at = G[at].parent) {
      const s = ((D.stats || {})[at] || {})[name];
      if (s) return s;
    }
    return null;
  }
  function statsTable(s) {
    const rows = [["shape", s.shape ? "[" + s.shape.join(", ") + "]" : "-"], ["dtype", s.dtype]];
    ["min", "max", "mean", "std", "nan", "inf"].forEach((k) => { if (k in s) rows.push([k, num(s[k])]); });
    let html = "<table class='stats'>" + rows.map((r) => "<tr><th>" + r[0] + "</th><td data-stat='" + r[0] + "'>" + esc(r[1]) + "</td></tr>").join("") + "</table>";
    if (s.hist) html += histogram(s);
    if (s.data) html += "<pre class='data'>" + esc(s.data.slice(0, 200).map(num).join(", ")) + (s.data.length > 200 ? ", \u2026" : "") + "</pre>";
    return html;
  }
  function histogram(s) {
    const most = Math.max(1, ...s.hist), w = 240, h = 40, bw = w / s.hist.length;
    const bars = s.hist.map((c, i) => "<rect x='" + (i * bw + 0.5).toFixed(1) + "' y='" + (h - (c / most) * h).toFixed(1) + "' width='" + (bw - 1).toFixed(1) + "' height='" + ((c / most) * h).toFixed(1) + "' fill='#6b8cc7'><title>" + c + "</title></rect>").join("");
    return "<svg class='hist' width='" + w + "' height='" + (h + 12) + "'>" + bars + "<text x='0' y='" + (h + 11) + "' font-size='9'>" + num(s.min) + "</text><text x='" + w + "' y='" + (h + 11) + "' font-size='9' text-anchor='end'>" + num(s.max) + "</text></svg>";
  }
  function iterationsBox(gid, runs, name) {
    const series = runs.values[name];
    const count = runs.labels.length;
    let at = state.iteration[gid];
    if (at === undefined || at >= count) at = count - 1;
    const out = ["<div class='iterations'>" + count + " body runs; iteration <b data-iteration='" + at + "'>" + esc(runs.labels[at]) + "</b> shown (click a sparkline to choose)"];
    ["min", "max", "mean", "std"].forEach((k) => out.push(sparkline(gid, series, k, at)));
    const s = series[at];
    out.push(s ? statsTable(s) : "<p class='hint'>not computed in this run</p>");
    out.push("</div>");
    return out.join("");
  }
  function sparkline(gid, series, key, at) {
    const ys = series.map((s) => (s && typeof s[key] === "number" ? s[key] : null));
    const known = ys.filter((y) => y !== null);
    if (!known.length) return "";
    const lo = Math.min(...known), hi = Math.max(...known), w = 170, h = 20, n = ys.length;
    const step = w / Math.max(1, n);
    const y = (v) => (hi > lo ? h - 2 - ((v - lo) / (hi - lo)) * (h - 4) : h / 2);
    const pts = ys.map((v, i) => (v === null ? null : (i * step + step / 2).toFixed(1) + "," + y(v).toFixed(1))).filter((p) => p).join(" ");
    const hits = ys.map((v, i) => "<rect class='it" + (i === at ? " on" : "") + "' data-iteration='" + i + "' x='" + (i * step).toFixed(1) + "' y='0' width='" + step.toFixed(2) + "' height='" + h + "'/>").join("");
    return "<div class='sparkrow'><span style='display:inline-block;width:36px'>" + key + "</span><svg class='spark' data-graph='" + esc(gid) + "' data-stat='" + key + "' width='" + w + "' height='" + h + "'>" + hits + "<polyline fill='none' stroke='#2456a6' stroke-width='1.2' points='" + pts + "'/></svg> <small>" + num(lo) + " \u2026 " + num(hi) + "</small></div>";
  }

  // ---- overview: model, times, comparison ---------------------------------------------------
  function overview() {
    const box = document.getElementById("overview");
    const out = [];
    if (D.note) out.push("<div class='note bad'>" + esc(D.note) + "</div>");
    if (D.top && D.top.length) {
      out.push("<details open><summary><b>slowest nodes</b> (whole run, bodies summed over iterations)</summary>");
      D.top.slice(0, 10).forEach((r) => {
        const n = G[r[0]] && G[r[0]].nodes.find((x) => x.key === r[1]);
        out.push("<div class='row top' data-graph='" + esc(r[0]) + "' data-node='" + esc(r[1]) + "'>" + (r[2] * 1e3).toFixed(3) + " ms " + esc(n ? n.op : "") + " " + esc(r[1]) + (r[0] !== "main" ? " <small>in " + esc(G[r[0]].label) + "</small>" : "") + "</div>");
      });
      out.push("<div class='legend'>fill: time, darker is slower (against this graph's slowest node)</div></details>");
    }
    const cmp = D.compare;
    if (cmp) {
      out.push("<b>against " + esc(cmp.against) + ": " + (cmp.agree ? "agree" : "<span class='bad'>DIVERGE</span>") + "</b>");
      if (cmp.first) out.push("<div class='row first' data-graph='" + esc(cmp.first.graph || "") + "' data-node='" + esc(cmp.first.node) + "'>first divergence: " + esc(cmp.first.op + " " + cmp.first.node) + "</div>");
      cmp.origins.slice(0, 10).forEach((o) => out.push("<div class='row origin' data-graph='" + esc(o.graph || "") + "' data-node='" + esc(o.node) + "'>origin: " + esc(o.op + " " + o.node) + " (max rel err " + num(o.rel) + ")</div>"));
      (cmp.amplified || []).slice(0, 5).forEach((a) => out.push("<div class='row amplified' data-graph='" + esc(a.graph || "") + "' data-node='" + esc(a.node) + "'>error grows at: " + esc(a.op + " " + a.node) + " (x" + num(a.factor) + ")</div>"));
      out.push("<div class='legend'><span class='key first'></span>first divergence <span class='key origin'></span>origin <span class='key onpath'></span>downstream of an origin <span class='key amplified'></span>error grows <span class='key beyond'></span>beyond tolerance <span class='key differs'></span>differs within it</div>");
      out.push("<details><summary>report</summary><pre>" + esc(cmp.summary) + "</pre></details>");
    }
    box.innerHTML = out.join("");
    box.querySelectorAll(".row").forEach((r) => r.addEventListener("click", () => { if (G[r.dataset.graph]) reveal(r.dataset.graph, r.dataset.node); }));
  }

  // ---- search ---------------------------------------------------------------------------------
  const search = document.getElementById("search");
  const results = document.getElementById("results");
  function find(query) {
    const q = query.toLowerCase();
    const hits = [];
    Object.keys(G).forEach((gid) => G[gid].nodes.forEach((n) => {
      const names = [n.key, n.name, n.op].concat(n.outputs, n.inputs);
      const match = names.find((s) => s && s.toLowerCase().includes(q));
      if (match && hits.length < 100) hits.push({ graph: gid, node: n, match: match });
    }));
    return hits;
  }
  search.addEventListener("input", () => {
    const q = search.value.trim();
    if (!q) { results.style.display = "none"; return; }
    const hits = find(q);
    results.innerHTML = hits.length ? hits.map((h, i) => "<div data-hit='" + i + "'>" + esc(h.node.op + " " + h.node.key) + (h.match !== h.node.key ? " <small>(" + esc(h.match) + ")</small>" : "") + (h.graph !== "main" ? " <small>in " + esc(G[h.graph].label) + "</small>" : "") + "</div>").join("") : "<div class='hint'>nothing found</div>";
    results.style.display = "block";
    results.querySelectorAll("div[data-hit]").forEach((d) => d.addEventListener("click", () => {
      const h = hits[+d.dataset.hit];
      results.style.display = "none";
      reveal(h.graph, h.node.key);
    }));
  });

  // ---- pan and zoom ---------------------------------------------------------------------------
  let drag = null;
  svg.addEventListener("mousedown", (e) => {
    drag = { x: e.clientX, y: e.clientY, tx: state.t.x, ty: state.t.y, moved: false };
    svg.classList.add("dragging");
  });
  window.addEventListener("mousemove", (e) => {
    if (!drag) return;
    const dx = e.clientX - drag.x, dy = e.clientY - drag.y;
    if (Math.abs(dx) + Math.abs(dy) > 3) drag.moved = true;
    state.t.x = drag.tx + dx;
    state.t.y = drag.ty + dy;
    apply();
  });
  window.addEventListener("mouseup", () => { svg.classList.remove("dragging"); setTimeout(() => { drag = null; }, 0); });
  svg.addEventListener("wheel", (e) => {
    e.preventDefault();
    const r = svg.getBoundingClientRect();
    const mx = e.clientX - r.left, my = e.clientY - r.top;
    const f = Math.exp(-e.deltaY * 0.0015);
    const k = Math.max(0.02, Math.min(8, state.t.k * f));
    state.t.x = mx - ((mx - state.t.x) * k) / state.t.k;
    state.t.y = my - ((my - state.t.y) * k) / state.t.k;
    state.t.k = k;
    apply();
  }, { passive: false });
  viewport.addEventListener("click", (e) => {
    if (drag && drag.moved) return;
    const el = e.target.closest("g.node");
    if (el) select(current(), +el.dataset.index);
    const stub = e.target.closest("g.io[data-goto]");
    if (stub) reveal(current(), G[current()].nodes[+stub.dataset.goto].key);
    else if (e.target.closest("g.io, path.edge")) showValue(current(), e.target.closest("g.io, path.edge").dataset.value);
  });
  viewport.addEventListener("dblclick", (e) => {
    const el = e.target.closest("g.node");
    if (el) drill(current(), G[current()].nodes[+el.dataset.index]);
  });

  const m = D.model;
  document.getElementById("title").textContent = (m.name || "model") + " \u2014 " + m.nodes + " nodes" + (D.stats ? ", run" : "") + (D.compare ? ", vs " + D.compare.against : "");
  open("main");
  document.body.setAttribute("data-ready", "1");
})();
