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
  const first = firstOrder(nodesIn, up, down);
  const starts = [first];
  if (total <= 1000) starts.push(first.map((row) => [...row].reverse()));
  let best = null, bestCount = null;
  for (const order of starts) {
    const [candidate, count] = sweep(order, up, down, sweeps);
    if (bestCount === null || count < bestCount) { best = candidate; bestCount = count; }
  }
  return best;
}

function firstOrder(nodesIn, up, down) {
  const rowOf = new Array(up.length).fill(0);
  nodesIn.forEach((row, k) => { for (const v of row) rowOf[v] = k; });
  const order = nodesIn.map(() => []), seen = new Array(up.length).fill(false);
  for (let root = 0; root < up.length; root++) {
    const stack = up[root].length ? [] : [root];
    while (stack.length) {
      const v = stack.pop();
      if (seen[v]) continue;
      seen[v] = true;
      order[rowOf[v]].push(v);
      for (let i = down[v].length - 1; i >= 0; i--) stack.push(down[v][i]);
    }
  }
  return order;
}

function sumOf(values) { let total = 0; for (const v of values) total += v; return total; }

function sweep(order, up, down, sweeps) {
  let best = order.map((r) => [...r]), bestCount = sumOf(gapCounts(order, down));
  const times = bestCount ? sweeps : 0;      // Python's range(...) is evaluated once
  for (let s = 0; s < times; s++) {
    const downward = s % 2 === 0, useMedian = s % 4 >= 2;
    const rows = [];
    if (downward) for (let k = 1; k < order.length; k++) rows.push(k);
    else for (let k = order.length - 2; k >= 0; k--) rows.push(k);
    for (const k of rows) {
      sortByNeighbours(order[k], downward ? order[k - 1] : order[k + 1], downward ? up : down, useMedian);
    }
    const gaps = gapCounts(order, down);
    transpose(order, up, down, gaps);
    const c = sumOf(gaps);
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

function gapCounts(order, down) {
  const counts = [];
  for (let k = 0; k + 1 < order.length; k++) {
    const pos = positions(order[k + 1]), pairs = [];
    order[k].forEach((v, i) => { for (const w of down[v]) if (pos.has(w)) pairs.push([i, pos.get(w)]); });
    counts.push(inversions(pairs.sort(comparePairs)));
  }
  return counts;
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

function transpose(order, up, down, gaps) {
  let improved = true, rounds = 0;
  while (improved && rounds < 4) {
    improved = false;
    rounds += 1;
    for (let k = 0; k < order.length; k++) {
      if ((k && gaps[k - 1]) || (k < gaps.length && gaps[k])) improved = transposeRow(order, k, up, down, gaps) || improved;
    }
  }
}

function transposeRow(order, k, up, down, gaps) {
  const row = order[k];
  let swapped = false;
  const above = k ? positions(order[k - 1]) : new Map();
  const below = k + 1 < order.length ? positions(order[k + 1]) : new Map();
  for (let i = 0; i + 1 < row.length; i++) {
    const a = row[i], b = row[i + 1];
    const nowUp = pairCost(a, b, up, above), nowDown = pairCost(a, b, down, below);
    const thenUp = pairCost(b, a, up, above), thenDown = pairCost(b, a, down, below);
    if (thenUp + thenDown < nowUp + nowDown) {
      row[i] = b; row[i + 1] = a; swapped = true;
      if (k) gaps[k - 1] += thenUp - nowUp;
      if (k < gaps.length) gaps[k] += thenDown - nowDown;
    }
  }
  return swapped;
}

function pairCost(left, right, links, pos) {    // Python's bisect_left, by hand
  const rs = links[right].filter((u) => pos.has(u)).map((u) => pos.get(u)).sort((a, b) => a - b);
  let cost = 0;
  for (const u of links[left]) {
    if (!pos.has(u)) continue;
    const p = pos.get(u);
    let lo = 0, hi = rs.length;
    while (lo < hi) { const mid = (lo + hi) >> 1; if (rs[mid] < p) lo = mid + 1; else hi = mid; }
    cost += lo;
  }
  return cost;
}

function place(order, up, down, widths, n) {
  let total = 0;
  for (const row of order) total += row.length;
  const wide = [...widths];
  while (wide.length < total) wide.push(DUMMY_W);
  const x = new Array(total).fill(0);
  for (const row of order) {
    let cursor = MARGIN;
    for (const v of row) { x[v] = cursor + wide[v] / 2; cursor += wide[v] + BOX_GAP; }
  }
  const weight = [];
  for (let v = 0; v < total; v++) weight.push(v >= n ? 8 : up[v].length + down[v].length <= 1 ? 1 : 4);   // Python's _weight
  for (let s = 0; s < 6; s++) {
    const rows = [];
    if (s % 2 === 0) for (let k = 0; k < order.length; k++) rows.push(k);
    else for (let k = order.length - 1; k >= 0; k--) rows.push(k);
    const links = s % 2 === 0 ? up : down;
    for (const k of rows) {
      const row = order[k];
      const wanted = row.map((v) => (links[v].length ? mean(x, links[v], weight) : x[v]));
      if (row.length === 1) x[row[0]] = wanted[0];
      else fit(row, wanted, wide, x, weight);
    }
  }
  let least = Infinity;
  for (let v = 0; v < total; v++) least = Math.min(least, x[v] - wide[v] / 2);
  const shift = MARGIN - least;
  return x.map((c) => c + shift);
}

function mean(x, vs, weight) {
  let total = 0, mass = 0;
  for (const v of vs) { total += weight[v] * x[v]; mass += weight[v]; }
  return total / mass;
}

function fit(row, pos, wide, x, weight) {        // weighted pool adjacent violators, as in Python
  const gaps = [];
  for (let i = 0; i + 1 < row.length; i++) gaps.push((wide[row[i]] + wide[row[i + 1]]) / 2 + BOX_GAP);
  if (gaps.every((g, i) => pos[i] + g <= pos[i + 1])) { row.forEach((v, i) => { x[v] = pos[i]; }); return; }
  const blocks = [];
  for (let i = 0; i < row.length; i++) {
    const w = weight[row[i]];
    blocks.push([i, i, w * pos[i], w, 0]);
    while (blocks.length > 1) {
      const a = blocks[blocks.length - 2], b = blocks[blocks.length - 1];
      const shift = a[4] + gaps[a[1]];
      if (a[2] / a[3] + shift <= b[2] / b[3]) break;
      [a[1], a[2], a[3], a[4]] = [b[1], a[2] + b[2] - shift * b[3], a[3] + b[3], shift + b[4]];
      blocks.pop();
    }
  }
  for (const [first, last, total, count] of blocks) {
    let at = total / count;
    x[row[first]] = at;
    for (let i = first + 1; i <= last; i++) {
      at += gaps[i - 1];
      x[row[i]] = at;
    }
  }
}

function draw(n, upward, chains, layer, order, x, widths) {
  const top = (depth) => MARGIN + depth * (BOX_H + LAYER_GAP);
  const boxes = [];
  for (let v = 0; v < n; v++) boxes.push([x[v] - widths[v] / 2, top(layer[v]), widths[v], BOX_H]);
  const depthOf = new Map();
  order.forEach((row, k) => row.forEach((v) => depthOf.set(v, k)));
  const routes = chains.map((chain, k) => {
    const points = [[x[chain[0]], top(depthOf.get(chain[0])) + BOX_H]];
    for (const v of chain.slice(1, -1)) points.push([x[v], top(depthOf.get(v))], [x[v], top(depthOf.get(v)) + BOX_H]);
    if (chain.length > 1) points.push([x[chain[chain.length - 1]], top(depthOf.get(chain[chain.length - 1]))]);
    return upward.has(k) ? points.reverse() : points;
  });
  let right = 0, bottom = 0;
  for (const [bx, by, bw, bh] of boxes) { right = Math.max(right, bx + bw); bottom = Math.max(bottom, by + bh); }
  return { boxes, routes, width: right + MARGIN, height: bottom + MARGIN };
}
