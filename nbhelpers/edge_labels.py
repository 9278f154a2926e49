"""Where each edge's label (a forward graph's tensor shape) is drawn: beside its own edge, clear of every box and
of every label placed before it, and where it can, clear of the other edges' lines too.

Labels are monospace text of a known width, so the place is decided here, once, and graph_view.js's
placeLabels makes the same decisions with the same floating-point operations (tests/test_graph_layout_js.py
compares both). The rule, for the edges in the order the view lists them:
- the edges out of one box that all carry the same tensor share one label, drawn on the first that has room;
- a label tries the rows of its edge's first segment, top row first (16 px each, from the box it leaves),
  right of the line then left of it; then the rows of the next segment, and so on, for SEGMENTS segments;
- it takes the first place that overlaps no box, no label already placed and no other edge's line, else the
  first that overlaps no box and no label (a line under a label is a blemish; a label on a label is unreadable);
- the drawing grows to the right for a label that needs it; no label starts left of the drawing.
A label with no such place is left out of the picture (the edge still stands for it); the first place of a
lone edge is just below and right of where it leaves its box, where the old rule put every label.

Example:
    places, width = edge_labels.place([(10, 10, 60, 36)], [(0, ((40, 46), (40, 86)), "[32, 784]")], 200,
                                      columns=len)
    places[0]                                   # (44.0, 59.0): where the label's baseline starts
"""
from __future__ import annotations

import math
from typing import Sequence

from nbhelpers.graph_layout import MARGIN

__all__ = ["place", "EDGE_FONT", "EDGE_COLUMN"]

EDGE_FONT = 11                       # px, as graph_boxes.SUB_FONT
EDGE_COLUMN = 0.62 * EDGE_FONT       # a monospace column, as graph_boxes.SUB_COLUMN (fonts' advance is 0.55-0.61 em)
ASCENT, DESCENT = 12.0, 4.0          # a label's room above and below its baseline: 11 px text and air
ROW, ROWS = ASCENT + DESCENT, 3      # rows of label room below a segment's top: the 40 px gap holds two and a half
SIDE, GAP = 2.0, 4.0                 # air left and right of a label's text; from its edge's line to the text
SEGMENTS = 4                         # a label stays near its start: the gap below its box, the next slot and gap
_CELL = 64.0                         # the grid that finds what a candidate place could overlap

Rect = tuple[float, float, float, float]          # x0, y0, x1, y1
Edge = tuple[int, Sequence[tuple[float, float]], str]    # source box, route, label ("" for none)


def place(boxes: Sequence[tuple[float, float, float, float]], edges: Sequence[Edge], width: float,
          *, columns) -> tuple[list[tuple[float, float] | None], float]:
    """Per edge, where its label's baseline starts, or None when it is not drawn (no label, shared with an
    earlier edge out of the same box, or no free place); and the drawing's width with the labels in it.
    `boxes` are (x, y, w, h); `columns(text)` counts a label's monospace columns."""
    places: list[tuple[float, float] | None] = [None] * len(edges)
    if not any(label for _, _, label in edges):
        return places, width                       # an autograd graph: nothing to place, nothing to index
    taken, lines = _Grid(), _Grid()
    for x, y, w, h in boxes:
        taken.add((x, y, x + w, y + h), -1)
    for k, (_, points, _) in enumerate(edges):
        for x1, y1, x2, y2 in _lines(points):
            lines.add((min(x1, x2), min(y1, y2), max(x1, x2), max(y1, y2)), (k, x1, y1, x2, y2))
    shared, done = _out_edges(edges), set()
    for k, (src, points, label) in enumerate(edges):
        if not label or src in done:
            continue
        mine = shared.get(src, {k})                # a shared label may lie on its siblings' lines
        size = columns(label) * EDGE_COLUMN
        at = _first_free(_candidates(points, size), size, taken, lines, mine)
        if at is not None:
            rect = _padded(at, size)
            taken.add(rect, k)
            places[k], width = at, max(width, rect[2] + MARGIN)
            if src in shared:
                done.add(src)
    return places, width


def _out_edges(edges: Sequence[Edge]) -> dict[int, set[int]]:
    """The edges out of each box whose outgoing edges all carry one label (one tensor used by several ops)."""
    labels: dict[int, set[str]] = {}
    out: dict[int, set[int]] = {}
    for k, (src, _, label) in enumerate(edges):
        labels.setdefault(src, set()).add(label)
        out.setdefault(src, set()).add(k)
    return {src: ks for src, ks in out.items() if len(labels[src]) == 1}


def _lines(points) -> list[Rect]:
    """The route's segments (x1, y1, x2, y2), a straight vertical run through several layers as one: a skip
    edge of a 2,000-op stack passes a thousand layers, and indexing each piece cost a second."""
    found: list[Rect] = []
    for (x1, y1), (x2, y2) in zip(points, points[1:]):
        if y1 == y2:
            continue
        if found and x1 == x2 and found[-1][0] == found[-1][2] == x1 and found[-1][3] == y1:
            found[-1] = (x1, found[-1][1], x2, y2)
        else:
            found.append((x1, y1, x2, y2))
    return found


def _first_free(candidates, size: float, taken: _Grid, lines: _Grid, mine: set[int]):
    """The first candidate clear of boxes, labels and other edges' lines, else the first clear of boxes and
    labels, else None."""
    fallback = None
    for at in candidates:
        rect = _padded(at, size)
        if rect[0] < 0 or taken.holds(rect):
            continue
        if not lines.holds(rect, _crosses_another, mine):
            return at
        fallback = at if fallback is None else fallback
    return fallback


def _candidates(points, size: float):
    """Baseline starts along the route's first SEGMENTS segments, nearest its start first: each segment's rows,
    right then left. (A skip edge of a 2,000-op stack has a thousand segments: trying them all took seconds.)"""
    for (x1, y1), (x2, y2) in zip(points, points[1:SEGMENTS + 1]):
        if y1 == y2:
            continue
        for row in range(ROWS):
            top = min(y1, y2) + 1 + row * ROW
            xa, xb = _x_at(x1, y1, x2, y2, top), _x_at(x1, y1, x2, y2, top + ROW)
            yield max(xa, xb) + GAP, top + ASCENT
            yield min(xa, xb) - GAP - size, top + ASCENT


def _x_at(x1: float, y1: float, x2: float, y2: float, y: float) -> float:
    """Where the segment is at height y (clamped to its ends)."""
    y = min(max(y, min(y1, y2)), max(y1, y2))
    return x1 + (x2 - x1) * (y - y1) / (y2 - y1)


def _crosses_another(line: tuple, r: Rect, mine: set[int]) -> bool:
    """Whether an edge other than `mine` has this line (edge, x1, y1, x2, y2) through rect r."""
    return line[0] not in mine and _crosses(*line[1:], r)


def _crosses(x1: float, y1: float, x2: float, y2: float, r: Rect) -> bool:
    """Whether the (not horizontal) segment passes through the inside of rect r."""
    low, high = max(min(y1, y2), r[1]), min(max(y1, y2), r[3])
    if low >= high:
        return False
    xa, xb = _x_at(x1, y1, x2, y2, low), _x_at(x1, y1, x2, y2, high)
    return min(xa, xb) < r[2] and r[0] < max(xa, xb)


def _padded(at: tuple[float, float], size: float) -> Rect:
    """The room a label needs: its text, a little air each side, the full height of its row."""
    x, baseline = at
    return x - SIDE, baseline - ASCENT, x + size + SIDE, baseline + DESCENT


class _Grid:
    """Rects bucketed in _CELL-pixel cells, each with an item: what meets a rect is found among its cells'."""

    def __init__(self):
        self.cells: dict[tuple[int, int], list[tuple[Rect, object]]] = {}

    def _keys(self, r: Rect) -> list[tuple[int, int]]:
        rows = range(math.floor(r[1] / _CELL), math.floor(r[3] / _CELL) + 1)
        return [(cx, cy) for cx in range(math.floor(r[0] / _CELL), math.floor(r[2] / _CELL) + 1) for cy in rows]

    def add(self, r: Rect, item) -> None:
        for key in self._keys(r):
            self.cells.setdefault(key, []).append((r, item))

    def holds(self, r: Rect, test=None, *args) -> bool:
        """Whether an item whose rect meets r (touching counts left and right: a vertical line's rect has no
        width) passes test(item, r, *args) (any item, without a test)."""
        for key in self._keys(r):
            for q, item in self.cells.get(key, ()):
                if q[0] <= r[2] and r[0] <= q[2] and q[1] < r[3] and r[1] < q[3] and (test is None or test(item, r, *args)):
                    return True
        return False
