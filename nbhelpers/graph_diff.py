"""Two graphs, node by node: which nodes one has and the other lacks, and which keep fewer bytes.

Nodes match when they have the same module chain, label and occurrence (the k-th such node in trace order),
which is what stays the same when a model is run two ways (with and without activation checkpointing, in
two precisions). `graph_view.show_diff` draws the result side by side.

Example:
    changes = graph_diff.diff(graph_view.from_autograd(plain), graph_view.from_autograd(checkpointed))
    changes.saved_bytes                          # (bytes the first keeps for backward, bytes the second keeps)
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from nbhelpers.graph_view import GraphData, check

__all__ = ["diff"]                               # diff() returns a GraphDiff


@dataclass(frozen=True)
class GraphDiff:
    """Two graphs with their nodes matched (same module path, label and occurrence), and marked."""

    a: GraphData                               # "removed": only here; "changed": saved bytes differ
    b: GraphData                               # "added": only here
    matched: tuple[tuple[int, int], ...]

    @property
    def saved_bytes(self) -> tuple[int, int]:  # what each side's nodes keep for backward
        return sum(n.saved_bytes for n in self.a.nodes), sum(n.saved_bytes for n in self.b.nodes)


def diff(a: GraphData, b: GraphData) -> GraphDiff:
    """Match the nodes of two graphs and mark what one has and the other lacks, and what saves less."""
    check(a, "graph_diff.diff", "a")
    check(b, "graph_diff.diff", "b")

    def signatures(data):
        seen: dict[tuple, int] = {}
        out = []
        for n in data.nodes:
            key = (n.group, n.label)
            out.append((*key, seen.setdefault(key, 0)))
            seen[key] += 1
        return out

    where_b = {sig: i for i, sig in enumerate(signatures(b))}
    matched = tuple((i, where_b[sig]) for i, sig in enumerate(signatures(a)) if sig in where_b)
    in_a, in_b = {i for i, _ in matched}, {j for _, j in matched}
    changed = {i for i, j in matched if a.nodes[i].saved_bytes != b.nodes[j].saved_bytes}
    changed_b = {j for i, j in matched if i in changed}
    marked_a = tuple(replace(n, mark="changed" if i in changed else "" if i in in_a else "removed")
                     for i, n in enumerate(a.nodes))
    marked_b = tuple(replace(n, mark="changed" if j in changed_b else "" if j in in_b else "added")
                     for j, n in enumerate(b.nodes))
    return GraphDiff(replace(a, nodes=marked_a), replace(b, nodes=marked_b), matched)
