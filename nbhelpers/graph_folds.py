"""Repeated blocks folded: numbered siblings of one class (the items of an nn.Sequential or nn.ModuleList)
whose recorded subgraphs are the same become one box, `layer1.0-1 · BasicBlock × 2`, and any copy can be opened.
Named siblings with the same graph (a layer's query, key and value; norm1 and norm2) play different roles:
they stay apart.

Two modules are copies when their nodes match one for one, in the order the graph lists them: the same
label, kind, op, module chain below the module, tooltip and notes (a forward op's shapes, a parameter's),
saved tensors' names, shapes and dtypes, with the copy's own name taken out of every text; and the same
edges inside the copy, with their labels. Edges across its border are its neighbours' business: the last of
twelve blocks feeds the final norm once where the others feed the next block twice (its first op and the
residual add), and it is still a copy. (A first block whose input needs no gradient usually is not: autograd
records less inside it.) Copies fold only where no path leaves them and comes back (`x = x + block(x)` written
in the parent puts the add between two blocks: folded, they would be one box both before and after it).
Equality is computed from the graph, never guessed from names: two blocks of one class with different shapes
(ResNet's `layer2.0`, which downsamples, and `layer2.1`) do not fold. graph_view.js computes the same folds with
the same rules (tests/test_graph_layout_js.py compares them).

A copy in `expanded` is open, as any module is; each run of consecutive copies not in it is one box
(`layer1.0-1 · BasicBlock × 2` with none open; `h.0-2` and `h.4-11` around an open `h.3`). Every copy open:
nothing is folded.

Example:
    found = graph_folds.folds(data)          # data: a graph_view.GraphData
    [f.label for f in found]                 # ['layer1.0-1 · BasicBlock × 2']
"""
from __future__ import annotations

import json
from dataclasses import dataclass

__all__ = ["Fold", "folds"]     # copy_rows, folded, places, box_key: for graph_boxes and graph_view


@dataclass(frozen=True)
class Fold:
    """Sibling modules with the same graph: `copies` (paths) of class `kind`, run by `parent`."""

    parent: str
    kind: str
    copies: tuple[str, ...]                    # consecutive numbers, in order
    names: tuple[str, ...]                     # each copy's path below the outermost module, as boxes name it
    nodes: int                                 # nodes in one copy

    def span(self, first: int, last: int) -> str:
        """`h.0-11`, `h.3`: copies first..last (indices into `copies`) by name."""
        if first == last:
            return self.names[first]
        return f"{self.names[first]}-{self.names[last].rpartition('.')[2]}"

    @property
    def label(self) -> str:
        return f"{self.span(0, len(self.copies) - 1)} · {self.kind} × {len(self.copies)}"


def folds(data) -> tuple[Fold, ...]:
    """Every run of two or more numbered siblings (items of one nn.Sequential or nn.ModuleList) with consecutive
    numbers, of one known class, whose subgraphs match; outermost parents first."""
    kinds = dict(data.module_types)
    graph = _Graph(data)
    found, taken = [], set()
    for parent, kids in graph.children.items():
        numbered = sorted(filter(None, map(_numbered, kids)))         # by container, then number
        run: list[tuple[str, int, str]] = []
        for holder, number, kid in [*numbered, ("", -1, "")]:
            if run and kid and (holder, number) == (run[-1][0], run[-1][1] + 1) and kinds.get(kid) \
                    and kinds.get(kid) == kinds.get(run[0][2]) and graph.signature(run[0][2]) == graph.signature(kid):
                run.append((holder, number, kid))
                continue
            copies = tuple(path for _, _, path in run)
            if len(copies) > 1 and not taken & set(copies) and not graph.loops_back(copies):
                taken |= set(copies)
                found.append(Fold(parent, kinds[copies[0]], copies,
                                  tuple(_relative(p, graph.roots[p]) for p in copies), len(graph.members[copies[0]])))
            run = [(holder, number, kid)] if kid else []
    return tuple(found)


def copy_rows(found: tuple[Fold, ...], chain: tuple[str, ...]) -> list[tuple[str, str]]:
    """The details panel's rows naming which copy of which fold a node with module chain `chain` is in."""
    return [("copy", f"{fold.names[k]} is copy {k + 1} of {len(fold.copies)}: {fold.label}")
            for fold in found for k, path in enumerate(fold.copies) if path in chain]


def folded(found: tuple[Fold, ...], expanded) -> dict[str, tuple[str, str]]:
    """Each copy not in `expanded` -> the first and last copy of its run of such copies: one box."""
    runs: dict[str, tuple[str, str]] = {}
    for fold in found:
        run: list[str] = []
        for path in [*fold.copies, None]:
            if path is not None and path not in expanded:
                run.append(path)
                continue
            runs.update((p, (run[0], run[-1])) for p in run)
            run = []
    return runs


def box_key(chain: tuple[str, ...], node: int, expanded, folded_runs: dict[str, tuple[str, str]]) -> str:
    """The box a node is drawn in: `n:<node>` with its whole chain open; `g:<path>`, the outermost closed
    module; `f:<first>|<last>`, a run of folded copies (folded())."""
    for path in chain:
        if path in folded_runs:
            first, last = folded_runs[path]
            return f"f:{first}|{last}"
        if path not in expanded:
            return f"g:{path}"
    return f"n:{node}"


def places(found: tuple[Fold, ...]) -> dict[str, tuple[int, int]]:
    """Each copy's path -> (its fold's index, its index among the fold's copies)."""
    return {path: (f, k) for f, fold in enumerate(found) for k, path in enumerate(fold.copies)}


class _Graph:
    """Each module's nodes (in node order), each parent's children (in first-seen order), each module's
    outermost module, each node's edges; and the modules' signatures, each computed once."""

    def __init__(self, data):
        self.data, self.members, self.roots, self._signatures = data, {}, {}, {}
        children: dict[str, dict[str, None]] = {}
        for i, n in enumerate(data.nodes):
            for k, path in enumerate(n.group):
                if not self.members.get(path) or self.members[path][-1] != i:
                    self.members.setdefault(path, []).append(i)
                self.roots.setdefault(path, n.group[0])
                if k:
                    children.setdefault(n.group[k - 1], {})[path] = None
        self.children = {p: list(kids) for p, kids in children.items()}
        labels = data.edge_labels or ("",) * len(data.edges)
        self.targets: list[list[tuple[int, str]]] = [[] for _ in data.nodes]
        for (s, d), label in zip(data.edges, labels):
            self.targets[s].append((d, label))

    def loops_back(self, copies: tuple[str, ...]) -> bool:
        """Whether a path leaves the copies and comes back into them: folded, they would be one box both before
        and after the nodes between (a residual add written in the parent's forward, `x = x + block(x)`)."""
        inside = {i for path in copies for i in self.members[path]}
        seen = {d for i in inside for d, _ in self.targets[i] if d not in inside}
        todo = list(seen)
        while todo:
            for d, _ in self.targets[todo.pop()]:
                if d in inside:
                    return True
                if d not in seen:
                    seen.add(d)
                    todo.append(d)
        return False

    def signature(self, path: str) -> str:
        """The module's subgraph with its own name taken out: what two copies must share."""
        if path not in self._signatures:
            nodes = self.members[path]
            place = {i: k for k, i in enumerate(nodes)}
            name = _relative(path, self.roots[path]) + "."
            rows = []
            for i in nodes:
                n = self.data.nodes[i]
                below = [p[len(path):] for p in n.group[n.group.index(path) + 1:]]
                inside = [[place[d], label] for d, label in self.targets[i] if d in place]
                rows.append([_unnamed(n.label, path, name), n.kind, n.op, below, _unnamed(n.tip, path, name),
                             [[field, _unnamed(text, path, name)] for field, text in n.notes],
                             [[s.attr, list(s.shape), s.dtype] for s in n.saved], inside])
            self._signatures[path] = json.dumps(rows, separators=(",", ":"))
        return self._signatures[path]


def _unnamed(text: str, path: str, name: str) -> str:
    """The copy's name taken out: "from ResNet.layer1.0.conv1.weight" and "layer1.0.conv1.weight" (a word that
    starts with its `name` below the root) both read "@.conv1.weight"."""
    words = text.replace(path + ".", "@.").split(" ")
    return " ".join("@." + w[len(name):] if w.startswith(name) else w for w in words)


def _relative(path: str, root: str) -> str:
    return path[len(root) + 1:] if root and path.startswith(root + ".") else path


def _numbered(path: str) -> tuple[str, int, str] | None:
    """`transformer.h.3` -> ("transformer.h", 3, path): an item of a container, named by its number (ASCII digits,
    as nn.Sequential and nn.ModuleList name them; a ModuleList never runs, so its items are its parent's children)."""
    holder, _, number = path.rpartition(".")
    return (holder, int(number), path) if number.isascii() and number.isdigit() else None
