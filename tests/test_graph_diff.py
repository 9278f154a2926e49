"""nbhelpers.graph_diff: nodes matched by module, label and occurrence; added, removed and changed marked."""
import pytest

from nbhelpers import graph_diff
from nbhelpers.graph_view import GraphData, SavedRow, ViewNode


def _graph(*nodes):
    return GraphData(tuple(nodes), tuple((k, k + 1) for k in range(len(nodes) - 1)))


def test_marks_added_removed_and_changed_nodes():
    saved = lambda n: (SavedRow("_saved_self", (n,), "float32", 4 * n, 0, 0),)   # noqa: E731
    a = _graph(ViewNode("Sum", "op"), ViewNode("Mul", "saves", ("M",), saved(8)), ViewNode("Relu", "op", ("M",)))
    b = _graph(ViewNode("Sum", "op"), ViewNode("Mul", "saves", ("M",), saved(2)), ViewNode("Tanh", "op", ("M",)))
    d = graph_diff.diff(a, b)
    assert d.matched == ((0, 0), (1, 1))
    assert [n.mark for n in d.a.nodes] == ["", "changed", "removed"]
    assert [n.mark for n in d.b.nodes] == ["", "changed", "added"]
    assert d.saved_bytes == (32, 8)


def test_the_kth_occurrence_matches_the_kth():
    a = _graph(ViewNode("Add", "op"), ViewNode("Add", "op"))
    b = _graph(ViewNode("Add", "op"))
    assert graph_diff.diff(a, b).matched == ((0, 0),) and graph_diff.diff(a, b).a.nodes[1].mark == "removed"


def test_an_empty_graph_is_refused():
    with pytest.raises(ValueError, match="no nodes"):
        graph_diff.diff(GraphData((), ()), _graph(ViewNode("x", "op")))
