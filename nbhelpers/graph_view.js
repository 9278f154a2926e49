// The front-end of nbhelpers.graph_view: draws the views Python laid out (one graph, or two side by
// side for a diff) and handles clicks, hovers, search, collapse/expand, pan/zoom and the backward
// stepper in the browser, with no kernel. Names come from user code: they go in as text, never as HTML.
const SVG_NS = "http://www.w3.org/2000/svg";   // the SVG namespace name, not an address that is fetched
const FILL = { op: "#dbe8f7", leaf: "#d9f2d9", saves: "#fde7c8", group: "#ece6f5", input: "#d9f2d9",
  line: "#f4f4f4", break: "#f7c6c6", kernel: "#fde7c8" };
const CSS = `
.gv { font: 12px sans-serif; }
.gv-bar { display: flex; gap: 6px; align-items: center; margin-bottom: 4px; flex-wrap: wrap; }
.gv-info { height: 1.5em; overflow: hidden; white-space: nowrap; }
.gv-panes { display: flex; gap: 8px; }
.gv-pane { flex: 1; min-width: 0; }
.gv-title { font-weight: bold; height: 1.5em; }
.gv-stage { border: 1px solid #ccc; height: 480px; overflow: hidden; cursor: grab; background: #fff; }
.gv-stage svg { width: 100%; height: 100%; }
.gv-box rect { stroke: #555; }
.gv-box.gv-added rect { stroke: #2a2; stroke-width: 3; stroke-dasharray: 5 2; }
.gv-box.gv-removed rect { stroke: #c22; stroke-width: 3; stroke-dasharray: 5 2; }
.gv-box.gv-changed rect { stroke: #c70; stroke-width: 3; }
.gv-box.gv-match rect { stroke: #06c; stroke-width: 3; }
.gv-box.gv-selected rect { stroke: #c00; stroke-width: 4; }
.gv-box.gv-share rect { fill: #ffe27a; }
.gv-box.gv-run rect { fill: #ffb347; }
.gv-box.gv-linked rect { fill: #9fe39f; stroke: #181; stroke-width: 3; }
.gv-edge { fill: none; stroke: #aaa; }
.gv-edge.gv-hot { stroke: #d33; stroke-width: 2.5; }
.gv-details { margin-top: 6px; padding: 6px; border: 1px solid #ddd; min-height: 2em; }
.gv-details dt { font-weight: bold; float: left; clear: left; width: 8em; }
.gv-details dd { margin-left: 8.5em; font-family: monospace; white-space: pre-wrap; max-height: 24em; overflow: auto; }
.gv-path button { margin-right: 4px; }
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

function shownLabel(box) {
  return box.kind === "group" ? `${box.label} (${box.members.length})` : box.label;
}

// The state is compact: `modules` is [path, index of the module it ran in or -1] per module that ran; a
// node is [label, kind, index of its innermost module or -1, saved, targets, op, mark, links, notes], each saved tensor
// [attr without "_saved_", shape, dtype, bytes, storage id, version]; a box is [key, x, y, w] (all box_h tall; "n:5"
// is node 5, "g:A.b" the collapsed module A.b); an edge is [from, to, x of each layer it passes between].
function rowsOf(nodes, i, targetsLabel) {   // the same rows, in the same words, as graph_view.details()
  const n = nodes[i];
  const rows = n.op ? [["op", n.op]] : [];
  rows.push(["module", n.path || "(outside modules)"]);
  for (const [attr, shape, dtype, bytes, sid, version] of n.saved) {
    rows.push(["saved", sid >= 0
      ? `_saved_${attr} [${shape.join(", ")}] ${dtype} ${bytes.toLocaleString("en-US")} B storage #${sid} version ${version}`
      : `_saved_${attr} packed by a saved-tensor hook as ${dtype}: no tensor held`]);
  }
  const labels = n.targets.map((t) => nodes[t].label);
  rows.push([targetsLabel, labels.length ? labels.join(", ") : "none"]);
  if (n.mark) rows.push(["diff", n.mark]);
  rows.push(...n.notes);
  if (n.links.length) rows.push(["lights up", `${n.links.length} linked nodes`]);
  return rows;
}

function unpackBox(nodes, labels, membersOf, h, [key, x, y, w]) {
  if (key.startsWith("n:")) {
    const i = Number(key.slice(2));
    return { key, x, y, w, h, label: nodes[i].label, kind: nodes[i].kind, members: [i] };
  }
  const path = key.slice(2);
  return { key, x, y, w, h, label: labels.get(path), kind: "group", members: membersOf.get(path) || [] };
}

function chainOf(modules, index) {   // the modules running when a node was made, outermost first
  const chain = [];
  for (let k = index; k >= 0; k = modules[k][1]) chain.unshift(modules[k][0]);
  return chain;
}

// The polyline graph_layout drew: from the source box's edge, through one point pair per layer passed
// (an edge pointing up, which closes a cycle, runs from the source's top to the target's bottom).
function route(s, d, xs, graph) {
  const h = graph.box_h, step = graph.box_h + graph.layer_gap, down = d[2] > s[2];
  const points = [[s[1] + s[3] / 2, down ? s[2] + h : s[2]]];
  xs.forEach((x, k) => {
    const top = down ? s[2] + (k + 1) * step : s[2] - (k + 1) * step;
    points.push(down ? [x, top] : [x, top + h], down ? [x, top + h] : [x, top]);
  });
  points.push([d[1] + d[3] / 2, down ? d[2] : d[2] + h]);
  return points;
}

function unpack(graph) {
  const modules = graph.modules;
  const labels = new Map(modules.map(([path, parent]) =>       // a module box says `blocks.3`, not `Stack.blocks.3`
    [path, parent >= 0 && path.startsWith(modules[parent][0] + ".") ? path.slice(modules[parent][0].length + 1) : path]));
  const nodes = graph.nodes.map(([label, kind, module, saved, targets, op, mark, links, notes]) => {
    const group = chainOf(modules, module);
    return { label, kind, group, path: group.length ? group[group.length - 1] : "", saved, targets, op, mark,
      links: links || [], notes: notes || [],
      storages: saved.map((s) => s[4]).filter((s) => s >= 0), savedBytes: saved.reduce((t, s) => t + s[3], 0) };
  });
  const membersOf = new Map();     // module path -> the nodes made inside it, once for all views
  nodes.forEach((n, i) => {
    n.rows = rowsOf(nodes, i, graph.targets_label || "gradients to");
    for (const path of new Set(n.group)) {
      if (!membersOf.has(path)) membersOf.set(path, []);
      membersOf.get(path).push(i);
    }
  });
  const views = graph.views.map((v) => ({
    width: v.width, height: v.height,
    boxes: v.boxes.map((b) => unpackBox(nodes, labels, membersOf, graph.box_h, b)),
    edges: v.edges.map(([from, to, ...xs]) => ({ from, to, points: route(v.boxes[from], v.boxes[to], xs, graph) })),
  }));
  return { nodes, views, labels, order: graph.order, first: graph.first, title: graph.title || "" };
}

// One drawn graph: its depth, its view box, and what is marked in it.
function makePane(graph, parent, hooks) {
  const pane = tag("div", undefined, parent, "gv-pane");
  tag("div", graph.title, pane, "gv-title");
  const stage = tag("div", undefined, pane, "gv-stage");
  const picture = svg("svg", { preserveAspectRatio: "xMidYMin meet" }, stage);
  const self = { graph, depth: graph.first, view: null, boxOf: new Map(), frame: null, selected: -1, step: -1,
    query: "" };

  function boxElement(i) { return picture.querySelector(`g[data-box="${i}"]`); }

  self.applyFrame = () => {
    const f = self.frame;
    picture.setAttribute("viewBox", `${f.x} ${f.y} ${f.w} ${f.h}`);
  };
  self.fit = () => {               // never magnify: one unit is at most one pixel
    const r = stage.getBoundingClientRect();
    self.frame = { x: 0, y: 0, w: Math.max(self.view.width, r.width || 600), h: Math.max(self.view.height, r.height || 480) };
    self.applyFrame();
  };
  self.draw = () => {
    const view = (self.view = graph.views[self.depth]);
    self.boxOf = new Map();
    view.boxes.forEach((b, i) => b.members.forEach((m) => self.boxOf.set(m, i)));
    picture.replaceChildren();
    const arrow = `gv-arrow-${++arrows}`;     // ids are page-wide: one per drawing
    const marker = svg("marker", { id: arrow, viewBox: "0 0 6 6", refX: 6, refY: 3, markerWidth: 6,
      markerHeight: 6, orient: "auto" }, svg("defs", {}, picture));
    svg("path", { d: "M0,0 L6,3 L0,6 z", fill: "#777" }, marker);
    view.edges.forEach((e, i) => {
      svg("polyline", { points: e.points.map((p) => p.join(",")).join(" "), class: "gv-edge",
        "marker-end": `url(#${arrow})`, "data-edge": i }, picture);
    });
    view.boxes.forEach((b, i) => {
      const marks = new Set(b.members.map((m) => graph.nodes[m].mark).filter(Boolean));
      const g = svg("g", { class: ["gv-box", ...[...marks].map((m) => `gv-${m}`)].join(" "), "data-box": i,
        "data-key": b.key }, picture);
      svg("rect", { x: b.x, y: b.y, width: b.w, height: b.h, rx: 5, fill: FILL[b.kind] }, g);
      svg("text", { x: b.x + b.w / 2, y: b.y + b.h / 2 + 4, "text-anchor": "middle" }, g).textContent = shownLabel(b);
      const bytes = b.members.reduce((t, m) => t + graph.nodes[m].savedBytes, 0);
      svg("title", {}, g).textContent = b.kind === "group"
        ? `${b.key.slice(2)}: ${b.members.length} nodes, ${bytes.toLocaleString("en-US")} B saved` : b.label;
      g.addEventListener("click", () => hooks.click(self, i));
      g.addEventListener("mouseenter", () => hooks.hover(self, i));
      g.addEventListener("mouseleave", () => hooks.hover(self, -1));
    });
    self.fit();
    self.mark();
  };
  self.mark = () => {
    for (const cls of ["gv-selected", "gv-run", "gv-match", "gv-linked"]) {
      picture.querySelectorAll(`.${cls}`).forEach((g) => g.classList.remove(cls));
    }
    if (self.boxOf.has(self.selected)) {
      boxElement(self.boxOf.get(self.selected)).classList.add("gv-selected");
      for (const k of graph.nodes[self.selected].links) {     // what the clicked node became, or came from
        if (self.boxOf.get(k) !== self.boxOf.get(self.selected)) boxElement(self.boxOf.get(k)).classList.add("gv-linked");
      }
    }
    const running = graph.order[self.step];
    if (self.step >= 0 && self.boxOf.has(running)) boxElement(self.boxOf.get(running)).classList.add("gv-run");
    self.hits = [];
    if (self.query) {
      self.view.boxes.forEach((b, i) => {
        const texts = b.members.map((m) => `${graph.nodes[m].label} ${graph.nodes[m].path}`.toLowerCase());
        if (texts.some((t) => t.includes(self.query))) self.hits.push(i);
      });
      self.hits.forEach((i) => boxElement(i).classList.add("gv-match"));
    }
  };
  self.centreOn = (i) => {
    const b = self.view.boxes[i];
    self.frame.x = b.x + b.w / 2 - self.frame.w / 2;
    self.frame.y = b.y + b.h / 2 - self.frame.h / 2;
    self.applyFrame();
  };
  self.hover = (i) => {
    picture.querySelectorAll(".gv-hot, .gv-share").forEach((x) => x.classList.remove("gv-hot", "gv-share"));
    if (i < 0) return "";
    const edges = self.view.edges.filter((e) => e.from === i || e.to === i);
    self.view.edges.forEach((e, k) => {
      if (e.from === i || e.to === i) picture.querySelector(`polyline[data-edge="${k}"]`).classList.add("gv-hot");
    });
    const mine = new Set(self.view.boxes[i].members.flatMap((m) => graph.nodes[m].storages));
    let sharing = 0;
    self.view.boxes.forEach((b, k) => {
      if (k !== i && b.members.some((m) => graph.nodes[m].storages.some((s) => mine.has(s)))) {
        boxElement(k).classList.add("gv-share");
        sharing += 1;
      }
    });
    return `${shownLabel(self.view.boxes[i])}: ${edges.length} edges, ${sharing} boxes share its saved memory`;
  };

  let drag = null;
  stage.addEventListener("wheel", (event) => {
    event.preventDefault();
    const scale = event.deltaY > 0 ? 1.15 : 1 / 1.15, f = self.frame, r = stage.getBoundingClientRect();
    const px = f.x + ((event.clientX - r.left) / r.width) * f.w, py = f.y + ((event.clientY - r.top) / r.height) * f.h;
    self.frame = { x: px - (px - f.x) * scale, y: py - (py - f.y) * scale, w: f.w * scale, h: f.h * scale };
    self.applyFrame();
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
  return self;
}

function render({ model, el }) {
  const root = tag("div", undefined, el, "gv");
  tag("style", CSS, root);
  const bar = tag("div", undefined, root, "gv-bar");
  const search = tag("input", undefined, bar, "gv-search");
  search.placeholder = "search nodes";
  const collapse = tag("button", "− collapse", bar, "gv-collapse");
  const expand = tag("button", "+ expand", bar, "gv-expand");
  const depthText = tag("span", "", bar, "gv-depth");
  const back = tag("button", "◀ step", bar, "gv-back");
  const forward = tag("button", "step ▶", bar, "gv-forward");
  const play = tag("button", "play", bar, "gv-play");
  const fit = tag("button", "fit", bar, "gv-fit");
  const info = tag("div", "", root, "gv-info");
  const row = tag("div", undefined, root, "gv-panes");
  const panel = tag("div", "Click a box for its details.", root, "gv-details");
  const graphs = [model.get("graph"), model.get("other")].filter(Boolean).map((t) => unpack(JSON.parse(t)));
  let timer = null;

  function sync(name, value) {
    model.set(name, value);
    try {
      model.save_changes();          // to the kernel, when there is one
    } catch (error) {
      // a static page has no kernel to tell: the view keeps working on its own
    }
  }

  function showDetails(pane, node) {
    panel.replaceChildren();
    if (node < 0) return;
    const n = pane.graph.nodes[node];
    tag("div", `${n.label} (node ${node})`, panel, "gv-heading");
    const list = tag("dl", undefined, panel);
    for (const [field, text] of n.rows) {
      tag("dt", field, list);
      tag("dd", text, list);
    }
    const path = tag("div", "module path: ", panel, "gv-path");
    n.group.forEach((module, k) => {
      const button = tag("button", pane.graph.labels.get(module), path);
      button.title = `collapse to ${module}`;
      button.addEventListener("click", () => setDepth(pane, k));
    });
    if (!n.group.length) tag("span", "(outside modules)", path);
  }

  const hooks = {
    click(pane, i) {
      const b = pane.view.boxes[i];
      if (b.kind === "group") return setDepth(pane, pane.depth + 1);   // open it: its members one level down
      pane.selected = b.members[0];
      pane.mark();
      showDetails(pane, pane.selected);
      if (pane === panes[0]) sync("selected", pane.selected);
    },
    hover(pane, i) { info.textContent = pane.hover(i); },
  };
  const panes = graphs.map((g) => makePane(g, row, hooks));

  function setDepth(pane, d) {
    pane.depth = Math.max(0, Math.min(pane.graph.views.length - 1, d));
    pane.draw();
    if (pane === panes[0]) sync("depth", pane.depth);
    showBar();
  }

  function showBar() {
    depthText.textContent = panes.map((p) => `depth ${p.depth} of ${p.graph.views.length - 1}: ${p.view.boxes.length} boxes`).join(" | ");
    collapse.disabled = panes.every((p) => p.depth === 0);
    expand.disabled = panes.every((p) => p.depth === p.graph.views.length - 1);
  }

  function setStep(s) {
    const pane = panes[0], order = pane.graph.order;
    pane.step = Math.max(-1, Math.min(order.length - 1, s));
    pane.mark();
    sync("step", pane.step);
    if (pane.step < 0) return;
    const n = pane.graph.nodes[order[pane.step]];
    info.textContent = `step ${pane.step + 1} of ${order.length}: runs ${n.label}` + (n.kind === "leaf" ? ` and fills ${n.label}.grad` : "");
  }

  search.addEventListener("input", () => {
    const query = search.value.trim().toLowerCase();
    panes.forEach((p) => { p.query = query; p.mark(); });
    if (!query) return;
    const counts = panes.map((p) => p.hits.length);
    info.textContent = `${counts.join(" | ")} boxes match "${search.value.trim()}"`;
    panes.forEach((p) => { if (p.hits.length) p.centreOn(p.hits[0]); });
  });
  collapse.addEventListener("click", () => panes.forEach((p) => setDepth(p, p.depth - 1)));
  expand.addEventListener("click", () => panes.forEach((p) => setDepth(p, p.depth + 1)));
  back.addEventListener("click", () => setStep(panes[0].step - 1));
  forward.addEventListener("click", () => setStep(panes[0].step + 1));
  fit.addEventListener("click", () => panes.forEach((p) => p.fit()));
  play.addEventListener("click", () => {
    if (timer) { clearInterval(timer); timer = null; play.textContent = "play"; return; }
    play.textContent = "pause";
    timer = setInterval(() => {
      if (panes[0].step >= panes[0].graph.order.length - 1) { clearInterval(timer); timer = null; play.textContent = "play"; return; }
      setStep(panes[0].step + 1);
    }, 400);
  });
  model.on("change:selected", () => {
    panes[0].selected = model.get("selected");
    panes[0].mark();
    showDetails(panes[0], panes[0].selected);
  });
  model.on("change:step", () => { if (model.get("step") !== panes[0].step) setStep(model.get("step")); });
  model.on("change:depth", () => { if (model.get("depth") >= 0 && model.get("depth") !== panes[0].depth) setDepth(panes[0], model.get("depth")); });

  if (model.get("depth") >= 0) panes[0].depth = Math.min(model.get("depth"), panes[0].graph.views.length - 1);
  panes.forEach((p) => p.draw());
  showBar();
  panes[0].selected = model.get("selected");
  if (panes[0].selected >= 0) { panes[0].mark(); showDetails(panes[0], panes[0].selected); }
  if (model.get("step") >= 0) setStep(model.get("step"));
  return () => { if (timer) clearInterval(timer); };
}

export default { render };
