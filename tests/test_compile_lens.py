"""nbhelpers.compile_lens: Dynamo's graphs, deduplicated breaks with their registry codes, kernels linked to
FX nodes and lines, checked against torch._dynamo.explain; bad input."""
import contextlib
import logging
import io

import pytest
import torch
import torch.nn.functional as F

from nbhelpers import compile_lens, compile_view, models


def noisy(x):
    y = torch.relu(x)
    print("hi")
    scale = y.mean().item()
    return y * scale


def branchy(x):
    y = x * 2
    if y.sum() > 0:
        return y + 1
    return y - 1


def helper(x):
    print("tick")
    return x + 1


def twice(x):
    x = helper(x * 2)
    return helper(x * 3)


def repeated(x):
    for _ in range(2):
        x = x * 2
        print("tick")
    return x


def gelu_like(x):
    y = x + 0.044715 * x ** 3
    return 0.5 * x * (1 + torch.tanh(0.79788456 * y))


def _quiet(fn, *args, **kwargs):
    with contextlib.redirect_stdout(io.StringIO()):
        return compile_lens.capture(fn, *args, **kwargs)


def _explained(fn, *args):
    torch.compiler.reset()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        out = torch._dynamo.explain(fn)(*args)
    torch.compiler.reset()
    return out


def print_then_item(x):
    # nothing is traced before the print: the graph this break ends is empty
    print("first")
    return x.sum().item()


@pytest.mark.parametrize("fn, known", [
    (noisy, [("GB0059", 'print("hi")', 1, True), ("GB0124", "scale = y.mean().item()", 1, True)]),
    (branchy, [("GB0170", "if y.sum() > 0:", 1, True)]),              # Data-dependent branching
    (twice, [("GB0059", 'print("tick")', 3, True)]),                  # traced 3 times, one entry
    (print_then_item, [("GB0059", 'print("first")', 1, False), ("GB0124", "return x.sum().item()", 1, True)]),
], ids=lambda f: getattr(f, "__name__", ""))
def test_breaks_match_explain_deduplicated_and_carry_registry_codes(fn, known):
    report = _quiet(fn, torch.rand(8), kernels=False)
    assert [(b.code, b.line, b.count, b.in_explain) for b in report.breaks] == known
    explained = _explained(fn, torch.rand(8))
    expected = list(dict.fromkeys(((b.user_stack[-1].line or "").strip()) for b in explained.break_reasons))
    assert [b.line for b in report.breaks if b.in_explain] == expected       # explain's, deduplicated
    for b in report.breaks:                    # Dynamo met it at least as often as a graph ended there
        assert b.count >= sum((r.user_stack[-1].line or "").strip() == b.line for r in explained.break_reasons)
    assert all(b.code.startswith("GB") and b.explanation for b in report.breaks)    # in the installed registry
    assert [len(g.nodes) for g in report.graphs] == [len(g.graph.nodes) for g in explained.graphs]
    # explain's accumulator inside the lens's compile counts what a run of explain of its own does
    assert report.explained == (explained.graph_count, len(explained.break_reasons))
    assert sum(e.graphs for e in report.entries) == explained.graph_count     # and so does Dynamo's log


def _training_step():
    torch.manual_seed(0)
    model = models.mlp()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)

    def step(x, y):
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        return loss.detach()

    return step, (torch.rand(4, 28, 28), torch.randint(0, 10, (4,)))


def test_the_training_step_breaks_where_explain_cannot_see():
    step, args = _training_step()
    report = _quiet(step, *args, kernels=False)
    assert [(b.code, b.line, b.in_explain) for b in report.breaks] == [
        ("GB0008", "optimizer.zero_grad()", False),        # a skipped function, first thing: an empty graph
        ("GB0123", "loss.backward()", True),
        ("GB0025", "optimizer.step()", False)]             # torch._dynamo.graph_break() inside torch.optim
    assert report.breaks[2].where.startswith("torch/optim/optimizer.py:")
    explained = _explained(step, *args)
    assert [r.user_stack[-1].line.strip() for r in explained.break_reasons] == ["loss.backward()"]


def test_aot_autograd_forward_and_backward_graphs():
    step, args = _training_step()
    forward_graph = _quiet(step, *args, kernels=False).graphs[0]     # the forward and loss
    forward_ops = {n.target for n in forward_graph.forward if n.op == "call_function"}
    backward_ops = {n.target for n in forward_graph.backward if n.op == "call_function"}
    assert {"addmm.default", "relu.default"} <= forward_ops           # ATen ops, not torch functions
    assert {"mm.default", "threshold_backward.default"} <= backward_ops
    inference = _quiet(gelu_like, torch.rand(8), kernels=False).graphs[0]
    assert inference.forward and inference.backward == ()            # nothing needs a gradient


def test_the_view_draws_data_flow_and_aot_graphs_linked_to_the_dynamo_nodes():
    step, args = _training_step()
    report = _quiet(step, *args, kernels=False)
    data = compile_view.from_report(report)
    graph = report.graphs[0]
    index = {(n.group[-1] if n.group else "", n.label.split(":")[0]): i for i, n in enumerate(data.nodes)}
    box = f"graph 0 (entry {graph.entry})"
    for n in graph.nodes:                       # an edge from each value to each node that takes it
        assert all((index[box, a], index[box, n.name]) in data.edges for a in n.inputs)
    assert sum(len(n.inputs) for n in graph.nodes) > len(graph.nodes) // 2
    for part, nodes in (("forward", graph.forward), ("backward", graph.backward)):
        made = [n for n in nodes if (box, n.source) in index]
        assert any(n.op == "call_function" for n in made) if part == "forward" else made   # backward: the saves
        for n in made:                          # each ATen node drawn from the Dynamo node it came from
            aten, dynamo = index[f"{box}.AOTAutograd {part}", n.name], index[box, n.source]
            assert (dynamo, aten) in data.edges and dynamo in data.nodes[aten].links
    assert dict(data.module_types)[f"{box}.AOTAutograd backward"] == "ATen ops"


class _Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc, self.act = torch.nn.Linear(8, 8), torch.nn.ReLU()

    def forward(self, x):
        return self.act(self.fc(x)) * 2            # the `* 2` belongs to the block itself


class _Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layers, self.head = torch.nn.Sequential(_Block(), _Block()), torch.nn.Linear(8, 2)

    def forward(self, x):
        return self.head(self.layers(x)).sum()     # the sum runs in _Net's own forward


def test_each_fx_node_is_credited_to_the_module_module_scope_credits_in_eager():
    """Dynamo's nn_module_stack, read into FxNode.module, against module_scope's hooks on the eager model (an
    oracle that shares no code), op for op in the order forward ran them; and each saved tensor's module."""
    from nbhelpers import autograd_graph, module_scope

    torch.manual_seed(0)
    net, x = _Net(), torch.randn(3, 8)
    graph = _quiet(net, x, kernels=False).graphs[0]
    with module_scope.record():
        loss = net(x)
    by_op = {"addmm.default": "AddmmBackward0", "relu.default": "ReluBackward0", "mul.Tensor": "MulBackward0",
             "sum.default": "SumBackward0"}
    forward = [(by_op[n.target], n.module) for n in graph.forward if n.target in by_op]
    eager = sorted((fn for fn in autograd_graph._walk(loss.grad_fn) if fn.name() in by_op.values()),
                   key=lambda fn: fn._sequence_nr())                # the order forward made them
    assert forward == [(fn.name(), module_scope.module_of(fn)) for fn in eager]
    assert [m for _, m in forward] == ["_Net.layers.0.fc", "_Net.layers.0.act", "_Net.layers.0", "_Net.layers.1.fc",
                                       "_Net.layers.1.act", "_Net.layers.1", "_Net.head", "_Net"]   # sum: _Net's own
    saved = [n.module for n in graph.backward if n.op == "placeholder" and not n.name.startswith("tangents")]
    assert saved == ["", "_Net.layers.0.act", "_Net.layers.0", "_Net.layers.1.fc", "_Net.layers.1.act",
                     "_Net.layers.1", "_Net.head"]                  # x (an input: no module), then what each made
    assert {n.module for n in graph.backward if n.target == "threshold_backward.default"} == \
        {"_Net.layers.0.act", "_Net.layers.1.act"}
    assert all(n.module == "" for n in graph.nodes if n.op == "placeholder")       # inputs: made by no module


def test_a_compiled_torch_nn_module_is_named_after_its_class():
    """Dynamo traces a torch.nn module (nn.Sequential here) through its wrap_inline wrapper, whose frame calls it
    `fn`; its submodules are still named Sequential.0, ... as module_scope names them."""
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))
    graph = _quiet(model, torch.randn(2, 4), kernels=False).graphs[0]
    assert [n.module for n in graph.forward if n.target in ("addmm.default", "relu.default")] == \
        ["Sequential.0", "Sequential.1", "Sequential.2"]


def test_guards_of_each_entry_and_the_guard_each_recompile_failed():
    report = compile_lens.capture_calls(lambda x: (x * 2).sin().sum(), [torch.rand(n) for n in (8, 16, 1, 32)])
    assert [(e.id, e.call) for e in report.entries] == [("0/0", 0), ("0/1", 1), ("0/2", 2)]   # 32 reuses 0/1
    assert report.entries[0].failed == ()
    assert report.entries[1].failed == ("0/0: tensor 'x' size mismatch at index 0. expected 8, actual 16",)
    assert report.entries[2].failed == ("0/1: 2 <= x.size()[0]",           # sizes 0 and 1 are specialised
                                        "0/0: tensor 'x' size mismatch at index 0. expected 8, actual 1")
    sizes = [next(g.check for g in e.guards if g.kind == "TENSOR_MATCH").split("size=")[1] for e in report.entries]
    assert sizes == ["[8], stride=[1])", "[None], stride=[1])", "[1], stride=[1])"]   # None: a symbolic size
    checks = [(g.kind, g.check) for g in report.entries[1].guards]
    assert ("LAMBDA_GUARD", "2 <= L['x'].size()[0]") in checks            # the symbolic size's range


def test_split_calls_splits_the_first_calls_graphs_only_and_sees_the_same_recompiles():
    calls = [torch.rand(n, requires_grad=True) for n in (8, 16, 1, 32)]
    every = compile_lens.capture_calls(lambda x: (x * 2).sin().sum(), calls)
    first = compile_lens.capture_calls(lambda x: (x * 2).sin().sum(), calls, split_calls=1)
    assert [(e.id, e.call, e.failed) for e in first.entries] == [(e.id, e.call, e.failed) for e in every.entries]
    assert [[n.name for n in g.nodes] for g in first.graphs] == [[n.name for n in g.nodes] for g in every.graphs]
    assert all(g.forward and g.backward for g in every.graphs)
    assert [bool(g.forward and g.backward) for g in first.graphs] == [True, False, False]
    with pytest.raises(ValueError, match="split_calls"):
        compile_lens.capture_calls(lambda x: x.sin(), calls, split_calls=-1)


def test_kernels_map_to_fx_nodes_and_lines():
    report = compile_lens.capture(gelu_like, torch.rand(64))
    (kernel,) = report.kernels
    fx_names = {n.name for n in report.graphs[0].nodes}
    assert kernel.fx_nodes and set(kernel.fx_nodes) <= fx_names
    assert set(kernel.lines) == {"y = x + 0.044715 * x ** 3", "return 0.5 * x * (1 + torch.tanh(0.79788456 * y))"}
    assert "#include" in kernel.source or "extern" in kernel.source         # the generated C++


@torch.library.custom_op("nbtest::scaled_relu", mutates_args=())
def _scaled_relu(x: torch.Tensor, scale: float) -> torch.Tensor:
    return x.clamp_min(0) * scale


@_scaled_relu.register_fake
def _(x, scale):
    return torch.empty_like(x)


def _through_a_custom_op(x):
    return torch.sin(torch.ops.nbtest.scaled_relu(x * 2.0, 3.0)) + 1


def test_kernels_link_by_provenance_and_an_extern_op_to_no_kernel():
    """Inductor names the kernel before the op `..._mul_scaled_relu_0` (it realised that buffer while lowering
    the op), but its C++ computes only x * 2: the op is an extern call of its own, linked to no kernel."""
    report = compile_lens.capture(_through_a_custom_op, torch.rand(64))
    first, second = report.kernels
    assert "scaled_relu" in first.name and first.fx_nodes == ("mul",) and "2.0" in first.source
    assert set(second.fx_nodes) == {"sin", "add"}
    assert not [k for k in report.kernels if "scaled_relu" in k.fx_nodes]


def test_the_view_links_lines_to_fx_nodes_and_kernels():
    from nbhelpers import graph_view

    data = compile_view.from_report(compile_lens.capture(gelu_like, torch.rand(64)))
    labels = [n.label for n in data.nodes]
    line = labels.index("y = x + 0.044715 * x ** 3")
    kernel = next(i for i, label in enumerate(labels) if label.startswith("cpp_fused_"))
    from_line = {d for s, d in data.edges if s == line}
    assert from_line and all(data.nodes[d].group == ("graph 0 (entry 0/0)",) for d in from_line)
    assert any((d, kernel) in data.edges for d in from_line)                 # line -> FX node -> kernel
    assert from_line | {kernel} == set(data.nodes[line].links)              # a click lights them up
    assert line in data.nodes[kernel].links and from_line & set(data.nodes[kernel].links)
    assert dict(graph_view.details(data, kernel))["source"].count("\n") < 60  # the C++, its first lines
    assert graph_view.view(data).boxes                                       # it lays out


def test_a_break_sits_between_its_graphs_and_its_panel_names_the_code():
    from nbhelpers import graph_view

    data = compile_view.from_report(_quiet(noisy, torch.rand(8), kernels=False))
    labels = [n.label for n in data.nodes]
    item = labels.index("break GB0124: scale = y.mean().item()")
    before = [data.nodes[s].group for s, d in data.edges if d == item]
    after = [data.nodes[d].group for s, d in data.edges if s == item]
    assert before == [("graph 1 (entry 1/0)",)] and after == [("graph 2 (entry 2/0)",)]
    rows = dict(graph_view.details(data, item))
    assert rows["code"] == "GB0124" and "capture_scalar_outputs" in rows["explanation"]
    assert data.nodes[item].links == (labels.index("scale = y.mean().item()"),)


def test_a_loop_with_a_break_is_skipped_whole_and_still_named():
    assert _explained(repeated, torch.rand(2)).graph_count == 0             # explain shows nothing
    report = _quiet(repeated, torch.rand(2), kernels=False)
    assert report.graphs == () and [(b.code, b.line, b.in_explain) for b in report.breaks] == [
        ("GB0059", 'print("tick")', False)]


def test_a_function_dynamo_cannot_trace_at_all_names_its_break():
    def only_print(x):
        print("nothing to compile")
        return x

    report = _quiet(only_print, torch.rand(2), kernels=False)
    assert [(b.code, b.line) for b in report.breaks] == [("GB0059", 'print("nothing to compile")')]


def test_bad_input():
    with pytest.raises(TypeError, match="`fn` must be a function or module.*got int"):
        compile_lens.capture(3)

    def fails(x):
        raise ValueError("the model's own error")

    with pytest.raises(ValueError, match="the model's own error"):          # re-raised unchanged
        compile_lens.capture(fails, torch.rand(2), kernels=False)


def test_it_leaves_logging_and_config_as_it_found_them():
    import logging

    trace_log = logging.getLogger("torch.__trace")
    before = (list(trace_log.handlers), trace_log.propagate, torch._functorch.config.force_non_lazy_backward_lowering)

    def fails(x):
        raise ValueError("boom")

    _quiet(noisy, torch.rand(8), kernels=False)
    with pytest.raises(ValueError):
        compile_lens.capture(fails, torch.rand(2), kernels=False)
    assert (list(trace_log.handlers), trace_log.propagate,
            torch._functorch.config.force_non_lazy_backward_lowering) == before


def test_a_break_inside_torchvision_is_placed_in_torchvision_not_in_the_callers_line():
    # "inside torch" is the torch/ folder: torchvision/ beside it is not torch, and its line is the break's
    import inspect

    import torchvision

    def annotate(image):
        boxes = torch.tensor([[0, 0, 4, 4]])
        return torchvision.utils.draw_bounding_boxes(image, boxes, colors="red").float() * 2

    report = compile_lens.capture(annotate, torch.zeros(3, 8, 8, dtype=torch.uint8), kernels=False)
    data_dependent = next(b for b in report.breaks if b.gb_type == "Data dependent operator")
    assert data_dependent.line in inspect.getsource(torchvision.utils.draw_bounding_boxes)
    assert data_dependent.where == ""                          # not "torch...vision/utils.py"


def test_recompiles_drawn_call_by_call_with_the_guard_each_entry_failed():
    sizes = (64, 1024, 16, 1)
    report = compile_lens.capture_calls(lambda x: (x * 2).relu().sum(), [torch.rand(n, 8) for n in sizes])
    data = compile_view.from_calls(report, [f"batch {n}" for n in sizes])
    labels = [n.label for n in data.nodes]
    assert labels[:4] == ["batch 64", "batch 1024", "batch 16", "batch 1"]     # the calls, in order
    index = {label: i for i, label in enumerate(labels)}
    for e in report.entries:
        assert (e.call, index[f"entry {e.id}: <lambda>"]) in data.edges            # a call -> what it compiled
        for reason in e.failed:                                                    # old entry -> guard -> new
            failed_id, _, why = reason.partition(": ")
            guard = index[f"{failed_id} failed: {why}"]
            assert (index[f"entry {failed_id}: <lambda>"], guard) in data.edges
            assert (guard, index[f"entry {e.id}: <lambda>"]) in data.edges
    assert sum(n.kind == "guard" for n in data.nodes) == sum(len(e.failed) for e in report.entries) >= 2
    assert dict(data.nodes[2].notes)["compiled"].startswith("nothing")           # batch 16 reused an entry
    with pytest.raises(ValueError, match="`labels` must name each of the 4 calls"):
        compile_view.from_calls(report, ["one"])


_QUIET_LOG = logging.getLogger("nbhelpers.tests.quiet")
_QUIET_LOG.addHandler(logging.NullHandler())
_QUIET_LOG.propagate = False


def _logs(y):
    _QUIET_LOG.debug("a Logger call Dynamo cannot trace: a break inside a function it inlines")
    return y.sin()


class _BreaksInsideACall(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)

    def forward(self, x):
        h = _logs(self.linear(x))
        return self.linear(h).relu()


def test_a_break_inside_an_inlined_call_is_logged_per_frame_but_ends_one_graph_as_explain_says():
    # Hugging Face's GPT-2 (logger.warning_once inside the transformer): the log names the break once for the
    # caller's frame and again for the callee's, which Dynamo then compiles as a frame of its own; explain
    # lists one break, and so does `ended` (the menagerie found 0 matched against 1 before, 3 counted before that)
    model, x = _BreaksInsideACall(), torch.rand(2, 4)
    with contextlib.redirect_stderr(io.StringIO()):
        report = compile_lens.capture(model, x, kernels=False)
        torch.compiler.reset()
        explained = torch._dynamo.explain(model)(x)
    torch.compiler.reset()
    (found,) = report.breaks
    assert found.gb_type == "logging.Logger method not supported for non-export cases"
    assert (found.count, found.ended, found.in_explain) == (2, 1, True)
    assert found.ended == len(explained.break_reasons) == 1
