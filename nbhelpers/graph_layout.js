// graph_layout.py, line for line, so that the browser lays out whatever the learner expands: the same
// steps, the same tie-breaks and the same floating-point operations in the same order, hence the same
// numbers (tests/test_graph_layout_js.py runs both on the benchmark graphs and compares every box and
// route). Read graph_layout.py for the why of each step; this file only says where JavaScript differs.
export const BOX_H = 36, LAYER_GAP = 40, BOX_GAP = 16, DUMMY_W = 8, MARGIN = 10;

export function layout(n, edges, widths, sweeps = 8) {
  if (widths.length !== n) throw new Error(`widths has ${widths.length} entries for ${n} nodes`);
  if (n === 0) return { boxes: [], routes: [], width: 2 * MARGIN, height: 2 * MARGIN };
  const upward = backEdges(n, edges);
  const forward = edges.map(([s, d], k) => (upward.has(k) ? [d, s] : [s, d]));
  const layer = layers(n, forward);
  const { chains, nodesIn } = splitLongEdges(n, forward, layer);
  let total = n;
  for (const row of nodesIn) for (const v of row) total = Math.max(total, v + 1);
  const { up, down } = neighbours(chains, total);
  const order = orderRows(nodesIn, up, down, n <= 2000 ? sweeps : Math.min(sweeps, 4), total);
  const x = place(order, up, down, widths, n);
  return draw(n, upward, chains, layer, order, x, widths);
}

export function crossings(drawing) {
  const byGap = new Map();
  for (const route of drawing.routes) {
    for (let k = 0; k + 1 < route.length; k++) {
      const [x1, y1] = route[k], [x2, y2] = route[k + 1];
      if (y1 === y2) continue;
      const key = Math.min(y1, y2);
      if (!byGap.has(key)) byGap.set(key, []);
      byGap.get(key).push(y1 < y2 ? [x1, x2] : [x2, x1]);
    }
  }
  let total = 0;
  for (const segs of byGap.values()) total += inversions(segs.sort(comparePairs));
  return total;
}

function comparePairs(a, b) { return a[0] - b[0] || a[1] - b[1]; }

function backEdges(n, edges) {     // an iterative DFS from every node in id order, as in Python
  const out = Array.from({ length: n }, () => []);
  edges.forEach(([s, d], k) => out[s].push([d, k]));
  const state = new Array(n).fill(0), back = new Set();
  for (let start = 0; start < n; start++) {
    if (state[start]) continue;
    const stack = [[start, 0]];           // [node, index of the next out-edge]: Python's iterator
    state[start] = 1;
    while (stack.length) {
      const top = stack[stack.length - 1], list = out[top[0]];
      let pushed = false;
      while (top[1] < list.length) {
        const [d, k] = list[top[1]++];
        if (state[d] === 1) back.add(k);
        else if (state[d] === 0) { state[d] = 1; stack.push([d, 0]); pushed = true; break; }
      }
      if (!pushed) { state[top[0]] = 2; stack.pop(); }
    }
  }
  edges.forEach(([s, d], k) => { if (s === d) back.add(k); });
  return back;
}

function layers(n, forward) {
  const indeg = new Array(n).fill(0), out = Array.from({ length: n }, () => []);
  for (const [s, d] of forward) if (s !== d) { indeg[d] += 1; out[s].push(d); }
  const layer = new Array(n).fill(0), ready = [];
  for (let v = 0; v < n; v++) if (indeg[v] === 0) ready.push(v);
  while (ready.length) {
    const v = ready.pop();
    for (const d of out[v]) {
      layer[d] = Math.max(layer[d], layer[v] + 1);
      if (--indeg[d] === 0) ready.push(d);
    }
  }
  return layer;
}

function splitLongEdges(n, forward, layer) {
  const chains = [], rows = new Map();
  let nextId = n;
  const add = (depth, v) => { if (!rows.has(depth)) rows.set(depth, []); rows.get(depth).push(v); };
  for (let v = 0; v < n; v++) add(layer[v], v);
  for (const [s, d] of forward) {
    const chain = [s];
    for (let depth = layer[s] + 1; depth < layer[d]; depth++) { chain.push(nextId); add(depth, nextId++); }
    chains.push(s !== d ? [...chain, d] : [s]);
  }
  const deepest = Math.max(...rows.keys());
  return { chains, nodesIn: Array.from({ length: deepest + 1 }, (_, k) => rows.get(k) || []) };
}

function neighbours(chains, total) {
  const up = Array.from({ length: total }, () => []), down = Array.from({ length: total }, () => []);
  for (const chain of chains) {
    for (let k = 0; k + 1 < chain.length; k++) { down[chain[k]].push(chain[k + 1]); up[chain[k + 1]].push(chain[k]); }
  }
  return { up, down };
}

function orderRows(nodesIn, up, down, sweeps, total) {
  const starts = [nodesIn.map((row) => [...row])];
  if (total <= 1000) starts.push(nodesIn.map((row) => [...row].reverse()));
  let best = null, bestCount = null;
  for (const order of starts) {
    const [candidate, count] = sweep(order, up, down, sweeps, total <= 4000);
    if (bestCount === null || count < bestCount) { best = candidate; bestCount = count; }
  }
  return best;
}

function sweep(order, up, down, sweeps, swaps) {
  let best = order.map((r) => [...r]), bestCount = count(order, down);
  for (let s = 0; s < sweeps; s++) {
    const downward = s % 2 === 0, useMedian = s % 4 >= 2;
    const rows = [];
    if (downward) for (let k = 1; k < order.length; k++) rows.push(k);
    else for (let k = order.length - 2; k >= 0; k--) rows.push(k);
    for (const k of rows) {
      sortByNeighbours(order[k], downward ? order[k - 1] : order[k + 1], downward ? up : down, useMedian);
    }
    if (swaps) transpose(order, up, down);
    const c = count(order, down);
    if (c < bestCount) { best = order.map((r) => [...r]); bestCount = c; }
    if (bestCount === 0) break;
  }
  return [best, bestCount];
}

function positions(row) {
  const pos = new Map();
  row.forEach((v, i) => pos.set(v, i));
  return pos;
}

function sortByNeighbours(row, fixed, links, useMedian) {
  const pos = positions(fixed), current = positions(row), keys = new Map();
  for (const v of row) {
    const ps = links[v].filter((u) => pos.has(u)).map((u) => pos.get(u)).sort((a, b) => a - b);
    if (!ps.length) { keys.set(v, [current.get(v), current.get(v)]); continue; }
    let total = 0;
    for (const p of ps) total += p;
    const middle = useMedian ? (ps[(ps.length - 1) >> 1] + ps[ps.length >> 1]) / 2 : total / ps.length;
    keys.set(v, [middle, current.get(v)]);
  }
  row.sort((a, b) => comparePairs(keys.get(a), keys.get(b)));
}

function count(order, down) {
  let total = 0;
  for (let k = 0; k + 1 < order.length; k++) {
    const pos = positions(order[k + 1]), pairs = [];
    order[k].forEach((v, i) => { for (const w of down[v]) if (pos.has(w)) pairs.push([i, pos.get(w)]); });
    total += inversions(pairs.sort(comparePairs));
  }
  return total;
}

function inversions(pairs) {       // Python's bisect_right and insort, by hand
  const seen = [];
  let total = 0;
  for (const [, b] of pairs) {
    let lo = 0, hi = seen.length;
    while (lo < hi) { const mid = (lo + hi) >> 1; if (b < seen[mid]) hi = mid; else lo = mid + 1; }
    total += seen.length - lo;
    seen.splice(lo, 0, b);
  }
  return total;
}

function transpose(order, up, down) {
  let improved = true, rounds = 0;
  while (improved && rounds < 4) {
    improved = false;
    rounds += 1;
    order.forEach((row, k) => {
      const above = k ? positions(order[k - 1]) : new Map();
      const below = k + 1 < order.length ? positions(order[k + 1]) : new Map();
      for (let i = 0; i + 1 < row.length; i++) {
        const a = row[i], b = row[i + 1];
        if (pairCost(b, a, up, down, above, below) < pairCost(a, b, up, down, above, below)) {
          row[i] = b; row[i + 1] = a; improved = true;
        }
      }
    });
  }
}

function pairCost(left, right, up, down, above, below) {
  let cost = 0;
  for (const [links, pos] of [[up, above], [down, below]]) {
    const ls = links[left].filter((u) => pos.has(u)).map((u) => pos.get(u));
    const rs = links[right].filter((u) => pos.has(u)).map((u) => pos.get(u));
    for (const p of ls) for (const q of rs) if (p > q) cost += 1;
  }
  return cost;
}

function place(order, up, down, widths, n) {
  const width = (v) => (v < n ? widths[v] : DUMMY_W), x = new Map();
  for (const row of order) {
    let cursor = MARGIN;
    for (const v of row) { x.set(v, cursor + width(v) / 2); cursor += width(v) + BOX_GAP; }
  }
  for (let s = 0; s < 6; s++) {
    const rows = [];
    if (s % 2 === 0) for (let k = 0; k < order.length; k++) rows.push(k);
    else for (let k = order.length - 1; k >= 0; k--) rows.push(k);
    const links = s % 2 === 0 ? up : down;
    for (const k of rows) {
      const wanted = order[k].map((v) => {
        if (!links[v].length) return x.get(v);
        let total = 0;
        for (const u of links[v]) total += x.get(u);
        return total / links[v].length;
      });
      fit(order[k], wanted, width, x);
    }
  }
  let least = Infinity;
  for (const row of order) for (const v of row) least = Math.min(least, x.get(v) - width(v) / 2);
  const shift = MARGIN - least;
  for (const [v, c] of x) x.set(v, c + shift);
  return x;
}

function fit(row, wanted, width, x) {
  const pos = [...wanted];
  for (let i = 1; i < row.length; i++) {
    pos[i] = Math.max(pos[i], pos[i - 1] + (width(row[i - 1]) + width(row[i])) / 2 + BOX_GAP);
  }
  for (let i = row.length - 2; i >= 0; i--) {
    pos[i] = Math.min(pos[i], pos[i + 1] - (width(row[i]) + width(row[i + 1])) / 2 - BOX_GAP);
  }
  row.forEach((v, i) => x.set(v, pos[i]));
}

function draw(n, upward, chains, layer, order, x, widths) {
  const top = (depth) => MARGIN + depth * (BOX_H + LAYER_GAP);
  const boxes = [];
  for (let v = 0; v < n; v++) boxes.push([x.get(v) - widths[v] / 2, top(layer[v]), widths[v], BOX_H]);
  const depthOf = new Map();
  order.forEach((row, k) => row.forEach((v) => depthOf.set(v, k)));
  const routes = chains.map((chain, k) => {
    const points = [[x.get(chain[0]), top(depthOf.get(chain[0])) + BOX_H]];
    for (const v of chain.slice(1, -1)) points.push([x.get(v), top(depthOf.get(v))], [x.get(v), top(depthOf.get(v)) + BOX_H]);
    if (chain.length > 1) points.push([x.get(chain[chain.length - 1]), top(depthOf.get(chain[chain.length - 1]))]);
    return upward.has(k) ? points.reverse() : points;
  });
  let right = 0, bottom = 0;
  for (const [bx, by, bw, bh] of boxes) { right = Math.max(right, bx + bw); bottom = Math.max(bottom, by + bh); }
  return { boxes, routes, width: right + MARGIN, height: bottom + MARGIN };
}
