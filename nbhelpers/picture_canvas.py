"""The SVG that `pictures` draws on: boxes, arrows and labels that fit their boxes, light and dark.

Labels are monospace, so a label's width is known without a browser (graph_boxes' rule: 0.62 em a column);
each label is placed in a box, cut with an ellipsis where it would overflow it, and never smaller than
MIN_TEXT_PX. Text goes in escaped (names come from user code). The SVG carries its own stylesheet: the graph
view's light colours, and its dark ones (graph_view_dom.js's `gv-dark`) under `@media (prefers-color-scheme:
dark)`; the background switches with the text, so the picture is readable whichever the viewer picks. No ids,
no random numbers: the same drawing gives the same bytes, which nbval compares.

Example:
    canvas = Canvas(200, 60)
    canvas.text("hello", canvas.box(10, 10, 180, 40, "op"), size=12)
    svg = canvas.picture().svg
"""
from __future__ import annotations

import html
from dataclasses import dataclass

from nbhelpers import graph_boxes

__all__ = ["Picture", "Label", "Box", "Canvas", "MIN_TEXT_PX", "FILLS"]

MIN_TEXT_PX, COLUMN_EM = 10, 0.62
# fill classes: (light, dark), the graph view's --gv-* colours
FILLS = {"panel": ("#f7f7f7", "#2a2a2a"), "op": ("#dbe8f7", "#233a57"), "leaf": ("#d9f2d9", "#1f4a2a"),
         "group": ("#ece6f5", "#3b3055"), "kernel": ("#fde7c8", "#5a3d12"), "break": ("#f7c6c6", "#6a2424"),
         "line": ("#f1f1f1", "#333333")}
_LIGHT = {"text": "#111", "bg": "#fff", "edge": "#777", "box": "#555", **{k: v[0] for k, v in FILLS.items()}}
_DARK = {"text": "#eee", "bg": "#1e1e1e", "edge": "#999", "box": "#aaa", **{k: v[1] for k, v in FILLS.items()}}


def _rules(colours: dict[str, str]) -> str:
    """CSS scoped to svg.pic: an SVG inlined in a page (nbconvert's HTML) styles only itself."""
    rules = [f"svg.pic text{{fill:{colours['text']}}}", f"svg.pic .pic-bg{{fill:{colours['bg']}}}",
             f"svg.pic .pic-edge{{stroke:{colours['edge']};fill:none}}", f"svg.pic .pic-head{{fill:{colours['edge']}}}",
             f"svg.pic .pic-box{{stroke:{colours['box']}}}"]
    return "".join(rules + [f"svg.pic .pic-{k}{{fill:{colours[k]}}}" for k in FILLS])


_STYLE = _rules(_LIGHT) + "@media (prefers-color-scheme: dark){" + _rules(_DARK) + "}"


@dataclass(frozen=True)
class Box:
    x: float
    y: float
    w: float
    h: float


@dataclass(frozen=True)
class Label:
    """A label as drawn (after any cut), the box it must stay inside, and its extent in pixels."""

    text: str
    size: int
    left: float
    right: float
    top: float
    bottom: float
    box: Box

    def inside(self) -> bool:
        b = self.box
        return b.x <= self.left and self.right <= b.x + b.w and b.y <= self.top and self.bottom <= b.y + b.h


@dataclass(frozen=True, repr=False)
class Picture:
    """An SVG a notebook shows (`_repr_svg_`), and the labels on it, for tests and asserts."""

    svg: str
    labels: tuple[Label, ...]

    def __repr__(self) -> str:     # the text/plain beside the SVG: short, and the same on every run
        return f"Picture: SVG with {len(self.labels)} labels"

    def _repr_svg_(self) -> str:
        return self.svg

    def texts(self) -> list[str]:
        return [label.text for label in self.labels]


def width_of(text: str, size: int) -> float:
    """The pixels `text` takes at `size` px in a monospace font."""
    return graph_boxes.columns(text) * COLUMN_EM * size


class Canvas:
    """Shapes and labels in drawing order; `picture()` writes the SVG."""

    def __init__(self, width: float, height: float):
        self.width, self.height = width, height
        self._parts: list[str] = []
        self._labels: list[Label] = []

    def box(self, x: float, y: float, w: float, h: float, fill: str = "op", outline: bool = True) -> Box:
        if fill not in FILLS:
            raise ValueError(f"fill must be one of {sorted(FILLS)}, got {fill!r}")
        stroke = ' class="pic-box pic-' + fill + '"' if outline else f' class="pic-{fill}"'
        self._parts.append(f'<rect x="{x:.1f}" y="{y:.1f}" width="{w:.1f}" height="{h:.1f}" rx="4"{stroke}/>')
        return Box(x, y, w, h)

    def area(self, x: float, y: float, w: float, h: float) -> Box:
        """A box that is not drawn: the room a label has (a legend's text, a note under a field)."""
        return Box(x, y, w, h)

    def text(self, text: str, box: Box, size: int = 12, x: float | None = None, y: float | None = None,
             anchor: str = "middle", measured: bool = False) -> Label:
        """`text` in `box` (centred unless x/y/anchor say otherwise), cut with an ellipsis to stay inside it.

        measured=True marks a number measured on this run (class pic-measured): nbval's sanitize file hides
        exactly those from the comparison, and the reader still sees them."""
        if size < MIN_TEXT_PX:
            raise ValueError(f"size must be at least {MIN_TEXT_PX} px to be legible, got {size}")
        x = box.x + box.w / 2 if x is None else x
        y = box.y + box.h / 2 + 0.35 * size if y is None else y
        room = {"middle": 2 * min(x - box.x, box.x + box.w - x), "start": box.x + box.w - x,
                "end": x - box.x}[anchor]
        shown = graph_boxes.fitted(text, room, COLUMN_EM * size)
        w = width_of(shown, size)
        left = {"middle": x - w / 2, "start": x, "end": x - w}[anchor]
        label = Label(shown, size, left, left + w, y - 0.8 * size, y + 0.2 * size, box)
        self._labels.append(label)
        mark = ' class="pic-measured"' if measured else ""
        self._parts.append(f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}" text-anchor="{anchor}"{mark}>'
                           f'{html.escape(shown)}</text>')
        return label

    def arrow(self, *points: tuple[float, float]) -> None:
        """A line through `points` with a head at the last: a drawn triangle, so the SVG needs no marker id."""
        (x1, y1), (x2, y2) = points[-2:]
        length = max(((x2 - x1) ** 2 + (y2 - y1) ** 2) ** 0.5, 1e-9)
        ux, uy = (x2 - x1) / length, (y2 - y1) / length
        bx, by = x2 - 7 * ux, y2 - 7 * uy
        head = f"{x2:.1f},{y2:.1f} {bx - 3.5 * uy:.1f},{by + 3.5 * ux:.1f} {bx + 3.5 * uy:.1f},{by - 3.5 * ux:.1f}"
        line = " ".join(f"{x:.1f},{y:.1f}" for x, y in [*points[:-1], (bx, by)])
        self._parts.append(f'<polyline points="{line}" class="pic-edge" stroke-width="1.5"/>'
                           f'<polygon points="{head}" class="pic-head"/>')

    def picture(self) -> Picture:
        head = (f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {self.width:.0f} {self.height:.0f}" '
                f'width="{self.width:.0f}" height="{self.height:.0f}" class="pic" font-family="DejaVu Sans Mono, '
                f'Menlo, Consolas, monospace"><style>{_STYLE}</style>'
                f'<rect width="100%" height="100%" class="pic-bg"/>')
        return Picture(head + "".join(self._parts) + "</svg>", tuple(self._labels))
