"""nbhelpers.node_times: a backward's profile given to the nodes that ran it, every node once, by name."""
import re

import pytest
import torch
from torch import nn

from nbhelpers import graph_view, memory_timeline, models, module_scope, node_times


def _timed(model, x):
    with module_scope.record():
        loss = model(x).sum()
    return node_times.backward(loss, module=model)


def test_every_node_gets_its_own_range_and_the_times_add_up_to_the_profile():
    torch.manual_seed(0)
    graph, times = _timed(models.mlp(), torch.rand(16, 784))
    assert sorted(t.node for t in times.nodes) == list(range(len(graph.nodes)))      # each node once
    assert [t.node for t in times.nodes] == list(graph.order)                        # in backward's order
    owned = sum(t.us for t in times.nodes)
    assert owned + sum(us for _, us in times.unowned) == pytest.approx(times.total_us)
    assert [name for name, _ in times.unowned] == ["aten::ones_like"]    # backward()'s seed gradient, made outside
    addmm = [t for t in times.nodes if graph.nodes[t.node].label == "AddmmBackward0"]
    assert all(any(name == "aten::mm" for name, _ in t.ops) for t in addmm)           # its matmuls, inside it


def test_a_profile_of_another_graph_is_refused_by_name():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(4, 4), nn.Tanh())
    graph, _ = _timed(net, torch.randn(2, 4))
    other = nn.Sequential(nn.Linear(4, 4), nn.Sigmoid())
    with module_scope.record():
        loss = other(torch.randn(2, 4)).sum()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        loss.backward()
    with pytest.raises(ValueError, match="no node of this graph"):
        node_times.attribute(graph, prof.events())


def test_a_loss_that_is_not_a_scalar_with_a_graph_gets_a_clear_error():
    with pytest.raises(ValueError, match="must be a scalar with a grad_fn"):
        node_times.backward(torch.ones(3, requires_grad=True) * 2)
    with pytest.raises(TypeError, match="loss"):
        node_times.backward("loss")


def test_the_view_data_carries_each_nodes_time_and_events_and_names_what_no_node_owns():
    torch.manual_seed(0)
    graph, times = _timed(models.mlp(), torch.rand(16, 784))
    data = graph_view.from_autograd(graph, times=times)
    slowest = max(times.nodes, key=lambda t: t.us)
    rows = dict(graph_view.details(data, slowest.node))
    assert rows["time"] == f"{slowest.us:,.0f} us, {times.share(slowest):.1%} of the backward"
    listed = rows["profiler events"].split(", ")
    assert len(listed) == len(slowest.ops) and all(" us" in op for op in listed)     # every event, none dropped
    assert data.title.startswith("backward ") and "outside every node: aten::ones_like" in data.title
    assert "time" not in dict(graph_view.details(graph_view.from_autograd(graph), slowest.node))
    with pytest.raises(TypeError, match="times"):
        graph_view.from_autograd(graph, times={"fc1": 3.0})


def test_each_box_is_barred_by_its_share_of_the_backward_and_the_longest_bar_is_the_slowest_box():
    torch.manual_seed(0)
    graph, times = _timed(models.mlp(), torch.rand(16, 784))
    data = graph_view.from_autograd(graph, times=times)
    owned = sum(t.us for t in times.nodes) / times.total_us
    for expanded in (frozenset(), frozenset(p for n in data.nodes for p in n.group)):    # closed, every module open
        shown = graph_view.view(data, expanded)
        assert sum(b.share for b in shown.boxes) == pytest.approx(owned)       # every node's time, in one box each
        assert all(b.title.endswith(f" · {b.share:.1%} of the backward") for b in shown.boxes if b.share)
        svg = graph_view.render_svg(shown)
        bars = re.findall(r'<rect x="[^"]+" y="[^"]+" width="([^"]+)" height="3" fill="#d9480f"/>', svg)
        slowest = max(shown.boxes, key=lambda b: b.share)
        assert len(bars) == sum(1 for b in shown.boxes if b.share) and max(map(float, bars)) == round(slowest.w - 6, 1)
        assert "bar: share of the backward" in svg                                # the legend says what a bar is
    plain = graph_view.render_svg(graph_view.view(graph_view.from_autograd(graph)))
    assert "#d9480f" not in plain and "bar: share of the backward" not in plain    # untimed: no bar, no legend


def test_the_time_line_lays_every_range_on_the_backwards_clock_and_its_picture_draws_each():
    torch.manual_seed(0)
    graph, times = _timed(models.mlp(), torch.rand(16, 784))
    line = node_times.timeline(graph, times)
    nodes = [n for n in line["node"] if n >= 0]
    assert sorted(nodes) == list(range(len(graph.nodes))) and nodes == list(graph.order)   # a slice each, in order
    assert [line["strings"][s] for s, n in zip(line["name"], line["node"]) if n >= 0] == \
        [graph.nodes[n].label for n in nodes]
    assert [line["strings"][s] for s, n in zip(line["name"], line["node"]) if n < 0] == ["aten::ones_like"]
    assert sum(line["us"]) == pytest.approx(times.total_us)                     # the slices are the whole profile
    ends = [start + us for start, us in zip(line["start"], line["us"])]
    assert all(end <= later + 1e-6 for end, later in zip(ends, line["start"][1:]))  # one lane: none overlaps the next
    assert line["span"] == max(ends)                                         # the clock's length, for the drawings
    still = memory_timeline.render_svg(line)
    assert still.count('fill="#d9480f"') == len(nodes) and still.count('fill="#bbb"') == 1
    with pytest.raises(TypeError, match="node_times.timeline"):
        node_times.timeline(graph, {"us": []})
    small, _ = _timed(nn.Linear(3, 1), torch.randn(2, 3))
    with pytest.raises(ValueError, match="names nodes this graph does not have"):
        node_times.timeline(small, times)
