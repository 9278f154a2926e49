"""A layered (Sugiyama-style) drawing of any directed graph: boxes in layers, edges routed between them.

The steps are the classic ones: break cycles (reverse a DFS's back edges, for the layout only), give each
node a layer (longest path, so every edge points down), replace an edge that spans several layers by a
chain of zero-size dummy points, order each layer to reduce crossings (start from the order a depth-first
search meets the vertices in, then barycentre sweeps down and up, keeping the best order seen, with adjacent
swaps while they help), and place boxes left to right with their centres pulled towards their neighbours'.
An edge is drawn from the bottom of its source box, through its dummy points, to the top of its target box;
every segment lies in the gap between two layers or in a dummy's own slot, so no edge crosses a box.
Everything is deterministic: the same graph gives the same numbers.

Example:
    drawing = graph_layout.layout(3, [(0, 1), (1, 2), (0, 2)], widths=[120, 120, 120])
    drawing.boxes[2], drawing.routes[2]        # (x, y, w, h) and the points of edge 0 -> 2
"""
from __future__ import annotations

from bisect import bisect_left, bisect_right
from dataclasses import dataclass
from typing import NamedTuple

__all__ = ["layout", "crossings", "cycle_edges"]      # layout() returns a Drawing

BOX_H, LAYER_GAP, BOX_GAP, DUMMY_W, MARGIN = 36.0, 40.0, 16.0, 8.0, 10.0


class Rect(NamedTuple):
    """A node's box: its top-left corner and size, in pixels."""

    x: float
    y: float
    w: float
    h: float


@dataclass(frozen=True)
class Drawing:
    """Where each node's box goes and the polyline of each edge, in pixels (y grows downwards)."""

    boxes: tuple[Rect, ...]                                  # per node
    routes: tuple[tuple[tuple[float, float], ...], ...]      # per edge, in the order given
    width: float
    height: float


def layout(n: int, edges: list[tuple[int, int]], widths: list[float], sweeps: int = 8) -> Drawing:
    """Lay out nodes 0..n-1 with the given box widths; cycles are allowed (some edges then point up)."""
    _check(n, edges, widths)
    if n == 0:
        return Drawing((), (), 2 * MARGIN, 2 * MARGIN)
    upward = _back_edges(n, edges)
    forward = [(d, s) if k in upward else (s, d) for k, (s, d) in enumerate(edges)]
    layer = _layers(n, forward)
    chains, nodes_in = _split_long_edges(n, forward, layer)
    total = max([n] + [v + 1 for row in nodes_in for v in row])      # nodes plus the long edges' dummies
    up, down = _neighbours(chains, total)
    order = _order(nodes_in, up, down, sweeps if n <= 2000 else min(sweeps, 4), total)   # big: fewer sweeps
    x = _place(order, up, down, widths, n)
    return _draw(n, upward, chains, layer, order, x, widths)


def crossings(drawing: Drawing) -> int:
    """Pairs of edge segments that cross between adjacent layers (the usual Sugiyama measure)."""
    by_gap: dict[float, list[tuple[float, float]]] = {}
    for route in drawing.routes:
        for (x1, y1), (x2, y2) in zip(route, route[1:]):
            if y1 != y2:
                top, bottom = (x1, x2) if y1 < y2 else (x2, x1)
                by_gap.setdefault(min(y1, y2), []).append((top, bottom))
    return sum(_inversions(sorted(segs)) for segs in by_gap.values())


def cycle_edges(n: int, edges: list[tuple[int, int]]) -> list[int]:
    """Indices of edges that close a cycle (a depth-first search's back edges, and self-loops)."""
    return sorted(_back_edges(n, edges))


def _check(n: int, edges, widths) -> None:
    if len(widths) != n:
        raise ValueError(f"widths has {len(widths)} entries for {n} nodes; pass one width per node")
    for s, d in edges:
        if not (0 <= s < n and 0 <= d < n):
            raise ValueError(f"edge ({s}, {d}) names a node outside 0..{n - 1}; pass edges between known nodes")


def _back_edges(n: int, edges) -> set[int]:
    """Indices of edges that close a cycle in an iterative DFS from every node in id order."""
    out: list[list[tuple[int, int]]] = [[] for _ in range(n)]
    for k, (s, d) in enumerate(edges):
        out[s].append((d, k))
    state, back = [0] * n, set()                     # 0 new, 1 on the stack, 2 done
    for start in range(n):
        if state[start]:
            continue
        stack = [(start, iter(out[start]))]
        state[start] = 1
        while stack:
            node, it = stack[-1]
            for d, k in it:
                if state[d] == 1:
                    back.add(k)
                elif state[d] == 0:
                    state[d] = 1
                    stack.append((d, iter(out[d])))
                    break
            else:
                state[node] = 2
                stack.pop()
    return back | {k for k, (s, d) in enumerate(edges) if s == d}


def _layers(n: int, forward) -> list[int]:
    """Longest path from the sources, in a Kahn topological order."""
    indeg, out = [0] * n, [[] for _ in range(n)]
    for s, d in forward:
        if s != d:
            indeg[d] += 1
            out[s].append(d)
    layer = [0] * n
    ready = [v for v in range(n) if indeg[v] == 0]
    while ready:
        v = ready.pop()
        for d in out[v]:
            layer[d] = max(layer[d], layer[v] + 1)
            indeg[d] -= 1
            if indeg[d] == 0:
                ready.append(d)
    return layer


def _split_long_edges(n: int, forward, layer):
    """Each edge as a chain of vertices, one per layer it passes (dummies numbered from n up)."""
    chains, nodes_in, next_id = [], {}, n
    for v in range(n):
        nodes_in.setdefault(layer[v], []).append(v)
    for s, d in forward:
        chain = [s]
        for depth in range(layer[s] + 1, layer[d]):
            chain.append(next_id)
            nodes_in.setdefault(depth, []).append(next_id)
            next_id += 1
        chains.append(chain + [d] if s != d else [s])
    return chains, [nodes_in.get(k, []) for k in range(max(nodes_in) + 1)]


def _neighbours(chains, total: int):
    up, down = [[] for _ in range(total)], [[] for _ in range(total)]
    for chain in chains:
        for a, b in zip(chain, chain[1:]):
            down[a].append(b)
            up[b].append(a)
    return up, down


def _order(nodes_in, up, down, sweeps: int, total: int) -> list[list[int]]:
    """Sweep down and up, each row sorted by its neighbours' mean (even sweeps) or median (odd pairs)
    position in the row just placed, with adjacent swaps after each sweep; keep the order with the
    fewest crossings seen (Gansner et al.'s dot ordering, simplified)."""
    first = _first_order(nodes_in, up, down)
    starts = [first]
    if total <= 1000:                                # small: also start from the mirrored order
        starts.append([list(reversed(row)) for row in first])
    best, best_count = None, None
    for order in starts:
        candidate, count = _sweep(order, up, down, sweeps)
        if best_count is None or count < best_count:
            best, best_count = candidate, count
    return best


def _first_order(nodes_in, up, down) -> list[list[int]]:
    """Rows in the order a depth-first search from the sources meets their vertices. A long edge's
    dummies then start beside the branch they leave, not after every real node of their row: that put
    each skip edge on the right, where equal barycentres kept it crossing the branch's last edge."""
    row_of = [0] * len(up)
    for k, row in enumerate(nodes_in):
        for v in row:
            row_of[v] = k
    order, seen = [[] for _ in nodes_in], [False] * len(up)
    for root in range(len(up)):
        stack = [] if up[root] else [root]
        while stack:
            v = stack.pop()
            if not seen[v]:
                seen[v] = True
                order[row_of[v]].append(v)
                stack.extend(reversed(down[v]))      # reversed: the first child is visited first
    return order


def _sweep(order, up, down, sweeps: int):
    best, best_count = [list(r) for r in order], sum(_gap_counts(order, down))
    for sweep in range(sweeps if best_count else 0):     # a start without crossings needs no sweep
        downward, use_median = sweep % 2 == 0, sweep % 4 >= 2
        rows = range(1, len(order)) if downward else range(len(order) - 2, -1, -1)
        for k in rows:
            fixed = order[k - 1] if downward else order[k + 1]
            _sort_by_neighbours(order[k], fixed, up if downward else down, use_median)
        gaps = _gap_counts(order, down)
        _transpose(order, up, down, gaps)            # keeps `gaps` exact, so no recount
        if sum(gaps) < best_count:
            best, best_count = [list(r) for r in order], sum(gaps)
        if best_count == 0:
            break
    return best, best_count


def _sort_by_neighbours(row: list[int], fixed: list[int], links, use_median: bool) -> None:
    pos = {v: i for i, v in enumerate(fixed)}
    current = {v: i for i, v in enumerate(row)}

    def key(v):
        ps = sorted(pos[u] for u in links[v] if u in pos)
        if not ps:
            return (current[v], current[v])
        middle = (ps[(len(ps) - 1) // 2] + ps[len(ps) // 2]) / 2 if use_median else sum(ps) / len(ps)
        return (middle, current[v])
    row.sort(key=key)


def _gap_counts(order, down) -> list[int]:
    """Crossings between each row and the next."""
    counts = []
    for upper, lower in zip(order, order[1:]):
        pos = {v: i for i, v in enumerate(lower)}
        pairs = sorted((i, pos[w]) for i, v in enumerate(upper) for w in down[v] if w in pos)
        counts.append(_inversions(pairs))
    return counts


def _inversions(pairs) -> int:
    """Crossings of segments sorted by their top end: inversions of their bottom ends (merge count)."""
    seen, count = [], 0
    for _, b in pairs:                               # bisect into a sorted list: fast for these sizes
        i = bisect_right(seen, b)
        count += len(seen) - i                       # earlier segments ending strictly to the right
        seen.insert(i, b)
    return count


def _transpose(order, up, down, gaps: list[int]) -> None:
    """Swap neighbours in a layer while that lowers the crossings with both adjacent layers. Rows with
    no crossing on either side cannot gain, so only the others are visited: big graphs stay cheap."""
    improved, rounds = True, 0
    while improved and rounds < 4:
        improved, rounds = False, rounds + 1
        for k in range(len(order)):
            if (k and gaps[k - 1]) or (k < len(gaps) and gaps[k]):
                improved = _transpose_row(order, k, up, down, gaps) or improved


def _transpose_row(order, k: int, up, down, gaps: list[int]) -> bool:
    """One pass of adjacent swaps in row k; `gaps` follows the change above and below it."""
    row, swapped = order[k], False
    above = {v: i for i, v in enumerate(order[k - 1])} if k else {}
    below = {v: i for i, v in enumerate(order[k + 1])} if k + 1 < len(order) else {}
    for i in range(len(row) - 1):
        a, b = row[i], row[i + 1]
        now = (_pair_cost(a, b, up, above), _pair_cost(a, b, down, below))
        then = (_pair_cost(b, a, up, above), _pair_cost(b, a, down, below))
        if then[0] + then[1] < now[0] + now[1]:
            row[i], row[i + 1], swapped = b, a, True
            if k:
                gaps[k - 1] += then[0] - now[0]
            if k < len(gaps):
                gaps[k] += then[1] - now[1]
    return swapped


def _pair_cost(left, right, links, pos) -> int:
    """Crossings between the edges of `left` and of `right` to one adjacent row, left placed first."""
    rs = sorted(pos[u] for u in links[right] if u in pos)
    return sum(bisect_left(rs, pos[u]) for u in links[left] if u in pos)


def _place(order, up, down, widths, n: int) -> list[float]:
    """Centre x of every vertex: packed left to right, then pulled towards neighbours' centres."""
    total = sum(len(row) for row in order)
    wide = list(widths) + [DUMMY_W] * (total - n)   # a list, not a function: this loop is the hot one
    x = [0.0] * total
    for row in order:
        cursor = MARGIN
        for v in row:
            x[v] = cursor + wide[v] / 2
            cursor += wide[v] + BOX_GAP
    weight = [_weight(v, n, up, down) for v in range(total)]
    for sweep in range(6):
        rows = range(len(order)) if sweep % 2 == 0 else range(len(order) - 1, -1, -1)
        links = up if sweep % 2 == 0 else down
        for k in rows:
            row = order[k]
            wanted = [_mean(x, links[v], weight) if links[v] else x[v] for v in row]
            if len(row) == 1:                        # alone in its row: nothing to keep apart
                x[row[0]] = wanted[0]
            else:
                _fit(row, wanted, wide, x, weight)
    shift = MARGIN - min(x[v] - wide[v] / 2 for v in range(total))
    return [c + shift for c in x]


def _weight(v: int, n: int, up, down) -> float:
    """How strongly a vertex holds its place: a long edge's point most (its edge stays straight), a box on
    the graph's spine next, a box hanging from one neighbour (a parameter's AccumulateGrad) least. Equal
    weights let such leaves push their parent aside in every row, and a residual network drifted sideways
    block after block (dot weighs its edges the same way, Gansner et al. 1993)."""
    if v >= n:
        return 8.0
    return 1.0 if len(up[v]) + len(down[v]) <= 1 else 4.0


def _mean(x, vs, weight) -> float:
    """The weighted mean, added one by one: sum() of floats is compensated from Python 3.12 on, so it would
    give other last bits on 3.12 than on 3.11 and than graph_layout.js's plain loop."""
    total = mass = 0.0
    for v in vs:
        total += weight[v] * x[v]
        mass += weight[v]
    return total / mass


def _fit(row, pos, wide, x, weight) -> None:
    """The positions nearest the wanted `pos` (weighted least squares) that keep the row's order and gaps:
    boxes that would overlap are pooled into a block centred on the weighted mean of what they want (the
    pool-adjacent-violators algorithm). Pushing overlaps one way instead set a crowded row to the right of
    its parent, and a chain of such rows drifted into a staircase 20,000 px wide on a residual stack."""
    gaps = [(wide[row[i]] + wide[row[i + 1]]) / 2 + BOX_GAP for i in range(len(row) - 1)]
    if all(pos[i] + gaps[i] <= pos[i + 1] for i in range(len(gaps))):   # nothing overlaps: the usual row
        for v, p in zip(row, pos):
            x[v] = p
        return
    blocks = []                 # [first, last, sum of weight * (wanted - offset), sum of weights, offset of last]
    for i in range(len(row)):
        w = weight[row[i]]
        blocks.append([i, i, w * pos[i], w, 0.0])
        while len(blocks) > 1:
            a, b = blocks[-2], blocks[-1]
            shift = a[4] + gaps[a[1]]                # b's start, measured from a's start
            if a[2] / a[3] + shift <= b[2] / b[3]:
                break
            a[1], a[2], a[3], a[4] = b[1], a[2] + b[2] - shift * b[3], a[3] + b[3], shift + b[4]
            blocks.pop()
    for first, last, total, mass, _ in blocks:
        at = total / mass
        x[row[first]] = at
        for i in range(first + 1, last + 1):
            at += gaps[i - 1]
            x[row[i]] = at


def _draw(n, upward, chains, layer, order, x, widths) -> Drawing:
    top = lambda depth: MARGIN + depth * (BOX_H + LAYER_GAP)     # noqa: E731
    # unrounded: graph_layout.js computes the same doubles, and a test compares the two exactly
    boxes = tuple(Rect(x[v] - widths[v] / 2, top(layer[v]), float(widths[v]), BOX_H) for v in range(n))
    depth_of = [0] * len(x)
    for k, row in enumerate(order):
        for v in row:
            depth_of[v] = k
    routes = []
    for k, chain in enumerate(chains):
        points = [(x[chain[0]], top(depth_of[chain[0]]) + BOX_H)]
        for v in chain[1:-1]:
            points += [(x[v], top(depth_of[v])), (x[v], top(depth_of[v]) + BOX_H)]
        if len(chain) > 1:
            points.append((x[chain[-1]], top(depth_of[chain[-1]])))
        routes.append(tuple(reversed(points)) if k in upward else tuple(points))
    right = max(b.x + b.w for b in boxes) if boxes else 0.0
    bottom = max((b.y + b.h for b in boxes), default=0.0)
    return Drawing(boxes, tuple(routes), right + MARGIN, bottom + MARGIN)
