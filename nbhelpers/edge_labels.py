"""Where each edge's label (a forward graph's tensor shape) is drawn: beside its own edge, clear of every box
and of every label placed before it.

Labels are monospace text of a known width, so the place is decided here, once, and graph_view.js's
placeLabels makes the same decisions with the same floating-point operations (tests/test_graph_layout_js.py
compares both). The rule, for the edges in the order the view lists them:
- the edges out of one box that all carry the same tensor share one label, drawn on the first that has room;
- a label tries the rows of its edge's first segment, top row first (16 px each, from the box it leaves),
  right of the line then left of it; then the rows of the next segment, and so on along the edge;
- it takes the first place that overlaps no box and no label already placed and stays inside the drawing.
A label with no such place is left out of the picture (the edge still stands for it); the first place of a
lone edge is just below and right of where it leaves its box, where the old rule put every label.

Example:
    places = edge_labels.place([(10, 10, 60, 36)], [(0, ((40, 46), (40, 86)), "[32, 784]")], 200, columns=len)
    places[0]                                   # (44, 59): the baseline's left end
"""
from __future__ import annotations

import math
from typing import Sequence

__all__ = ["place", "EDGE_FONT", "EDGE_COLUMN"]

EDGE_FONT = 11                       # px, as graph_boxes.SUB_FONT
EDGE_COLUMN = 0.62 * EDGE_FONT       # a monospace column, as graph_boxes.SUB_COLUMN (fonts' advance is 0.55-0.61 em)
ASCENT, DESCENT = 12.0, 4.0           # a label's room above and below its baseline: 11 px text and air
ROW, ROWS = ASCENT + DESCENT, 3      # rows of label room below a segment's top: the 40 px gap holds two and a half
SIDE, GAP = 2.0, 4.0                 # air left and right of a label's text; from its edge's line to the text
_CELL = 64.0                         # the grid that finds what a candidate place could overlap

Rect = tuple[float, float, float, float]          # x0, y0, x1, y1
Edge = tuple[int, Sequence[tuple[float, float]], str]    # source box, route, label ("" for none)


def place(boxes: Sequence[tuple[float, float, float, float]], edges: Sequence[Edge], width: float,
          *, columns) -> list[tuple[float, float] | None]:
    """Per edge, where its label's baseline starts, or None when it is not drawn (no label, shared with an
    earlier edge out of the same box, or no free place). `boxes` are (x, y, w, h); `columns(text)` counts
    a label's monospace columns (graph_boxes.columns counts East Asian characters twice)."""
    places: list[tuple[float, float] | None] = [None] * len(edges)
    if not any(label for _, _, label in edges):
        return places                              # an autograd graph: nothing to place, nothing to index
    taken = _Grid()
    for x, y, w, h in boxes:
        taken.add((x, y, x + w, y + h))
    shared, done = _shared_sources(edges), set()
    for k, (src, points, label) in enumerate(edges):
        if not label or src in done:
            continue
        size = columns(label) * EDGE_COLUMN
        for at in _candidates(points, size):
            rect = _padded(at, size)
            if rect[0] >= 0 and rect[2] <= width and not taken.meets(rect):
                taken.add(rect)
                places[k] = at
                if src in shared:
                    done.add(src)
                break
    return places


def _shared_sources(edges: Sequence[Edge]) -> set[int]:
    """The boxes whose outgoing edges all carry one label: one tensor used by several ops."""
    labels: dict[int, set[str]] = {}
    for src, _, label in edges:
        labels.setdefault(src, set()).add(label)
    return {src for src, seen in labels.items() if len(seen) == 1}


def _candidates(points, size: float):
    """Baseline starts along the route, nearest its start first: each segment's rows, right then left."""
    for (x1, y1), (x2, y2) in zip(points, points[1:]):
        if y1 == y2:
            continue
        low, high = min(y1, y2), max(y1, y2)
        for row in range(ROWS):
            top = low + 1 + row * ROW
            xa, xb = _x_at(x1, y1, x2, y2, top, low, high), _x_at(x1, y1, x2, y2, top + ROW, low, high)
            yield max(xa, xb) + GAP, top + ASCENT
            yield min(xa, xb) - GAP - size, top + ASCENT


def _x_at(x1: float, y1: float, x2: float, y2: float, y: float, low: float, high: float) -> float:
    """Where the segment is at height y (clamped to its ends)."""
    y = min(max(y, low), high)
    return x1 + (x2 - x1) * (y - y1) / (y2 - y1)


def _padded(at: tuple[float, float], size: float) -> Rect:
    """The room a label needs: its text, a little air each side, the full height of its row."""
    x, baseline = at
    return x - SIDE, baseline - ASCENT, x + size + SIDE, baseline + DESCENT


class _Grid:
    """Rects bucketed in _CELL-pixel cells: a candidate is checked against what shares a cell with it."""

    def __init__(self):
        self.cells: dict[tuple[int, int], list[Rect]] = {}

    def _keys(self, r: Rect):
        for cx in range(math.floor(r[0] / _CELL), math.floor(r[2] / _CELL) + 1):
            for cy in range(math.floor(r[1] / _CELL), math.floor(r[3] / _CELL) + 1):
                yield cx, cy

    def add(self, r: Rect) -> None:
        for key in self._keys(r):
            self.cells.setdefault(key, []).append(r)

    def meets(self, r: Rect) -> bool:
        return any(q[0] < r[2] and r[0] < q[2] and q[1] < r[3] and r[1] < q[3]
                   for key in self._keys(r) for q in self.cells.get(key, ()))
