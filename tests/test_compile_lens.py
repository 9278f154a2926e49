"""nbhelpers.compile_lens: Dynamo's graphs, deduplicated breaks with their registry codes, kernels linked to
FX nodes and lines, checked against torch._dynamo.explain; bad input."""
import contextlib
import io

import pytest
import torch
import torch.nn.functional as F

from nbhelpers import compile_lens, models


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


@pytest.mark.parametrize("fn, known", [
    (noisy, [("GB0059", 'print("hi")', 1), ("GB0124", "scale = y.mean().item()", 1)]),
    (branchy, [("GB0170", "if y.sum() > 0:", 1)]),                  # Data-dependent branching
    (twice, [("GB0059", 'print("tick")', 2)]),                      # one line breaking twice is counted once
], ids=lambda f: getattr(f, "__name__", ""))
def test_breaks_match_explain_deduplicated_and_carry_registry_codes(fn, known):
    report = _quiet(fn, torch.rand(8), kernels=False)
    assert [(b.code, b.line, b.count) for b in report.breaks] == known
    explained = _explained(fn, torch.rand(8))
    expected = list(dict.fromkeys(((b.user_stack[-1].line or "").strip()) for b in explained.break_reasons))
    assert [b.line for b in report.breaks] == expected
    assert sum(b.count for b in report.breaks) == len(explained.break_reasons)
    assert all(b.code.startswith("GB") and b.explanation for b in report.breaks)    # in the installed registry
    assert [len(g.nodes) for g in report.graphs] == [len(g.graph.nodes) for g in explained.graphs]


def test_the_training_step_breaks_at_backward():
    torch.manual_seed(0)
    model = models.mlp()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)

    def step(x, y):
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        return loss.detach()

    report = _quiet(step, torch.rand(4, 28, 28), torch.randint(0, 10, (4,)), kernels=False)
    assert (report.breaks[0].code, report.breaks[0].line) == ("GB0123", "loss.backward()")


def test_kernels_map_to_fx_nodes_and_lines():
    report = compile_lens.capture(gelu_like, torch.rand(64))
    (kernel,) = report.kernels
    fx_names = {n.name for n in report.graphs[0].nodes}
    assert kernel.fx_nodes and set(kernel.fx_nodes) <= fx_names
    assert set(kernel.lines) == {"y = x + 0.044715 * x ** 3", "return 0.5 * x * (1 + torch.tanh(0.79788456 * y))"}
    assert "#include" in kernel.source or "extern" in kernel.source         # the generated C++


def test_the_view_links_lines_to_fx_nodes_and_kernels():
    from nbhelpers import graph_view

    data = compile_lens.to_graph_data(compile_lens.capture(gelu_like, torch.rand(64)))
    labels = [n.label for n in data.nodes]
    line = labels.index("y = x + 0.044715 * x ** 3")
    kernel = next(i for i, label in enumerate(labels) if label.startswith("cpp_fused_"))
    from_line = {d for s, d in data.edges if s == line}
    assert from_line and all(data.nodes[d].group == ("graph 0",) for d in from_line)
    assert any((d, kernel) in data.edges for d in from_line)                 # line -> FX node -> kernel
    assert graph_view.views(data)                                            # it lays out


def test_a_loop_with_a_break_is_skipped_whole_and_still_named():
    assert _explained(repeated, torch.rand(2)).graph_count == 0             # explain shows nothing
    report = _quiet(repeated, torch.rand(2), kernels=False)
    assert report.graphs == () and [(b.code, b.line) for b in report.breaks] == [("GB0059", 'print("tick")')]


def test_a_function_dynamo_cannot_trace_at_all_names_its_break():
    def only_print(x):
        print("nothing to compile")
        return x

    report = _quiet(only_print, torch.rand(2), kernels=False)
    assert [(b.code, b.line) for b in report.breaks] == [("GB0059", 'print("nothing to compile")')]


def test_bad_input():
    with pytest.raises(TypeError, match="takes a function or module, got int"):
        compile_lens.capture(3)

    def fails(x):
        raise ValueError("the model's own error")

    with pytest.raises(ValueError, match="the model's own error"):          # re-raised unchanged
        compile_lens.capture(fails, torch.rand(2), kernels=False)
