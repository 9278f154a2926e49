// The front-end of nbhelpers.memory_timeline, joined into graph_view's ES module (graph_view.esm_source()): a
// diagnosis's live bytes after every op, stacked by category or by module, above its backward graph; or, for a
// timeline of kind "time" (node_times.timeline), a backward's nodes (or a forward's ops: `clock`) as slices on its
// clock. Hover (or the arrow keys) shows the op or slice (or the gap between slices, where no profiled event
// ran); a click (or Enter) selects its node in the graph below, and selecting a node in the graph lights its ops
// or slices here. Names come from user code: they go in with textContent.
const TL_PALETTE = ["#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7", "#9c755f"];
const TL_W = 720, TL_H = 150, TL_PAD = 8;
const TL_CSS = `
.gv-tl { margin: 4px 0 8px; }
.gv-tl-head { display: flex; gap: 8px; align-items: center; flex-wrap: wrap; font-weight: bold; }
.gv-tl-head button[aria-pressed="true"] { background: var(--gv-match); color: var(--gv-bg); }
.gv-tl-chart { width: 100%; height: ${TL_H}px; display: block; border: 1px solid var(--gv-border); cursor: crosshair; }
.gv-tl-cursor { stroke: var(--gv-sel); stroke-width: 1.5; }
.gv-tl-cursor, .gv-tl-marks { pointer-events: none; }      /* the chart takes the mouse, not what marks it */
.gv-tl-info { min-height: 1.5em; font-family: monospace; font-size: 12px; white-space: pre-wrap; }
.gv-tl-slice { fill: var(--gv-heat); stroke: var(--gv-bg); stroke-width: 0.5; }
.gv-tl-slice.gv-tl-outside { fill: var(--gv-border); }
.gv-tl-lit { fill: none; stroke: var(--gv-sel); stroke-width: 3; }
`;

// memory_timeline.series: live bytes after each op, per category or per module group.
export function timelineSeries(tl, by) {
  const n = tl.live.length, names = by === "category" ? [...tl.categories]
    : tl.groups.map((g) => tl.strings[g]).concat(["other modules"]);
  const index = new Map(names.map((name, k) => [name, k])), delta = names.map(() => new Array(n + 1).fill(0));
  for (const [bytes, start, end, category, group] of tl.allocs) {
    const name = by === "category" ? tl.categories[category] : (tl.groups.includes(group) ? tl.strings[group] : "other modules");
    const d = delta[index.get(name)];
    d[start] += bytes;
    d[end] -= bytes;
  }
  const values = delta.map((d) => { let run = 0; return d.slice(0, n).map((v) => (run += v)); });
  return { names, values };
}

function tlMicros(us) {
  return us >= 1000 ? `${(us / 1000).toFixed(2)} ms` : `${us.toFixed(0)} us`;
}

function tlBytes(n) {
  return n >= 1 << 20 ? `${(n / (1 << 20)).toFixed(1)} MiB` : n >= 1024 ? `${(n / 1024).toFixed(1)} KiB` : `${n} B`;
}

class Timeline {
  constructor(tl, parent, controller) {
    const time = tl.kind === "time", n = tl.node.length, clock = tl.clock || "backward";
    const unit = clock === "forward" ? "op" : "node";
    Object.assign(this, { tl, controller, time, by: time ? "time" : "category", at: -1, litNode: -1,
      end: tl.span || 1, clock, unit });
    const root = tag("div", undefined, parent, "gv-tl");
    tag("style", TL_CSS, root);
    const head = tag("div", undefined, root, "gv-tl-head");
    tag("span", time ? tl.title : `${tl.title} (peak ${tlBytes(tl.peak)})`, head);
    this.buttons = time ? [] : ["category", "module"].map((by) => {
      const b = tag("button", `by ${by}`, head, `gv-tl-by-${by}`);
      b.addEventListener("click", () => this.draw(by));
      return b;
    });
    const what = time ? `time-line: arrow keys move along the ${clock}'s ${unit}s, Enter selects the slice's ${unit}`
      : "memory timeline: arrow keys move along the ops, Enter selects the node that holds the bytes";
    this.chart = svg("svg", { class: "gv-tl-chart", viewBox: `0 0 ${TL_W} ${TL_H}`, preserveAspectRatio: "none",
      tabindex: 0, role: "slider", "aria-label": what,
      "aria-valuemin": 0, "aria-valuemax": Math.max(0, n - 1), "aria-valuenow": 0 }, root);
    this.key = tag("div", undefined, root, "gv-legend");
    this.text = tag("div", time ? `Hover the time-line for a ${unit}'s time; click it to select the ${unit} below.`
      : "Hover the timeline for an op; click it to select the node that holds its bytes.", root, "gv-tl-info");
    this.text.setAttribute("aria-live", "polite");
    this.wire();
    this.draw(this.by);
  }

  x(i) {
    const w = TL_W - 2 * TL_PAD, tl = this.tl;
    if (this.time) return TL_PAD + w * (tl.start[i] + tl.us[i] / 2) / this.end;
    return TL_PAD + w * (tl.node.length > 1 ? i / (tl.node.length - 1) : 0.5);
  }
  y(bytes) { return TL_H - TL_PAD - (TL_H - 3 * TL_PAD) * bytes / Math.max(1, this.tl.peak); }

  draw(by) {
    this.by = by;
    this.buttons.forEach((b, k) => b.setAttribute("aria-pressed", String(["category", "module"][k] === by)));
    this.chart.replaceChildren();
    this.key.replaceChildren();
    if (this.time) this.drawSlices(); else this.drawStack(by);
    this.marks = svg("g", { class: "gv-tl-marks" }, this.chart);
    this.cursor = svg("line", { class: "gv-tl-cursor", y1: 0, y2: TL_H, x1: -10, x2: -10 }, this.chart);
    if (this.at >= 0) this.moveTo(this.at);
    this.light(this.litNode);
  }

  drawStack(by) {
    const { names, values } = timelineSeries(this.tl, by), n = this.tl.live.length;
    let below = new Array(n).fill(0);
    names.forEach((name, k) => {
      const top = below.map((b, i) => b + values[k][i]);
      if (values[k].some((v) => v)) {
        const along = top.map((v, i) => `${this.x(i).toFixed(1)},${this.y(v).toFixed(1)}`);
        const back = below.map((v, i) => `${this.x(i).toFixed(1)},${this.y(v).toFixed(1)}`).reverse();
        svg("polygon", { points: along.concat(back).join(" "), fill: TL_PALETTE[k % TL_PALETTE.length] }, this.chart);
        this.keyItem(`${name} (peak ${tlBytes(values[k].reduce((m, v) => Math.max(m, v), 0))})`,
          TL_PALETTE[k % TL_PALETTE.length]);
      }
      below = top;
    });
  }

  // one slice per node's range and per event outside them, as long as its time; one lane: on the CPU the
  // engine runs a backward's nodes one after another
  drawSlices() {
    this.tl.node.forEach((node, i) => svg("rect", { class: node >= 0 ? "gv-tl-slice" : "gv-tl-slice gv-tl-outside",
      ...this.sliceBox(i) }, this.chart));
    const forward = this.clock === "forward";
    this.keyItem(forward ? "an op's event: its kernel and the ops it called"
      : "a node's range: its backward formula and the aten ops it called", "var(--gv-heat)");
    this.keyItem(forward ? "outside every op (a composite op's own work, around the ops it called)"
      : "outside every node (backward()'s own work)", "var(--gv-border)");
  }

  sliceBox(i) {
    const w = TL_W - 2 * TL_PAD, tl = this.tl;
    return { x: (TL_PAD + w * tl.start[i] / this.end).toFixed(1), y: TL_PAD,
      width: Math.max(0.5, w * tl.us[i] / this.end).toFixed(1), height: TL_H - 2 * TL_PAD };
  }

  keyItem(text, colour) {
    const item = tag("span", undefined, this.key);
    tag("span", undefined, item, "gv-sw").style.background = colour;
    tag("span", text, item);
  }

  // the ops (memory) or slices (time) that belong to `node`, outlined; the cursor goes to the first of them
  light(node) {
    this.litNode = node;
    this.marks.replaceChildren();
    const lit = node >= 0 ? this.tl.node.flatMap((n, i) => (n === node ? [i] : [])) : [];
    for (const i of lit) {
      if (this.time) svg("rect", { class: "gv-tl-lit", ...this.sliceBox(i) }, this.marks);
      else {
        const x = this.x(i).toFixed(1);
        svg("line", { class: "gv-tl-lit", x1: x, x2: x, y1: 0, y2: TL_H }, this.marks);
      }
    }
    this.chart.dataset.lit = String(lit.length);
    if (lit.length && !lit.includes(this.at)) this.moveTo(lit[0]);
  }

  describe(i) {
    const tl = this.tl, s = tl.strings, node = tl.node[i];
    if (this.time) {
      const share = tl.total ? tl.us[i] / tl.total : 0, name = s[tl.name[i]];
      return `${node >= 0 ? `node ${node}: ${name}` : `outside every ${this.unit}: ${name}`} — ${tlMicros(tl.us[i])}, ` +
        `${(100 * share).toFixed(1)}% of the ${this.clock}, from ${tlMicros(tl.start[i])}\n  ` +
        (node >= 0 ? "(click or Enter to select it)" : `no ${this.unit} of the graph ran this`);
    }
    const graph = this.controller.panes[0].graph, held = node >= 0 ? graph.nodes[node].label : "";
    const line = s[tl.line[i]] ? `\n  at ${s[tl.line[i]]}` : "";
    return `op ${i}: ${s[tl.op[i]]} (${s[tl.phase[i]]}, ${s[tl.module[i]]}) — live ${tlBytes(tl.live[i])}${line}\n  ` +
      (held ? `held by node ${node}: ${held} (click or Enter to select it)` : "no backward node holds bytes made here");
  }

  moveTo(i) {
    if (!this.tl.node.length) return;          // nothing ran: nothing to point at
    this.at = Math.max(0, Math.min(this.tl.node.length - 1, i));
    const x = this.x(this.at).toFixed(1);
    for (const [k, v] of [["x1", x], ["x2", x]]) this.cursor.setAttribute(k, v);
    this.chart.setAttribute("aria-valuenow", this.at);
    this.text.textContent = this.describe(this.at);
  }

  choose() {
    const node = this.tl.node[this.at], c = this.controller, pane = c.panes[0];
    if (node < 0) return;
    const groups = pane.graph.nodes[node].group;
    if (groups.some((g) => !pane.expanded.has(g))) {
      groups.forEach((g) => pane.expanded.add(g));
      pane.relayout();
      c.afterLayout();
    }
    c.select(pane, node);
    if (pane.view.boxOf.has(node)) pane.centreOn(pane.view.boxOf.get(node));
    this.text.textContent = this.describe(this.at).replace("(click or Enter to select it)", "(selected below)");
  }

  along(event) {              // where the pointer is, from 0 (the chart's first point) to 1 (its last)
    const r = this.chart.getBoundingClientRect(), f = (event.clientX - r.left) / Math.max(1, r.width);
    return (f * TL_W - TL_PAD) / (TL_W - 2 * TL_PAD);
  }

  index(event) {
    const along = this.along(event), n = this.tl.node.length;
    if (!this.time) return Math.round(along * Math.max(0, n - 1));
    const t = along * this.end, start = this.tl.start;
    let lo = 0, hi = n - 1;                     // the last slice that starts at or before t (they are in order)
    while (lo < hi) { const mid = (lo + hi + 1) >> 1; if (start[mid] <= t) lo = mid; else hi = mid - 1; }
    return lo;
  }

  // On a time-line, a moment after slice i ended and before the next began: no profiled event ran there, so
  // hover names the gap and a click selects nothing.
  gap(event, i) {
    if (!this.time) return "";
    const t = this.along(event) * this.end, end = this.tl.start[i] + this.tl.us[i];
    if (t <= end || i >= this.tl.node.length - 1 && t > this.end) return "";
    return `a gap at ${tlMicros(t)}: no profiled event ran here (after ${this.tl.strings[this.tl.name[i]]}, ` +
      `which ended at ${tlMicros(end)})`;
  }

  point(event) {               // hover: the slice under the pointer, or the gap it is in
    const i = this.index(event), gap = this.gap(event, i);
    this.moveTo(i);
    if (gap) this.text.textContent = gap;
    return !gap;
  }

  wire() {
    const c = this.chart, n = this.tl.node.length;
    c.addEventListener("mousemove", (e) => this.point(e));
    c.addEventListener("click", (e) => { if (this.point(e)) this.choose(); });
    c.addEventListener("keydown", (e) => {
      const steps = { ArrowLeft: -1, ArrowRight: 1, PageUp: -Math.ceil(n / 20), PageDown: Math.ceil(n / 20) };
      if (e.key in steps) this.moveTo((this.at < 0 ? 0 : this.at) + steps[e.key] * (e.shiftKey ? 10 : 1));
      else if (e.key === "Home") this.moveTo(0);
      else if (e.key === "End") this.moveTo(n - 1);
      else if (e.key === "Enter" || e.key === " ") { if (this.at < 0) this.moveTo(0); this.choose(); }
      else return;
      e.preventDefault();
    });
  }
}
