"""nbhelpers.node_times: a backward's profile given to the nodes that ran it, every node once, by name."""
import re
import types

import pytest
import torch
from torch import nn

from nbhelpers import forward_graph, forward_view, graph_view, memory_timeline, models, module_scope, node_times


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


class _Chancy(nn.Module):
    """Each call runs another op than the last: no profile of a second forward has the first one's ops."""

    def __init__(self):
        super().__init__()
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        return x.relu() if self.calls % 2 else x.sigmoid()


def _ran(fg) -> list[int]:
    """The ids of the ops the forward runs without the tracer: all but autograd's detaches of saved outputs."""
    return [op.id for op in fg.ops if op.id not in forward_graph.autograd_detaches(fg)]


def _net():
    return nn.Sequential(nn.Linear(6, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Dropout(0.5), nn.Linear(8, 3))


def test_every_drawn_forward_op_gets_its_event_and_the_composite_ops_own_time_is_named_outside():
    torch.manual_seed(0)
    fg, times = node_times.forward(_net(), torch.rand(5, 6))
    assert [t.node for t in times.nodes] == _ran(fg)                   # every op once, in the order it ran
    assert [fg.ops[t.node].op for t in times.nodes][:2] == ["aten.t.default", "aten.addmm.default"]
    assert all(t.ops[0][0] == "aten::" + fg.ops[t.node].op.split(".")[1] for t in times.nodes)   # its own event first
    assert sum(t.us for t in times.nodes) + sum(us for _, us in times.unowned) == pytest.approx(times.total_us)
    assert {name for name, _ in times.unowned} == {"aten::linear", "aten::batch_norm", "aten::_batch_norm_impl_index",
                                                    "aten::dropout"}      # composite: the ops they call are drawn
    assert times.clock == "forward" and all(times.share(t) > 0 for t in times.nodes)


def test_the_timed_second_forward_leaves_the_buffers_and_random_numbers_as_one_traced_forward_does():
    x = torch.rand(5, 6)
    torch.manual_seed(0)
    once = _net()
    forward_graph.trace(once, x)
    after_once = (torch.get_rng_state(), [b.clone() for b in once.buffers()])
    torch.manual_seed(0)
    timed = _net()
    node_times.forward(timed, x)
    assert torch.equal(torch.get_rng_state(), after_once[0])
    assert all(torch.equal(a, b) for a, b in zip(timed.buffers(), after_once[1]))
    assert int(timed[1].num_batches_tracked) == 1                       # one forward counted, not two


def test_a_forward_that_runs_other_ops_the_second_time_or_raises_gets_a_clear_error():
    with pytest.raises(ValueError, match=r"op 0 \(aten.relu.default\) is not in the profile"):
        node_times.forward(_Chancy(), torch.randn(3))
    with pytest.raises(ValueError, match="the forward raised RuntimeError"):
        node_times.forward(nn.Linear(3, 2), torch.randn(2, 4))
    with pytest.raises(TypeError, match="node_times.forward"):
        node_times.forward(lambda x: x, torch.randn(2))


def test_the_twin_view_bars_each_op_by_its_share_of_the_forward_and_lists_its_events():
    torch.manual_seed(0)
    fg, times = node_times.forward(_net(), torch.rand(5, 6))
    data, _, _, _ = forward_view.twin(fg, times)
    slowest = max(times.nodes, key=lambda t: t.us)
    node = forward_view.node_numbers(fg)[slowest.node]
    rows = dict(graph_view.details(data, node))
    assert rows["time"] == f"{slowest.us:,.0f} us, {times.share(slowest):.1%} of the forward"
    assert len(rows["profiler events"].split(", ")) == len(slowest.ops)
    assert "; forward " in data.title and "outside every op: aten::linear" in data.title
    shown = graph_view.view(data, frozenset(p for n in data.nodes for p in n.group))
    assert sum(b.share for b in shown.boxes) == pytest.approx(sum(times.share(t) for t in times.nodes))
    assert all(b.title.endswith(" of the forward") for b in shown.boxes if b.share)
    assert "bar: share of the forward&#x27;s time" in graph_view.render_svg(shown)        # the legend, escaped
    with pytest.raises(TypeError, match="times"):
        graph_view.show_twin(fg, times=_timed(nn.Linear(3, 1), torch.randn(2, 3))[1])


def test_a_forwards_time_line_has_a_slice_per_drawn_op_that_selects_its_node_in_the_twin_view():
    torch.manual_seed(0)
    fg, times = node_times.forward(_net(), torch.rand(5, 6))
    line = node_times.timeline(fg, times)
    assert [n for n in line["node"] if n >= 0] == _ran(fg) and line["clock"] == "forward"     # op ids
    assert [line["strings"][s] for s, n in zip(line["name"], line["node"]) if n >= 0][:2] == ["t", "addmm"]
    assert sum(line["us"]) == pytest.approx(times.total_us)
    ends = [start + us for start, us in zip(line["start"], line["us"])]      # a composite op's own time lies in the
    assert all(end <= later + 1e-3 for end, later in zip(ends, line["start"][1:]))   # gaps around its ops: one lane
    assert "outside every op" in memory_timeline.render_svg(line)
    widget = graph_view.show_twin(fg, times=times, timeline=line)
    sent = graph_view._untext(widget.timeline)                             # each op's slice selects its box
    assert [n for n in sent["node"] if n >= 0] == list(forward_view.node_numbers(fg).values())
    assert "<rect" in widget._above
    with pytest.raises(ValueError, match="must be a forward's time-line"):
        graph_view.show_twin(fg, timeline=node_times.timeline(*_timed(nn.Linear(3, 1), torch.randn(2, 3))))
    graph, backward_times = _timed(nn.Linear(3, 1), torch.randn(2, 3))
    with pytest.raises(TypeError, match="node_times.timeline"):
        node_times.timeline(fg, backward_times)
    with pytest.raises(TypeError, match="node_times.timeline"):
        node_times.timeline(graph, times)


def _tiny(name: str):
    transformers = pytest.importorskip("transformers")
    if name == "gpt2":
        config = transformers.GPT2Config(n_layer=2, n_embd=16, n_head=2, vocab_size=32, n_positions=8)
        return transformers.GPT2LMHeadModel(config)
    config = transformers.BertConfig(hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=32,
                                     vocab_size=50)
    return transformers.BertForSequenceClassification(config)


@pytest.mark.parametrize("name", ["gpt2", "bert", "resnet18"])
def test_every_op_of_a_model_nobody_here_wrote_is_found_in_its_untraced_forwards_profile(name):
    """Under the tracer's dispatch mode a composite op takes its other branch (math attention adds its mask with
    `add`, eager with `add_`; `reshape` is `view`, eager `_reshape_alias`): each is still found as its op."""
    torch.manual_seed(0)
    ids = torch.arange(8).reshape(2, 4)
    if name == "resnet18":
        torchvision = pytest.importorskip("torchvision")
        model, args, kwargs = torchvision.models.resnet18(num_classes=4), (torch.rand(2, 3, 32, 32),), {}
    else:
        model, args, kwargs = _tiny(name), (), {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    fg, times = node_times.forward(model, *args, **kwargs)
    assert [t.node for t in times.nodes] == _ran(fg)
    assert sum(t.us for t in times.nodes) + sum(us for _, us in times.unowned) == pytest.approx(times.total_us)
    if name == "gpt2":                                # its causal mask is added; BERT's all-ones mask is dropped
        events = {n for t in times.nodes for n, _ in t.ops[:1]}
        assert "aten::add_" in events and "aten::_reshape_alias" in events     # found as the traced add and view


class _Wheres(nn.Module):
    """torch.where with a Python number is aten::where.ScalarOther, a composite op that calls aten::where.self:
    in the profile an aten::where event wraps an aten::where event."""

    def forward(self, x):
        y = torch.where(x > 0, x, 0.0).t()
        return torch.where(y < 1, y, 1.0).sum()


def test_a_composite_ops_own_time_is_outside_and_the_op_it_calls_gets_only_its_own():
    fg, times = node_times.forward(_Wheres(), torch.randn(3, 4))
    ops = [fg.ops[t.node].op for t in times.nodes]
    assert ops.count("aten.where.self") == 2 and "aten.t.default" in ops
    wheres = [t for t in times.nodes if fg.ops[t.node].op == "aten.where.self"]
    assert all(t.ops[0][0] == "aten::where" and "aten::scalar_tensor" not in dict(t.ops) for t in wheres)
    assert dict(times.unowned)["aten::where"] > 0                                   # the wrapper's own time, outside


class _Event:
    """A profiler event as attribute_forward reads one (torch.autograd.profiler_util.FunctionEvent's fields)."""

    def __init__(self, name, start, end, children=()):
        self.name, self.cpu_children, self.cpu_parent = name, list(children), None
        self.time_range = types.SimpleNamespace(start=start, end=end)
        self.cpu_time_total = end - start
        self.self_cpu_time_total = self.cpu_time_total - sum(c.cpu_time_total for c in children)
        for child in children:
            child.cpu_parent = self


def _op(k: int, name: str) -> forward_graph.ForwardOp:
    return forward_graph.ForwardOp(k, name, (), (), (), (), (), ())


def test_a_wrapper_named_as_the_op_it_calls_is_passed_through_so_no_later_op_takes_a_wrong_event():
    """An aten::where wrapping aten::where and an aten::mul: taken for the where op, it would hide that mul, and
    the next op would take a later mul (the tracer never sees below an op it records, so the wrapper is not it)."""
    wrapper = _Event("aten::where", 0, 10, [_Event("aten::where", 1, 4), _Event("aten::mul", 5, 8)])
    events = [wrapper, *wrapper.cpu_children, _Event("aten::mul", 12, 15)]
    fg = forward_graph.ForwardGraph((_op(0, "aten.where.self"), _op(1, "aten.mul.Tensor"), _op(2, "aten.mul.Tensor")),
                                    None, None)
    times = node_times.attribute_forward(fg, events)
    assert [(t.node, t.start_us, t.us) for t in times.nodes] == [(0, 1, 3), (1, 5, 3), (2, 12, 3)]
    assert times.outside == (("aten::where", 0, 1), ("aten::where", 4, 1), ("aten::where", 8, 2))   # its gaps
    assert times.total_us == 13
