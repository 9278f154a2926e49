// The front-end of nbhelpers.graph_view, part 4 of 4: the drawing and every interaction (click, hover,
// search, expand/collapse one module, pan/zoom, keyboard, stepper, one selection across a diff's panes),
// the legend, the theme (JupyterLab's, else the system's) and a table of the nodes for screen readers.
// Names come from user code: they go in with textContent, never as HTML.
const KINDS = { op: "op", saves: "op that saves tensors for backward", leaf: "leaf: fills a parameter's .grad",
  group: "module, collapsed: click to expand", input: "input", line: "source line", break: "graph break",
  kernel: "generated kernel", call: "a call of the compiled function", entry: "a compiled entry (guards and graphs)",
  guard: "a guard that failed: why it recompiled", error: "the op that raised: the forward stopped here",
  fold: "repeated blocks, folded: click to open one" };
const FILLS = { line: "linebox", call: "input", entry: "op", guard: "break" };   // kinds that share a colour
const timeBarKey = (clock) => `bar: share of the ${clock}'s time (full: the slowest box)`;   // graph_boxes.TIME_BAR
const MARKS = { added: "only in the right graph", removed: "only in the left graph", changed: "saved bytes differ" };
const STATES = { selected: "selected", linked: "linked to the selection", match: "matches the search",
  share: "shares saved memory with the hovered box", run: "runs now (the stepper)",
  saved: "made a tensor the selected backward node saved" };
const CSS = `
.gv { --gv-bg: var(--jp-layout-color0, #fff); --gv-fg: var(--jp-ui-font-color0, #111); --gv-line: #777;
  --gv-border: var(--jp-border-color1, #bbb); --gv-op: #dbe8f7; --gv-leaf: #d9f2d9; --gv-saves: #fde7c8;
  --gv-group: #ece6f5; --gv-input: #d9f2d9; --gv-linebox: #f1f1f1; --gv-break: #f7c6c6; --gv-kernel: #fde7c8;
  --gv-stroke: #555; --gv-added: #1a7f1a; --gv-removed: #c22; --gv-changed: #b06000; --gv-match: #0560c0;
  --gv-sel: #c00; --gv-share: #ffe27a; --gv-run: #ffb347; --gv-linked: #9fe39f; --gv-box-fg: #111;
  --gv-error: #e05252; --gv-saved: #8fd0ff; --gv-fold: #f3dcef; --gv-heat: #d9480f;
  font: 13px sans-serif; color: var(--gv-fg); background: var(--gv-bg); }
.gv.gv-dark { --gv-bg: #1e1e1e; --gv-fg: #eee; --gv-line: #999; --gv-border: #555; --gv-op: #233a57; --gv-leaf: #1f4a2a; --gv-saves: #5a3d12;
  --gv-group: #3b3055; --gv-input: #1f4a2a; --gv-linebox: #333; --gv-break: #6a2424; --gv-kernel: #5a3d12;
  --gv-stroke: #aaa; --gv-added: #5fd35f; --gv-removed: #ff7b7b; --gv-changed: #ffb454; --gv-match: #6cb6ff;
  --gv-sel: #ff5c5c; --gv-share: #7a6a10; --gv-run: #8a5200; --gv-linked: #2f6f2f; --gv-box-fg: #f2f2f2;
  --gv-error: #8c2a2a; --gv-saved: #1d5a80; --gv-fold: #5a2f52; --gv-heat: #ff8c42; }
.gv button, .gv input { font: inherit; color: inherit; background: var(--gv-bg); border: 1px solid var(--gv-border);
  border-radius: 3px; padding: 1px 6px; }
.gv button:disabled { opacity: 0.6; }
.gv :focus-visible { outline: 2px solid var(--gv-match); outline-offset: 1px; }
.gv-bar { display: flex; gap: 6px; align-items: center; margin-bottom: 4px; flex-wrap: wrap; }
.gv-info { min-height: 1.5em; overflow: hidden; white-space: nowrap; text-overflow: ellipsis; }
.gv-panes { display: flex; gap: 8px; }
.gv-pane { flex: 1; min-width: 0; }
.gv-title { font-weight: bold; min-height: 1.5em; }
.gv-hint { font-size: 12px; text-align: right; color: var(--gv-fg); }
.gv-stage { border: 1px solid var(--gv-border); height: 480px; overflow: hidden; cursor: grab; background: var(--gv-bg); }
.gv-stage { position: relative; }
.gv-stage svg, .gv-canvas { width: 100%; height: 100%; display: block; }
.gv-canvas { position: absolute; left: 0; top: 0; }
.gv-canvas[hidden] { display: none; }
.gv-stage text { font-family: "DejaVu Sans Mono", Menlo, Consolas, monospace; fill: var(--gv-box-fg); pointer-events: none; }
.gv-box rect { stroke: var(--gv-stroke); }
${Object.keys(KINDS).map((k) => `.gv-k-${k} rect, .gv-sw.gv-k-${k} { fill: var(--gv-${FILLS[k] || k}); background: var(--gv-${FILLS[k] || k}); }`).join("\n")}
.gv-box.gv-added rect, .gv-sw.gv-added { stroke: var(--gv-added); border-color: var(--gv-added); stroke-width: 3; stroke-dasharray: 5 2; }
.gv-box.gv-removed rect, .gv-sw.gv-removed { stroke: var(--gv-removed); border-color: var(--gv-removed); stroke-width: 3; stroke-dasharray: 5 2; }
.gv-box.gv-changed rect, .gv-sw.gv-changed { stroke: var(--gv-changed); border-color: var(--gv-changed); stroke-width: 3; }
.gv-box.gv-match rect, .gv-sw.gv-match { stroke: var(--gv-match); border-color: var(--gv-match); stroke-width: 3; }
.gv-box.gv-selected rect, .gv-sw.gv-selected { stroke: var(--gv-sel); border-color: var(--gv-sel); stroke-width: 4; }
.gv-box.gv-share rect, .gv-sw.gv-share { fill: var(--gv-share); background: var(--gv-share); }
.gv-box.gv-run rect, .gv-sw.gv-run { fill: var(--gv-run); background: var(--gv-run); }
.gv-box.gv-linked rect, .gv-sw.gv-linked { fill: var(--gv-linked); background: var(--gv-linked); stroke-width: 3; }
.gv-box.gv-saved rect, .gv-sw.gv-saved { fill: var(--gv-saved); background: var(--gv-saved); stroke-width: 3; }
.gv-edge { fill: none; stroke: var(--gv-line); }
.gv .gv-box rect.gv-time, .gv-sw.gv-time { fill: var(--gv-heat); background: var(--gv-heat); stroke: none; }
.gv-stage text.gv-elabel { fill: var(--gv-fg); paint-order: stroke; stroke: var(--gv-bg); stroke-width: 3px; }
.gv-edge.gv-hot { stroke: var(--gv-sel); stroke-width: 2.5; }
.gv-legend { display: flex; flex-wrap: wrap; gap: 4px 14px; margin: 4px 0; font-size: 12px; }
.gv-legend span { display: inline-flex; align-items: center; gap: 4px; }
.gv-sw { display: inline-block; width: 12px; height: 12px; border: 2px solid var(--gv-stroke); border-radius: 3px; background: var(--gv-bg); }
.gv-details { margin-top: 6px; padding: 6px; border: 1px solid var(--gv-border); min-height: 2em; }
.gv-details dt { font-weight: bold; float: left; clear: left; width: 8em; }
.gv-details dd { margin-left: 8.5em; font-family: monospace; white-space: pre-wrap; max-height: 24em; overflow: auto; }
.gv-path button { margin-right: 4px; }
.gv-folds { display: flex; flex-wrap: wrap; gap: 4px 12px; font-size: 12px; margin-bottom: 2px; }
.gv-folds select { font: inherit; color: inherit; background: var(--gv-bg); border: 1px solid var(--gv-border); }
.gv-table table { border-collapse: collapse; font-size: 12px; }
.gv-table td, .gv-table th { border: 1px solid var(--gv-border); padding: 1px 4px; text-align: left; }
@media print { .gv-bar, .gv-info, .gv-table { display: none; } .gv-stage { height: auto !important; border: 0; }
  .gv { --gv-bg: #fff; --gv-fg: #000; } }
`;

let arrows = 0;

function svg(tag, attrs, parent) {
  const node = document.createElementNS(SVG_NS, tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, String(v));
  if (parent) parent.appendChild(node);
  return node;
}

function tag(name, text, parent, cls) {
  const node = document.createElement(name);
  if (text !== undefined) node.textContent = text;
  if (cls) node.className = cls;
  if (parent) parent.appendChild(node);
  return node;
}

async function decode(text) {        // graph_view._text: base64 of raw-deflated JSON
  const bytes = Uint8Array.from(atob(text), (c) => c.charCodeAt(0));
  const stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("deflate-raw"));
  return JSON.parse(await new Response(stream).text());
}

function followTheme(root) {    // JupyterLab says on <body>; elsewhere (a static page too) the system's
  const media = window.matchMedia("(prefers-color-scheme: dark)");
  const apply = () => {
    const lab = document.querySelector(".jp-LabShell") && document.body.dataset.jpThemeLight;
    root.classList.toggle("gv-dark", lab ? lab === "false" : media.matches);
  };
  apply();
  const observer = new MutationObserver(apply);
  observer.observe(document.body, { attributes: true, attributeFilter: ["data-jp-theme-light"] });
  media.addEventListener("change", apply);
  return () => { observer.disconnect(); media.removeEventListener("change", apply); };
}

const CULL = 1500, MAX_SVG = 1500;     // boxes: above CULL only what is on screen is drawn; above MAX_SVG, on a canvas

// Far zoom: the boxes and edges around the frame are drawn once into an offscreen canvas twice the frame's
// size each way, and a pan inside it only copies that picture (a 20,000-box redraw is ~30 ms; a copy, ~1).
function drawCanvas(canvas, stage, v, f, cache) {
  const r = stage.getBoundingClientRect(), ratio = window.devicePixelRatio || 1, scale = (r.width / f.w) * ratio;
  canvas.width = Math.round(r.width * ratio);
  canvas.height = Math.round(r.height * ratio);
  const inside = cache && cache.scale === scale && f.x >= cache.x && f.y >= cache.y
    && f.x + f.w <= cache.x + 2 * f.w && f.y + f.h <= cache.y + 2 * f.h;
  if (!inside) cache = paintRegion(stage, v, { x: f.x - f.w / 2, y: f.y - f.h / 2, w: 2 * f.w, h: 2 * f.h }, scale);
  canvas.getContext("2d").drawImage(cache.picture, (cache.x - f.x) * scale, (cache.y - f.y) * scale);
  return cache;
}

function paintRegion(stage, v, region, scale) {
  const picture = document.createElement("canvas"), css = getComputedStyle(stage);
  picture.width = Math.ceil(region.w * scale);
  picture.height = Math.ceil(region.h * scale);
  const ctx = picture.getContext("2d"), meets = (x0, y0, x1, y1) => x1 >= region.x && x0 <= region.x + region.w
    && y1 >= region.y && y0 <= region.y + region.h;
  ctx.setTransform(scale, 0, 0, scale, -region.x * scale, -region.y * scale);
  ctx.beginPath();                            // every edge in one path, every fill in one path each
  for (const e of v.edges) if (meets(...e.box)) e.points.forEach(([x, y], k) => (k ? ctx.lineTo(x, y) : ctx.moveTo(x, y)));
  ctx.strokeStyle = css.getPropertyValue("--gv-line").trim() || "#777";
  ctx.lineWidth = 1 / scale;
  ctx.stroke();
  const byKind = new Map();
  for (const b of v.boxes) {
    if (!meets(b.x, b.y, b.x + b.w, b.y + b.h)) continue;
    if (!byKind.has(b.kind)) byKind.set(b.kind, []);
    byKind.get(b.kind).push(b);
  }
  for (const [kind, boxes] of byKind) {
    ctx.beginPath();
    for (const b of boxes) ctx.rect(b.x, b.y, b.w, b.h);
    ctx.fillStyle = css.getPropertyValue(`--gv-${FILLS[kind] || kind}`).trim();
    ctx.fill();
    ctx.strokeStyle = css.getPropertyValue("--gv-stroke").trim();
    ctx.stroke();
  }
  ctx.fillStyle = css.getPropertyValue("--gv-heat").trim();
  for (const b of v.boxes) if (b.share && meets(b.x, b.y, b.x + b.w, b.y + b.h)) ctx.fillRect(...timeBar(b, v.longest));
  return { picture, scale, x: region.x, y: region.y };
}

function readable(stage, f) {
  return ((stage.getBoundingClientRect().width || 760) / f.w) * SUB_FONT >= 4;
}

// graph_boxes._time_bar: along the bottom edge, 3 px from the sides and 3 px high, as long as the box's share of
// the measured time is of the longest's
function timeBar(b, longest) {
  return [b.x + 3, b.y + b.h - 4, (b.w - 6) * b.share / longest, 3];
}

function drawBox(b, i, picture, texts, longest) {
  const marks = b.mark ? [`gv-${b.mark}`] : [];
  const g = svg("g", { class: ["gv-box", `gv-k-${b.kind}`, ...marks].join(" "), "data-box": i, "data-key": b.key }, picture);
  svg("rect", { x: b.x, y: b.y, width: b.w, height: b.h, rx: 5 }, g);
  const rows = b.lines.length === 1 ? [[b.lines[0], b.y + b.h / 2 + 4, FONT]]
    : [[b.lines[0], b.y + 14, FONT], [b.lines[1], b.y + b.h - 6, SUB_FONT]];
  for (const [text, y, size] of texts ? rows : []) {       // under 4 px on screen, text is left out
    svg("text", { x: b.x + b.w / 2, y, "font-size": size, "text-anchor": "middle" }, g).textContent = text;
  }
  if (b.share && longest) {
    const [x, y, width, height] = timeBar(b, longest);
    svg("rect", { x, y, width, height, class: "gv-time" }, g);
  }
  svg("title", {}, g).textContent = b.title;
  return g;
}

// One drawn graph: what is open in it, its view box, and what is marked in it.
class Pane {
  constructor(graph, parent, hooks, side) {
    Object.assign(this, { graph, side, expanded: new Set(graph.expanded), view: null, frame: null, selected: -1,
      cursor: -1, step: -1, query: "", hits: [] });
    const pane = tag("div", undefined, parent, "gv-pane");
    tag("div", graph.title, pane, "gv-title");
    this.hint = tag("div", "", pane, "gv-hint");           // says so when the graph goes on past the frame
    this.foldBar = tag("div", undefined, pane, "gv-folds");   // a chooser per open fold: which copy it shows
    const stage = this.stage = tag("div", undefined, pane, "gv-stage");
    stage.tabIndex = 0;
    stage.setAttribute("role", "group");
    stage.setAttribute("aria-label", `${graph.title || "graph"}: arrow keys move between boxes, Enter opens a module, `
      + "Escape clears, + and - zoom");
    this.picture = svg("svg", { preserveAspectRatio: "xMidYMin meet", "aria-hidden": "true" }, stage);
    this.canvas = tag("canvas", undefined, stage, "gv-canvas");    // far zoom on a big view: no DOM per box
    this.canvas.hidden = true;
    this.canvas.addEventListener("click", (event) => this.clickCanvas(event, hooks));
    this.hooks = hooks;
    panZoom(this, stage);
    stage.addEventListener("keydown", (event) => hooks.key(this, event));
  }

  boxElement(i) {        // a culled box has no element: a stand-in that ignores the mark
    return this.picture.querySelector(`g[data-box="${i}"]`) || { classList: { add() {} } };
  }

  applyFrame() {
    const f = this.frame;
    this.picture.setAttribute("viewBox", `${f.x} ${f.y} ${f.w} ${f.h}`);
    this.showHint();
    if (this.texts !== undefined && this.texts !== readable(this.stage, f)) this.paint(true);   // zoomed past 4 px
    else if (this.view.boxes.length > CULL && !this.pending) {      // a big view redraws what is on screen
      this.pending = true;
      requestAnimationFrame(() => { this.pending = false; this.paint(false); });
    }
  }

  showHint() {     // a graph cut at the frame's edge (never shrunk below 10 px text) says it goes on, and where
    const f = this.frame, width = this.view.width, left = f.x > 0.5, right = f.x + f.w < width - 0.5;
    this.hint.hidden = !(left || right);
    if (this.hint.hidden) return;
    const where = left && right ? "← more on both sides →" : left ? "← more to the left" : "more to the right →";
    this.hint.textContent = `${where} · the graph is ${Math.round(width).toLocaleString("en-US")} px wide, `
      + `${Math.round((100 * f.w) / width)} % shown: drag it sideways, or zoom out (wheel or −)`;
  }

  fit() {     // the width fitted, never magnified nor shrunk below 10 px text; the rest pans
    const stage = this.stage, width = stage.clientWidth || 760, v = this.view;     // inside the border: what the SVG fills
    const scale = Math.max(MIN_TEXT_PX / SUB_FONT, Math.min(1, width / v.width));
    const height = Math.max(160, Math.min(600, v.height * scale + 2));
    stage.style.height = `${height + stage.offsetHeight - stage.clientHeight}px`;
    const w = width / scale, root = v.boxes[0];                 // too wide: the root (the output) in the middle
    const x = w >= v.width ? (v.width - w) / 2 : Math.max(0, Math.min(v.width - w, root.x + root.w / 2 - w / 2));
    this.frame = { x, y: 0, w, h: height / scale };
    this.applyFrame();
  }

  relayout() {
    this.view = viewOf(this.graph, this.expanded);
    this.view.edges.forEach((e) => {          // each edge's bounding box, to find those on screen
      const xs = e.points.map((q) => q[0]), ys = e.points.map((q) => q[1]);
      e.box = [Math.min(...xs), Math.min(...ys), Math.max(...xs), Math.max(...ys)];
    });
    this.drawn = null;
    this.cache = null;
    this.cursor = this.view.boxOf.has(this.selected) ? this.view.boxOf.get(this.selected) : -1;
    this.fit();
    this.paint(true);
  }

  // Draw the boxes and edges in `region` (all of a small view) as SVG; on a big view zoomed out so far that
  // more than MAX_SVG boxes are on screen, draw them on the canvas instead (no text: it would be < 4 px).
  paint(force) {
    const v = this.view, f = this.frame, d = this.drawn;
    if (!force && d && f.x >= d.x && f.y >= d.y && f.x + f.w <= d.x + d.w && f.y + f.h <= d.y + d.h) return;
    const big = v.boxes.length > CULL;
    const region = { x: f.x - f.w / 4, y: f.y - f.h / 4, w: 1.5 * f.w, h: 1.5 * f.h };   // the frame and a margin
    const meets = (x0, y0, x1, y1) => !big
      || (x1 >= region.x && x0 <= region.x + region.w && y1 >= region.y && y0 <= region.y + region.h);
    const boxes = v.boxes.map((b, i) => i).filter((i) => { const b = v.boxes[i]; return meets(b.x, b.y, b.x + b.w, b.y + b.h); });
    const far = big && boxes.length > MAX_SVG;
    this.texts = readable(this.stage, f);
    this.canvas.hidden = !far;
    this.stage.dataset.drawn = `${boxes.length} ${far ? "canvas" : "svg"}`;    // what a test (or a curious reader) can see
    this.picture.replaceChildren();
    if (far) { this.drawn = null; this.cache = drawCanvas(this.canvas, this.stage, v, f, this.cache); return; }
    this.drawSvg(boxes, meets);
    this.drawn = big ? region : null;
    this.mark();
  }

  drawSvg(boxes, meets) {
    const v = this.view, picture = this.picture, arrow = `gv-arrow-${++arrows}`;     // ids are page-wide: one per drawing
    const marker = svg("marker", { id: arrow, viewBox: "0 0 6 6", refX: 6, refY: 3, markerWidth: 6,
      markerHeight: 6, orient: "auto" }, svg("defs", {}, picture));
    svg("path", { d: "M0,0 L6,3 L0,6 z", fill: "var(--gv-line)" }, marker);
    v.edges.forEach((e, i) => {
      if (!meets(...e.box)) return;
      svg("polyline", { points: e.points.map((q) => q.join(",")).join(" "), class: "gv-edge",
        "marker-end": `url(#${arrow})`, "data-edge": i }, picture);
      if (e.labelAt && this.texts) {      // placed by placeLabels: clear of every box and other label
        const [x, y] = e.labelAt;
        svg("text", { x, y, "font-size": EDGE_FONT, class: "gv-elabel" }, picture).textContent = e.label;
      }
    });
    for (const i of boxes) {
      const g = drawBox(v.boxes[i], i, picture, this.texts, v.longest);
      g.addEventListener("click", () => this.hooks.click(this, i));
      g.addEventListener("mouseenter", () => this.hooks.hover(this, i));
      g.addEventListener("mouseleave", () => this.hooks.hover(this, -1));
    }
  }

  clickCanvas(event, hooks) {          // the canvas has no boxes to click: find the one hit
    const r = this.stage.getBoundingClientRect(), f = this.frame;
    const x = f.x + ((event.clientX - r.left) / r.width) * f.w, y = f.y + ((event.clientY - r.top) / r.height) * f.h;
    const hit = this.view.boxes.findIndex((b) => x >= b.x && x <= b.x + b.w && y >= b.y && y <= b.y + b.h);
    if (hit >= 0) hooks.click(this, hit);
  }

  mark() {
    for (const cls of ["gv-selected", "gv-run", "gv-match", "gv-linked", "gv-saved"]) {
      this.picture.querySelectorAll(`.${cls}`).forEach((g) => g.classList.remove(cls));
    }
    const boxOf = this.view.boxOf, graph = this.graph;
    if (this.cursor >= 0) this.boxElement(this.cursor).classList.add("gv-selected");
    if (this.selected >= 0) {
      for (const k of graph.nodes[this.selected].links) {     // what the clicked node became, or came from
        if (boxOf.get(k) !== boxOf.get(this.selected)) this.boxElement(boxOf.get(k)).classList.add("gv-linked");
      }
    }
    for (const k of this.lit || []) if (boxOf.has(k)) this.boxElement(boxOf.get(k)).classList.add("gv-saved");
    const running = graph.order[this.step];
    if (this.step >= 0 && boxOf.has(running)) this.boxElement(boxOf.get(running)).classList.add("gv-run");
    this.hits = [];
    if (this.query) {
      this.view.boxes.forEach((b, i) => {
        const texts = b.members.map((m) => `${graph.nodes[m].label} ${graph.nodes[m].path}`.toLowerCase());
        if (texts.some((t) => t.includes(this.query))) this.hits.push(i);
      });
      this.hits.forEach((i) => this.boxElement(i).classList.add("gv-match"));
    }
  }

  centreOn(i) {
    const b = this.view.boxes[i];
    this.frame.x = b.x + b.w / 2 - this.frame.w / 2;
    this.frame.y = Math.max(0, b.y + b.h / 2 - this.frame.h / 2);
    this.applyFrame();
  }

  hover(i) {
    const picture = this.picture, graph = this.graph;
    picture.querySelectorAll(".gv-hot, .gv-share").forEach((x) => x.classList.remove("gv-hot", "gv-share"));
    if (i < 0) return "";
    const edges = this.view.edges.filter((e) => e.from === i || e.to === i);
    this.view.edges.forEach((e, k) => {
      const line = (e.from === i || e.to === i) && picture.querySelector(`polyline[data-edge="${k}"]`);
      if (line) line.classList.add("gv-hot");
    });
    const mine = new Set(this.view.boxes[i].members.flatMap((m) => graph.nodes[m].storages));
    let sharing = 0;
    this.view.boxes.forEach((b, k) => {
      if (k !== i && b.members.some((m) => graph.nodes[m].storages.some((s) => mine.has(s)))) {
        this.boxElement(k).classList.add("gv-share");
        sharing += 1;
      }
    });
    return `${this.view.boxes[i].title}: ${edges.length} edges, ${sharing} boxes share its saved memory`;
  }
}

function panZoom(self, stage) {
  let drag = null;
  self.zoom = (scale, px, py) => {
    const f = self.frame;
    self.frame = { x: px - (px - f.x) * scale, y: py - (py - f.y) * scale, w: f.w * scale, h: f.h * scale };
    self.applyFrame();
  };
  stage.addEventListener("wheel", (event) => {
    event.preventDefault();
    const f = self.frame, r = stage.getBoundingClientRect();
    self.zoom(event.deltaY > 0 ? 1.15 : 1 / 1.15, f.x + ((event.clientX - r.left) / r.width) * f.w,
      f.y + ((event.clientY - r.top) / r.height) * f.h);
  }, { passive: false });
  stage.addEventListener("mousedown", (event) => { drag = { x: event.clientX, y: event.clientY, frame: { ...self.frame } }; });
  stage.addEventListener("mouseup", () => { drag = null; });
  stage.addEventListener("mouseleave", () => { drag = null; });
  stage.addEventListener("mousemove", (event) => {
    if (!drag) return;
    const r = stage.getBoundingClientRect();
    self.frame.x = drag.frame.x - ((event.clientX - drag.x) / r.width) * self.frame.w;
    self.frame.y = drag.frame.y - ((event.clientY - drag.y) / r.height) * self.frame.h;
    self.applyFrame();
  });
}

// Where an arrow key goes from box i: along an edge (down: where it leads, up: where it came from), or to
// the nearest box in the same row.
function neighbour(view, i, key) {
  const b = view.boxes[i], centre = (k) => view.boxes[k].x + view.boxes[k].w / 2;
  let options = [];
  if (key === "ArrowDown") options = view.edges.filter((e) => e.from === i).map((e) => e.to);
  else if (key === "ArrowUp") options = view.edges.filter((e) => e.to === i).map((e) => e.from);
  else {
    const right = key === "ArrowRight";
    options = view.boxes.map((_, k) => k).filter((k) => view.boxes[k].y === b.y && k !== i
      && (right ? centre(k) > centre(i) : centre(k) < centre(i)));
  }
  options.sort((p, q) => Math.abs(centre(p) - centre(i)) - Math.abs(centre(q) - centre(i)) || p - q);
  return options.length ? options[0] : i;
}

function legend(parent, panes) {
  parent.replaceChildren();
  const kinds = new Set(), marks = new Set();
  for (const p of panes) for (const b of p.view.boxes) { kinds.add(b.kind); if (b.mark) marks.add(b.mark); }
  const states = ["selected", "match", "share"];
  if (panes.some((p) => p.graph.nodes.some((n) => n.links.length))) states.push("linked");
  if (panes[0].graph.lit.size) states.push("saved");
  if (panes[0].graph.order.length) states.push("run");
  const items = [...[...kinds].map((k) => [`gv-k-${k}`, KINDS[k]]), ...[...marks].map((m) => [`gv-${m}`, MARKS[m]]),
    ...states.map((s) => [`gv-${s}`, STATES[s]])];
  const timed = panes.find((p) => p.view.longest);
  if (timed) items.push(["gv-time", timeBarKey(timed.graph.clock)]);
  for (const [cls, text] of items) {
    const item = tag("span", undefined, parent);
    tag("i", undefined, item, `gv-sw ${cls}`);
    tag("span", text, item);
  }
}

function nodeTable(parent, panes) {   // built when opened: every node, for screen readers and the find bar
  parent.replaceChildren();
  for (const p of panes) {
    const table = tag("table", undefined, parent);
    tag("caption", p.graph.title || "nodes", table);
    const head = tag("tr", undefined, tag("thead", undefined, table));
    for (const h of ["node", "label", "kind", "module", "saved bytes", "leads to"]) tag("th", h, head).scope = "col";
    const body = tag("tbody", undefined, table);
    p.graph.nodes.forEach((n, i) => {
      const row = tag("tr", undefined, body);
      for (const text of [String(i), n.label, n.kind, n.path || "(outside modules)", n.savedBytes.toLocaleString("en-US"),
        n.targets.map((t) => p.graph.nodes[t].label).join(", ")]) tag("td", text, row);
    });
  }
}

// The widget around the panes: the bar, the legend, the details panel, one selection, what is open, the
// stepper; and the traits it shares with Python (selected, step, expanded).
class Controller {
  constructor(model, el, graphs, timeline) {
    this.model = model;
    this.timer = null;
    const root = tag("div", undefined, el, "gv");
    tag("style", CSS, root);
    this.untheme = followTheme(root);
    this.buildBar(root);
    this.legendBox = tag("div", undefined, root, "gv-legend");
    this.info = tag("div", "", root, "gv-info");
    this.info.setAttribute("aria-live", "polite");
    if (timeline) this.timeline = new Timeline(timeline, root, this);    // memory or time, above the graph
    const row = tag("div", undefined, root, "gv-panes");
    this.panel = tag("div", "Click a box for its details; click a module to open it.", root, "gv-details");
    const tableBox = tag("details", undefined, root, "gv-table");
    tag("summary", "The nodes as a table", tableBox);
    const tableBody = tag("div", undefined, tableBox);
    tableBox.addEventListener("toggle", () => { if (tableBox.open) nodeTable(tableBody, this.panes); });
    this.panes = graphs.map((g, k) => new Pane(g, row, this, k));
  }

  buildBar(root) {
    const bar = tag("div", undefined, root, "gv-bar");
    this.search = tag("input", undefined, bar, "gv-search");
    this.search.placeholder = "search nodes";
    this.search.setAttribute("aria-label", "search nodes by label or module");
    const buttons = [["reset", "first view"], ["collapse", "− collapse all"], ["expand", "+ expand all"],
      ["counts"], ["back", "◀ step"], ["forward", "step ▶"], ["play", "play"], ["fit", "fit"]];
    this.buttons = {};
    for (const [name, text] of buttons) {
      this.buttons[name] = text === undefined ? tag("span", "", bar, "gv-count") : tag("button", text, bar, `gv-${name}`);
    }
  }

  sync(name, value) {
    this.model.set(name, value);
    try {
      this.model.save_changes();          // to the kernel, when there is one
    } catch (error) {
      // a static page has no kernel to tell: the view keeps working on its own
    }
  }

  showNode(pane, node) {
    const panel = this.panel;
    panel.replaceChildren();
    const n = pane.graph.nodes[node], where = this.panes.length > 1 ? `${pane.graph.title}: ` : "";
    tag("div", `${where}${n.label} (node ${node})`, panel, "gv-heading");
    const list = tag("dl", undefined, panel);
    for (const [field, text] of n.rows) { tag("dt", field, list); tag("dd", text, list); }
    const path = tag("div", "module path (click to collapse): ", panel, "gv-path");
    n.group.forEach((module) => {
      const button = tag("button", module, path);
      button.title = `collapse ${module}`;
      button.addEventListener("click", () => this.setOpen(pane, module, false));
    });
    if (!n.group.length) tag("span", "(outside modules)", path);
    this.info.textContent = `selected ${n.label}` + (n.path ? ` in ${n.path}` : "");
  }

  showModule(pane, box) {
    this.panel.replaceChildren();
    tag("div", box.title, this.panel, "gv-heading");
    tag("div", box.kind === "fold" ? `Press Enter or click it to open ${pane.graph.folds[box.fold].names[box.first]}; `
      + "the other copies stay folded, and the chooser above the graph shows another instead."
      : "Press Enter or click it to open this module alone.", this.panel);
    this.info.textContent = `module ${box.title}`;
  }

  select(pane, node) {       // one selection: the other pane shows the node the diff matched to it
    const panes = this.panes;
    for (const p of panes) { p.selected = -1; p.cursor = -1; }
    if (node >= 0) {
      pane.selected = node;
      const other = panes.find((p) => p !== pane);
      const pair = other && pane.graph.matched.concat(other.graph.matched).find((m) => m[pane.side] === node);
      if (other && pair) other.selected = pair[other.side];
    }
    const lit = panes[0].graph.lit, chosen = panes.length > 1 ? panes[1].selected : -1;   // a twin view's
    panes[0].lit = lit.get(chosen) || [];
    for (const p of panes) { p.cursor = p.view.boxOf.has(p.selected) ? p.view.boxOf.get(p.selected) : -1; p.mark(); }
    if (this.timeline) this.timeline.light(panes[0].selected);      // the node's ops or slices, above
    if (node >= 0) this.showNode(pane, node);
    else { this.panel.replaceChildren(); this.info.textContent = "selection cleared"; }
    this.sync("selected", panes[0].selected);
  }

  setOpen(pane, path, open) {
    const targets = this.panes.length > 1 ? this.panes : [pane];     // a diff opens the same module on both sides
    for (const p of targets) {
      if (open) p.expanded.add(path);
      else for (const q of [...p.expanded]) if (q === path || q.startsWith(path + ".")) p.expanded.delete(q);
      p.relayout();
    }
    const box = pane.view.boxOf.get(pane.selected >= 0 ? pane.selected
      : pane.graph.nodes.findIndex((n) => n.group.includes(path)));
    if (box !== undefined) pane.centreOn(box);
    this.info.textContent = `${open ? "opened" : "collapsed"} ${path}: ${pane.view.boxes.length} boxes`;
    this.afterLayout();
  }

  // Show copy `path` of its fold alone, open as the first open copy was (the same modules open inside it), the
  // others folded, on every pane that has that fold; null folds them all.
  showCopy(pane, fold, path) {
    const targets = this.panes.length > 1 ? this.panes : [pane];
    for (const p of targets) {
      const at = p.graph.where.get(fold.copies[0]);
      if (!at) continue;
      const copies = p.graph.folds[at[0]].copies, was = copies.find((c) => p.expanded.has(c)), inside = [];
      for (const q of [...p.expanded]) {
        const copy = copies.find((c) => q === c || q.startsWith(c + "."));
        if (copy === undefined) continue;
        if (copy === was && q !== was) inside.push(q.slice(was.length));
        p.expanded.delete(q);
      }
      if (path !== null) [path, ...inside.map((suffix) => path + suffix)].forEach((q) => p.expanded.add(q));
      p.relayout();
    }
    if (path === null) {
      this.info.textContent = `folded ${foldLabel(fold)}: ${pane.view.boxes.length} boxes`;
      return this.afterLayout();
    }
    const k = pane.graph.where.get(path)[1];
    const box = pane.view.boxOf.get(pane.graph.nodes.findIndex((n) => n.group.includes(path)));
    if (box !== undefined) pane.centreOn(box);
    this.info.textContent = `showing ${fold.names[k]}, copy ${k + 1} of ${fold.copies.length} of ${foldLabel(fold)}: `
      + `${pane.view.boxes.length} boxes`;
    this.afterLayout();
  }

  // A chooser above the pane for each fold in sight with a copy open and others folded: the (first) copy it
  // shows, any other to pick instead, and a button to fold it again.
  foldChoosers(pane) {
    pane.foldBar.replaceChildren();
    pane.graph.folds.forEach((fold) => {
      const shown = fold.copies.findIndex((c) => pane.expanded.has(c)), copy = fold.copies[shown];
      if (shown < 0 || fold.copies.every((c) => pane.expanded.has(c))) return;
      const chain = pane.graph.nodes.find((n) => n.group.includes(copy)).group;
      if (!chain.slice(0, chain.indexOf(copy)).every((p) => pane.expanded.has(p))) return;   // its parent is shut
      const item = tag("span", undefined, pane.foldBar), label = tag("label", `${foldLabel(fold)}: showing `, item);
      const choose = tag("select", undefined, label);
      fold.names.forEach((name, k) => { const option = tag("option", name, choose); option.value = String(k); });
      choose.value = String(shown);
      choose.addEventListener("change", () => this.showCopy(pane, fold, fold.copies[Number(choose.value)]));
      const again = tag("button", "fold", item, "gv-fold-again");
      again.title = `fold ${foldLabel(fold)} again`;
      again.addEventListener("click", () => this.showCopy(pane, fold, null));
    });
  }

  setAll(expanded) {
    for (const p of this.panes) { p.expanded = new Set(expanded(p)); p.relayout(); }
    this.afterLayout();
  }

  afterLayout() {
    const boxes = (n) => `${n} box${n === 1 ? "" : "es"}`;
    this.panes.forEach((p) => this.foldChoosers(p));
    this.buttons.counts.textContent = this.panes.map((p) => `${boxes(p.view.boxes.length)} of ${p.graph.nodes.length} nodes`)
      .join(" | ");
    legend(this.legendBox, this.panes);
    this.sync("expanded", [...this.panes[0].expanded].sort());
  }

  click(pane, i) {                  // the panes' hooks: click, hover, key
    const b = pane.view.boxes[i];
    if (b.kind === "group") return this.setOpen(pane, b.key.slice(2), true);
    if (b.kind === "fold") return this.setOpen(pane, pane.graph.folds[b.fold].copies[b.first], true);
    this.select(pane, b.members[0]);
  }

  hover(pane, i) { this.info.textContent = pane.hover(i); }

  key(pane, event) {
    if (event.key === "Escape") this.select(pane, -1);
    else if (event.key === "Enter" && pane.cursor >= 0) this.click(pane, pane.cursor);
    else if (event.key === "+" || event.key === "-") {
      const f = pane.frame;
      pane.zoom(event.key === "+" ? 1 / 1.25 : 1.25, f.x + f.w / 2, f.y + f.h / 2);
    } else if (event.key.startsWith("Arrow")) this.moveCursor(pane, event.key);
    else return;
    event.preventDefault();
  }

  moveCursor(pane, key) {
    const v = pane.view, next = pane.cursor < 0 ? 0 : neighbour(v, pane.cursor, key), b = v.boxes[next];
    if (b.kind === "group" || b.kind === "fold") {
      this.select(pane, -1);
      pane.cursor = next;
      pane.mark();
      this.showModule(pane, b);
    } else this.select(pane, b.members[0]);
    pane.centreOn(next);
  }

  setStep(s) {
    const pane = this.panes[0], order = pane.graph.order;
    pane.step = Math.max(-1, Math.min(order.length - 1, s));
    pane.mark();
    this.sync("step", pane.step);
    if (pane.step < 0) return;
    const n = pane.graph.nodes[order[pane.step]];
    this.info.textContent = `step ${pane.step + 1} of ${order.length}: runs ${n.label}`
      + (n.kind === "leaf" ? ` and fills ${n.label}.grad` : "");
  }

  find() {
    const query = this.search.value.trim().toLowerCase(), panes = this.panes;
    panes.forEach((p) => { p.query = query; p.mark(); });
    if (!query) return;
    this.info.textContent = `${panes.map((p) => p.hits.length).join(" | ")} boxes match "${this.search.value.trim()}"`;
    panes.forEach((p) => { if (p.hits.length) p.centreOn(p.hits[0]); });
  }

  togglePlay() {
    const play = this.buttons.play, stop = () => { clearInterval(this.timer); this.timer = null; play.textContent = "play"; };
    if (this.timer) return stop();
    play.textContent = "pause";
    this.timer = setInterval(() => {
      if (this.panes[0].step >= this.panes[0].graph.order.length - 1) return stop();
      this.setStep(this.panes[0].step + 1);
    }, 400);
  }

  wireBar() {
    const b = this.buttons, first = this.panes[0];
    this.search.addEventListener("input", () => this.find());
    b.reset.addEventListener("click", () => this.setAll((p) => p.graph.expanded));
    b.collapse.addEventListener("click", () => this.setAll(() => []));
    b.expand.addEventListener("click", () => this.setAll((p) => p.graph.nodes.flatMap((n) => n.group)));
    b.back.addEventListener("click", () => this.setStep(first.step - 1));
    b.forward.addEventListener("click", () => this.setStep(first.step + 1));
    b.fit.addEventListener("click", () => this.panes.forEach((p) => p.fit()));
    for (const button of [b.back, b.forward, b.play]) button.hidden = !first.graph.order.length;
    b.play.addEventListener("click", () => this.togglePlay());
  }

  wireModel() {
    const model = this.model, first = this.panes[0];
    model.on("change:selected", () => { if (model.get("selected") !== first.selected) this.select(first, model.get("selected")); });
    model.on("change:step", () => { if (model.get("step") !== first.step) this.setStep(model.get("step")); });
    model.on("change:expanded", () => {
      const wanted = model.get("expanded");
      if (wanted.join("\n") === [...first.expanded].sort().join("\n")) return;
      first.expanded = new Set(wanted);
      first.relayout();
      this.afterLayout();
    });
  }

  start() {
    const model = this.model;
    this.wireBar();
    this.wireModel();
    this.panes[0].expanded = new Set(model.get("expanded"));         // the trait: Python's first view, or what was saved
    this.panes.forEach((p) => p.relayout());
    this.afterLayout();
    if (model.get("selected") >= 0) this.select(this.panes[0], model.get("selected"));
    if (model.get("step") >= 0) this.setStep(model.get("step"));
    return () => { if (this.timer) clearInterval(this.timer); this.untheme(); };
  }
}

async function render({ model, el }) {
  const texts = [model.get("graph"), model.get("other")].filter(Boolean);
  const graphs = (await Promise.all(texts.map(decode))).map(unpackState);
  const timeline = model.get("timeline") ? await decode(model.get("timeline")) : null;
  return new Controller(model, el, graphs, timeline).start();
}

export default { render };
