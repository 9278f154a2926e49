// The front-end of nbhelpers.memory_timeline, joined into graph_view's ES module (graph_view.esm_source()): a
// diagnosis's live bytes after every op, stacked by category or by module, above its backward graph. Hover
// (or the arrow keys) shows the op, its module and the learner's line; a click (or Enter) selects the backward
// node that holds those bytes in the graph below. Names come from user code: they go in with textContent.
const TL_PALETTE = ["#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7", "#9c755f"];
const TL_W = 720, TL_H = 150, TL_PAD = 8;
const TL_CSS = `
.gv-tl { margin: 4px 0 8px; }
.gv-tl-head { display: flex; gap: 8px; align-items: center; flex-wrap: wrap; font-weight: bold; }
.gv-tl-head button[aria-pressed="true"] { background: var(--gv-match); color: var(--gv-bg); }
.gv-tl-chart { width: 100%; height: ${TL_H}px; display: block; border: 1px solid var(--gv-border); cursor: crosshair; }
.gv-tl-cursor { stroke: var(--gv-sel); stroke-width: 1.5; }
.gv-tl-info { min-height: 1.5em; font-family: monospace; font-size: 12px; white-space: pre-wrap; }
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

function tlBytes(n) {
  return n >= 1 << 20 ? `${(n / (1 << 20)).toFixed(1)} MiB` : n >= 1024 ? `${(n / 1024).toFixed(1)} KiB` : `${n} B`;
}

class Timeline {
  constructor(tl, parent, controller) {
    Object.assign(this, { tl, controller, by: "category", at: -1 });
    const root = tag("div", undefined, parent, "gv-tl");
    tag("style", TL_CSS, root);
    const head = tag("div", undefined, root, "gv-tl-head");
    tag("span", `${tl.title} (peak ${tlBytes(tl.peak)})`, head);
    this.buttons = ["category", "module"].map((by) => {
      const b = tag("button", `by ${by}`, head, `gv-tl-by-${by}`);
      b.addEventListener("click", () => this.draw(by));
      return b;
    });
    this.chart = svg("svg", { class: "gv-tl-chart", viewBox: `0 0 ${TL_W} ${TL_H}`, preserveAspectRatio: "none",
      tabindex: 0, role: "slider", "aria-label": "memory timeline: arrow keys move along the ops, Enter selects the node that holds the bytes",
      "aria-valuemin": 0, "aria-valuemax": Math.max(0, tl.live.length - 1), "aria-valuenow": 0 }, root);
    this.key = tag("div", undefined, root, "gv-legend");
    this.text = tag("div", "Hover the timeline for an op; click it to select the node that holds its bytes.", root, "gv-tl-info");
    this.text.setAttribute("aria-live", "polite");
    this.wire();
    this.draw("category");
  }

  x(i) { return TL_PAD + (TL_W - 2 * TL_PAD) * (this.tl.live.length > 1 ? i / (this.tl.live.length - 1) : 0.5); }
  y(bytes) { return TL_H - TL_PAD - (TL_H - 3 * TL_PAD) * bytes / Math.max(1, this.tl.peak); }

  draw(by) {
    this.by = by;
    this.buttons.forEach((b, k) => b.setAttribute("aria-pressed", String(["category", "module"][k] === by)));
    const { names, values } = timelineSeries(this.tl, by), n = this.tl.live.length;
    this.chart.replaceChildren();
    let below = new Array(n).fill(0);
    this.key.replaceChildren();
    names.forEach((name, k) => {
      const top = below.map((b, i) => b + values[k][i]);
      if (values[k].some((v) => v)) {
        const along = top.map((v, i) => `${this.x(i).toFixed(1)},${this.y(v).toFixed(1)}`);
        const back = below.map((v, i) => `${this.x(i).toFixed(1)},${this.y(v).toFixed(1)}`).reverse();
        svg("polygon", { points: along.concat(back).join(" "), fill: TL_PALETTE[k % TL_PALETTE.length] }, this.chart);
        const item = tag("span", undefined, this.key);
        tag("span", undefined, item, "gv-sw").style.background = TL_PALETTE[k % TL_PALETTE.length];
        tag("span", `${name} (peak ${tlBytes(values[k].reduce((m, v) => Math.max(m, v), 0))})`, item);
      }
      below = top;
    });
    this.cursor = svg("line", { class: "gv-tl-cursor", y1: 0, y2: TL_H, x1: -10, x2: -10 }, this.chart);
    if (this.at >= 0) this.moveTo(this.at);
  }

  describe(i) {
    const tl = this.tl, s = tl.strings, node = tl.node[i];
    const graph = this.controller.panes[0].graph, held = node >= 0 ? graph.nodes[node].label : "";
    const line = s[tl.line[i]] ? `\n  at ${s[tl.line[i]]}` : "";
    return `op ${i}: ${s[tl.op[i]]} (${s[tl.phase[i]]}, ${s[tl.module[i]]}) — live ${tlBytes(tl.live[i])}${line}\n  ` +
      (held ? `held by node ${node}: ${held} (click or Enter to select it)` : "no backward node holds bytes made here");
  }

  moveTo(i) {
    this.at = Math.max(0, Math.min(this.tl.live.length - 1, i));
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

  index(event) {
    const r = this.chart.getBoundingClientRect(), f = (event.clientX - r.left) / Math.max(1, r.width);
    const x = f * TL_W, n = this.tl.live.length;
    return Math.round((x - TL_PAD) / (TL_W - 2 * TL_PAD) * Math.max(0, n - 1));
  }

  wire() {
    const c = this.chart, n = this.tl.live.length;
    c.addEventListener("mousemove", (e) => this.moveTo(this.index(e)));
    c.addEventListener("click", (e) => { this.moveTo(this.index(e)); this.choose(); });
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
