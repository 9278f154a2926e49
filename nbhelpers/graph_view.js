// The front-end of nbhelpers.graph_view, part 2 of 4 (graph_layout.js, this, memory_timeline.js, graph_view_dom.js: one ES
// module, as graph_view.esm() joins them): the state decoded, and the boxes of what the learner has opened
// (graph_boxes.py's rules in JavaScript), laid out with layout(). No DOM here: Node runs it in the tests.
const SVG_NS = "http://www.w3.org/2000/svg";   // the SVG namespace name, not an address that is fetched
const MIN_TEXT_PX = 10, FONT = 12, SUB_FONT = 11, EDGE_FONT = 11, COLUMN = 0.62 * FONT, SUB_COLUMN = 0.62 * SUB_FONT, EDGE_COLUMN = 0.62 * EDGE_FONT, PAD = 8, MIN_W = 40, MAX_W = 240;
const WIDE = /[\u1100-\u115f\u2e80-\ua4cf\uac00-\ud7a3\uf900-\ufaff\ufe30-\ufe4f\uff00-\uff60\uffe0-\uffe6\u{20000}-\u{3fffd}]/u;
// graph_boxes.columns and fitted: the same widths, the same cuts.
export function columns(text) {
  let n = 0;
  for (const ch of text) n += WIDE.test(ch) ? 2 : 1;
  return n;
}

export function fitted(text, room, column) {
  if (columns(text) * column <= room + 1e-9) return text;        // a one-column label: 7.44 px in 23.44 - 16 px
  let budget = Math.floor(room / column) - 1, out = "";
  for (const ch of text) {
    budget -= WIDE.test(ch) ? 2 : 1;
    if (budget < 0) break;
    out += ch;
  }
  return out + "…";
}

function boxWidth(head, sub) {         // graph_boxes._width: between MIN_W and MAX_W
  return Math.max(MIN_W, Math.min(MAX_W, 2 * PAD + Math.max(columns(head) * COLUMN, columns(sub) * SUB_COLUMN)));
}

// The state (graph_view._state): `modules` is [path, index of the module it ran in or -1, class, summary]
// per module chain; a node is [label, kind, index of its innermost module or -1, saved, targets, op, mark,
// links, notes, tip, the label of each target's edge, measured rows, share of the measured time], each saved
// tensor [attr without "_saved_", shape, dtype,
// bytes, storage id, version]. A twin view's forward state has `lit`: [backward node, forward nodes] pairs.
export function unpackState(state) {
  const modules = state.modules, info = new Map();
  for (const [path, , kind, summary] of modules) if (!info.has(path)) info.set(path, { kind, summary });
  const nodes = state.nodes.map(([label, kind, module, saved, targets, op, mark, links, notes, tip, labels, measured, share]) => {
    const group = [];
    for (let k = module; k >= 0; k = modules[k][1]) group.unshift(modules[k][0]);
    return { label, kind, group, path: group.length ? group[group.length - 1] : "", saved, targets, op, mark,
      links: links || [], notes: notes || [], tip: tip || "", labels: labels || [], measured: measured || [], share: share || 0,
      storages: saved.map((s) => s[4]).filter((s) => s >= 0), savedBytes: saved.reduce((t, s) => t + s[3], 0) };
  });
  const folds = foldsOf(nodes, info);
  nodes.forEach((n, i) => { n.rows = rowsOf(nodes, i, state.targets_label || "gradients to", folds); });
  return { nodes, info, folds, where: placesOf(folds), order: state.order, title: state.title || "",
    clock: state.clock || "backward", expanded: state.expanded || [], matched: state.matched || [], lit: new Map(state.lit || []) };
}

// graph_folds.folds: runs of two or more numbered siblings with consecutive numbers, of one known class, whose
// subgraphs match; the same signature, the same order, the same names.
export function foldsOf(nodes, info) {
  const { members, roots, children } = membership(nodes), signatures = new Map();
  const kind = (path) => (info.get(path) || {}).kind || "";
  const signature = (path) => {
    if (!signatures.has(path)) signatures.set(path, signatureOf(nodes, members.get(path), path, relative(path, roots.get(path))));
    return signatures.get(path);
  };
  const found = [], taken = new Set();
  for (const [parent, kids] of children) {
    const numbered = [...kids].map(numberedItem).filter(Boolean)      // by container, then number
      .sort((p, q) => (p[0] < q[0] ? -1 : p[0] > q[0] ? 1 : p[1] - q[1]));
    let run = [];
    for (const [holder, number, kid] of [...numbered, ["", -1, ""]]) {
      const first = run.length ? run[0][2] : "", last = run[run.length - 1];
      if (run.length && kid && holder === last[0] && number === last[1] + 1 && kind(kid) && kind(kid) === kind(first)
        && signature(first) === signature(kid)) {
        run.push([holder, number, kid]);
        continue;
      }
      const copies = run.map(([, , path]) => path);
      if (copies.length > 1 && !copies.some((p) => taken.has(p)) && !loopsBack(nodes, members, copies)) {
        copies.forEach((p) => taken.add(p));
        found.push({ parent, kind: kind(copies[0]), copies, names: copies.map((p) => relative(p, roots.get(p))),
          nodes: members.get(copies[0]).length });
      }
      run = kid ? [[holder, number, kid]] : [];
    }
  }
  return found;
}

function membership(nodes) {     // _Graph's: each module's nodes, outermost module, children in first-seen order
  const members = new Map(), roots = new Map(), children = new Map();
  nodes.forEach((n, i) => {
    n.group.forEach((path, k) => {
      if (!members.has(path)) members.set(path, []);
      const mine = members.get(path);
      if (!mine.length || mine[mine.length - 1] !== i) mine.push(i);
      if (!roots.has(path)) roots.set(path, n.group[0]);
      if (k) {
        if (!children.has(n.group[k - 1])) children.set(n.group[k - 1], new Set());
        children.get(n.group[k - 1]).add(path);
      }
    });
  });
  return { members, roots, children };
}

function loopsBack(nodes, members, copies) {     // _Graph.loops_back: a path out of the copies and back in
  const inside = new Set(copies.flatMap((p) => members.get(p))), seen = new Set();
  for (const i of inside) for (const d of nodes[i].targets) if (!inside.has(d)) seen.add(d);
  const todo = [...seen];
  while (todo.length) {
    for (const d of nodes[todo.pop()].targets) {
      if (inside.has(d)) return true;
      if (!seen.has(d)) { seen.add(d); todo.push(d); }
    }
  }
  return false;
}

function signatureOf(nodes, mine, path, relname) {
  const place = new Map(mine.map((i, k) => [i, k])), name = relname + ".";
  const unnamed = (text) => text.split(path + ".").join("@.").split(" ")
    .map((w) => (w.startsWith(name) ? "@." + w.slice(name.length) : w)).join(" ");
  return JSON.stringify(mine.map((i) => {
    const n = nodes[i], inside = [];
    n.targets.forEach((d, k) => { if (place.has(d)) inside.push([place.get(d), n.labels[k] || ""]); });
    return [unnamed(n.label), n.kind, n.op, n.group.slice(n.group.indexOf(path) + 1).map((p) => p.slice(path.length)),
      unnamed(n.tip), n.notes.map(([field, text]) => [field, unnamed(text)]), n.saved.map(([attr, shape, dtype]) => [attr, shape, dtype]),
      inside];
  }));
}

function numberedItem(path) {       // graph_folds._numbered
  const dot = path.lastIndexOf("."), number = path.slice(dot + 1);
  return /^[0-9]+$/.test(number) ? [dot < 0 ? "" : path.slice(0, dot), Number(number), path] : null;
}

function relative(path, root) { return root && path.startsWith(root + ".") ? path.slice(root.length + 1) : path; }

export function span(fold, first, last) {     // Fold.span
  if (first === last) return fold.names[first];
  const end = fold.names[last];
  return `${fold.names[first]}-${end.slice(end.lastIndexOf(".") + 1)}`;
}

export function foldLabel(fold) { return `${span(fold, 0, fold.copies.length - 1)} · ${fold.kind} × ${fold.copies.length}`; }

function placesOf(folds) {     // graph_folds.places
  const where = new Map();
  folds.forEach((f, k) => f.copies.forEach((path, j) => where.set(path, [k, j])));
  return where;
}

export function foldedRuns(folds, expanded) {     // graph_folds.folded: copy -> [first, last] of its closed run
  const runs = new Map();
  for (const fold of folds) {
    let run = [];
    for (const path of [...fold.copies, null]) {
      if (path !== null && !expanded.has(path)) { run.push(path); continue; }
      for (const p of run) runs.set(p, [run[0], run[run.length - 1]]);
      run = [];
    }
  }
  return runs;
}

function boxKey(n, i, expanded, runs) {     // graph_folds.box_key
  for (const path of n.group) {
    if (runs.has(path)) return `f:${runs.get(path).join("|")}`;
    if (!expanded.has(path)) return `g:${path}`;
  }
  return `n:${i}`;
}

function rowsOf(nodes, i, targetsLabel, folds) {   // the same rows, in the same words, as graph_view.details()
  const n = nodes[i];
  const rows = n.op ? [["op", n.op]] : [];
  rows.push(["module", n.path || "(outside modules)"]);
  for (const f of folds) {
    f.copies.forEach((path, k) => {
      if (n.group.includes(path)) rows.push(["copy", `${f.names[k]} is copy ${k + 1} of ${f.copies.length}: ${foldLabel(f)}`]);
    });
  }
  for (const [attr, shape, dtype, bytes, sid, version] of n.saved) {
    rows.push(["saved", sid >= 0
      ? `_saved_${attr} [${shape.join(", ")}] ${dtype} ${bytes.toLocaleString("en-US")} B storage #${sid} version ${version}`
      : `_saved_${attr} packed by a saved-tensor hook as ${dtype}: no tensor held`]);
  }
  const labels = n.targets.map((t) => nodes[t].label);
  rows.push([targetsLabel, labels.length ? labels.join(", ") : "none"]);
  if (n.mark) rows.push(["diff", n.mark]);
  rows.push(...n.notes, ...n.measured);
  if (n.links.length) rows.push(["lights up", `${n.links.length} linked nodes`]);
  return rows;
}

// graph_boxes.view: one box per outermost collapsed module (or per node), sized to its text, laid out.
export function viewOf(graph, expanded) {
  const members = new Map(), runs = foldedRuns(graph.folds, expanded);
  graph.nodes.forEach((n, i) => {
    const key = boxKey(n, i, expanded, runs);
    if (!members.has(key)) members.set(key, []);
    members.get(key).push(i);
  });
  const boxes = [...members].map(([key, nodes]) => withShare(graph, makeBox(graph, key, nodes))), boxOf = new Map();
  boxes.forEach((b, k) => b.members.forEach((m) => boxOf.set(m, k)));
  const carried = carriedLabels(graph, boxOf, boxes.length), pairs = [...carried.keys()].map((id) => [
    Math.floor(id / boxes.length), id % boxes.length]);
  pairs.sort((p, q) => p[0] - q[0] || p[1] - q[1]);
  const drawing = layout(boxes.length, pairs, boxes.map((b) => b.w));
  boxes.forEach((b, k) => { [b.x, b.y, b.w, b.h] = drawing.boxes[k]; });
  const edges = pairs.map(([from, to], k) => ({ from, to, points: drawing.routes[k],
    label: edgeLabel(carried.get(from * boxes.length + to)) }));
  const { places, width } = placeLabels(drawing.boxes, edges, drawing.width);
  edges.forEach((e, k) => { e.labelAt = places[k]; });
  const longest = boxes.reduce((m, b) => Math.max(m, b.share), 0);
  return { boxes, boxOf, edges, width, height: drawing.height, longest };
}

function withShare(graph, b) {     // graph_boxes._with_share
  const share = b.members.reduce((t, i) => t + graph.nodes[i].share, 0);
  return share ? { ...b, share, title: `${b.title} · ${(share * 100).toFixed(1)}% of the ${graph.clock}` } : { ...b, share };
}

// edge_labels.place, line for line: each label beside its own edge, clear of boxes and of the labels placed
// before it, and where it can, of other edges' lines; the edges out of one box that carry one tensor share
// one label. Returns a place (or null) per edge, and the width with the labels in it.
const ASCENT = 12, DESCENT = 4, ROW = ASCENT + DESCENT, ROWS = 3, SIDE = 2, GAP = 4, SEGMENTS = 4, CELL = 64;
export function placeLabels(boxes, edges, width) {
  const places = edges.map(() => null);
  if (!edges.some((e) => e.label)) return { places, width };
  const taken = grid(), lines = grid();
  for (const [x, y, w, h] of boxes) taken.add([x, y, x + w, y + h], -1);
  edges.forEach((e, k) => {
    for (const [x1, y1, x2, y2] of straightLines(e.points)) {
      lines.add([Math.min(x1, x2), Math.min(y1, y2), Math.max(x1, x2), Math.max(y1, y2)], [k, x1, y1, x2, y2]);
    }
  });
  const out = outEdges(edges), done = new Set();
  edges.forEach((e, k) => {
    if (!e.label || done.has(e.from)) return;
    const mine = out.get(e.from) || new Set([k]), size = columns(e.label) * EDGE_COLUMN;
    const at = firstFree(labelCandidates(e.points, size), size, taken, lines, mine);
    if (at === null) return;
    const rect = padded(at, size);
    taken.add(rect, k);
    places[k] = at;
    width = Math.max(width, rect[2] + MARGIN);
    if (out.has(e.from)) done.add(e.from);
  });
  return { places, width };
}

function outEdges(edges) {      // edge_labels._out_edges
  const labels = new Map(), out = new Map();
  edges.forEach((e, k) => {
    if (!labels.has(e.from)) { labels.set(e.from, new Set()); out.set(e.from, new Set()); }
    labels.get(e.from).add(e.label);
    out.get(e.from).add(k);
  });
  for (const [src, seen] of labels) if (seen.size !== 1) out.delete(src);
  return out;
}

function straightLines(points) {       // edge_labels._lines: a straight vertical run as one segment
  const found = [];
  for (let i = 0; i + 1 < points.length; i++) {
    const [x1, y1] = points[i], [x2, y2] = points[i + 1], last = found[found.length - 1];
    if (y1 === y2) continue;
    if (last && x1 === x2 && last[0] === x1 && last[2] === x1 && last[3] === y1) last[3] = y2;
    else found.push([x1, y1, x2, y2]);
  }
  return found;
}

function firstFree(candidates, size, taken, lines, mine) {
  let fallback = null;
  for (const at of candidates) {
    const rect = padded(at, size);
    if (rect[0] < 0 || taken.holds(rect)) continue;
    if (!lines.holds(rect, ([k, x1, y1, x2, y2]) => !mine.has(k) && crosses(x1, y1, x2, y2, rect))) return at;
    if (fallback === null) fallback = at;
  }
  return fallback;
}

function* labelCandidates(points, size) {      // the first SEGMENTS segments, as in Python
  for (let k = 0; k + 1 < Math.min(points.length, SEGMENTS + 1); k++) {
    const [x1, y1] = points[k], [x2, y2] = points[k + 1];
    if (y1 === y2) continue;
    for (let row = 0; row < ROWS; row++) {
      const top = Math.min(y1, y2) + 1 + row * ROW, xa = xAt(x1, y1, x2, y2, top), xb = xAt(x1, y1, x2, y2, top + ROW);
      yield [Math.max(xa, xb) + GAP, top + ASCENT];
      yield [Math.min(xa, xb) - GAP - size, top + ASCENT];
    }
  }
}

function xAt(x1, y1, x2, y2, y) {
  const c = Math.min(Math.max(y, Math.min(y1, y2)), Math.max(y1, y2));
  return x1 + (x2 - x1) * (c - y1) / (y2 - y1);
}

function crosses(x1, y1, x2, y2, r) {
  const low = Math.max(Math.min(y1, y2), r[1]), high = Math.min(Math.max(y1, y2), r[3]);
  if (low >= high) return false;
  const xa = xAt(x1, y1, x2, y2, low), xb = xAt(x1, y1, x2, y2, high);
  return Math.min(xa, xb) < r[2] && r[0] < Math.max(xa, xb);
}

function padded([x, baseline], size) { return [x - SIDE, baseline - ASCENT, x + size + SIDE, baseline + DESCENT]; }

function grid() {              // edge_labels._Grid: rects in CELL-pixel cells, each with an item
  const cells = new Map(), keys = ([x0, y0, x1, y1]) => {
    const found = [];
    for (let cx = Math.floor(x0 / CELL); cx <= Math.floor(x1 / CELL); cx++) {
      for (let cy = Math.floor(y0 / CELL); cy <= Math.floor(y1 / CELL); cy++) found.push(`${cx} ${cy}`);
    }
    return found;
  };
  return {
    add(r, item) { for (const key of keys(r)) { if (!cells.has(key)) cells.set(key, []); cells.get(key).push([r, item]); } },
    holds(r, test) {
      for (const key of keys(r)) {
        for (const [q, item] of cells.get(key) || []) {
          if (q[0] <= r[2] && r[0] <= q[2] && q[1] < r[3] && r[1] < q[3] && (!test || test(item))) return true;
        }
      }
      return false;
    },
  };
}

// graph_boxes._carried and _edge_label: the labels of the edges each pair of boxes stands for, and the one
// drawn (one label when all agree, else how many tensors).
function carriedLabels(graph, boxOf, count) {
  const carried = new Map();
  graph.nodes.forEach((n, s) => n.targets.forEach((d, k) => {
    const a = boxOf.get(s), b = boxOf.get(d), id = a * count + b;
    if (a === b) return;
    if (!carried.has(id)) carried.set(id, []);
    carried.get(id).push(n.labels[k] || "");
  }));
  return carried;
}

function edgeLabel(labels) {
  return new Set(labels).size === 1 ? labels[0] : `${labels.length} tensors`;
}

function makeBox(graph, key, nodes) {
  const first = graph.nodes[nodes[0]];
  const mark = nodes.map((i) => graph.nodes[i].mark).find(Boolean) || "";
  const base = { key, members: nodes, mark, bytes: nodes.reduce((t, i) => t + graph.nodes[i].savedBytes, 0) };
  if (key.startsWith("n:")) {
    const w = boxWidth(first.label, "");
    return { ...base, kind: first.kind, w, lines: [fitted(first.label, w - 2 * PAD, COLUMN)], title: first.tip || first.label };
  }
  if (key.startsWith("f:")) return foldBox(graph, key, base);
  const path = key.slice(2), root = first.group[0], { kind, summary } = graph.info.get(path);
  const name = path !== root && path.startsWith(root + ".") ? path.slice(root.length + 1) : path;
  const head = kind && kind !== name ? `${name} · ${kind}` : name, w = boxWidth(head, summary);
  return { ...base, kind: "group", w, lines: [fitted(head, w - 2 * PAD, COLUMN), fitted(summary, w - 2 * PAD, SUB_COLUMN)],
    title: kind ? `${path} · ${kind}: ${summary}` : `${path}: ${summary}` };
}

function foldBox(graph, key, base) {     // graph_boxes._fold_box
  const [first, last] = key.slice(2).split("|"), [f, a] = graph.where.get(first), b = graph.where.get(last)[1];
  const fold = graph.folds[f], name = `${span(fold, a, b)} · ${fold.kind}`, count = b > a ? ` × ${b - a + 1}` : "";
  const head = name + count, summary = (b > a ? "each " : "") + graph.info.get(fold.copies[a]).summary;
  const w = boxWidth(head, summary), cut = fitted(name, w - 2 * PAD - columns(count) * COLUMN, COLUMN) + count;
  return { ...base, kind: "fold", w, lines: [cut, fitted(summary, w - 2 * PAD, SUB_COLUMN)],
    title: `${head}: ${summary}; folded, of ${foldLabel(fold)}: click to open ${fold.names[a]}`, fold: f, first: a, last: b };
}
