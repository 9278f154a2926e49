"""Instruments observe without changing: after each one, a compiled module still runs compiled (no
`torch.compiler.reset()`), no global hook, dispatch mode or saved-tensor hook is left behind, and an instrument
that cannot see a compiled program (a dispatch mode) says so with a CompiledRanEagerly warning."""
import warnings

import pytest
import torch
from torch._dynamo.utils import counters

from nbhelpers import (autograd_graph, compilation, compile_lens, eager_only, forward_graph, graph_view, memory,
                       memory_agreement, module_scope, profiling, storage)
from nbhelpers.diagnosis import diagnose


def _model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))


@pytest.fixture
def compiled():
    """A module compiled and run once: its output's grad_fn is AOTAutograd's CompiledFunctionBackward."""
    torch.compiler.reset()
    counters.clear()
    model = _model()
    cm = torch.compile(model, backend="aot_eager")
    x = torch.randn(4, 8)
    assert type(cm(x).grad_fn).__name__ == "CompiledFunctionBackward"
    yield model, cm, x
    torch.compiler.reset()


def _global_state() -> dict:
    from torch.nn.modules import module
    from torch.optim import optimizer

    return {"forward hooks": len(module._global_forward_hooks),
            "forward pre hooks": len(module._global_forward_pre_hooks),
            "backward hooks": len(module._global_backward_hooks),
            "optimizer step hooks": len(optimizer._global_optimizer_pre_hooks) + len(optimizer._global_optimizer_post_hooks),
            "dispatch modes": torch._C._len_torch_dispatch_stack(),
            "saved tensor hooks": torch._C._autograd._top_saved_tensors_default_hooks(False) is not None,
            "dynamo skip reasons": torch._dynamo.eval_frame.dynamo_tls.skip_reasons is not None}


def _use_track(model, cm, x):
    with memory.track():
        cm(x).sum().backward()


def _use_record(model, cm, x):
    with module_scope.record():
        autograd_graph.trace(cm(x).sum(), module=model)


def _use_trace(model, cm, x):
    autograd_graph.trace(cm(x).sum(), module=model)


def _use_view(model, cm, x):
    with module_scope.record():
        graph = autograd_graph.trace(cm(x).sum(), module=model)
    graph_view.show(graph_view.from_autograd(graph))


def _use_forward_graph(model, cm, x):
    forward_graph.trace(cm, x)


def _use_saved_bytes(model, cm, x):
    memory.saved_bytes_by_module(cm, x)


def _use_work(model, cm, x):
    profiling.work(lambda: cm(x))


def _use_memtracker(model, cm, x):
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    memory_agreement.against_memtracker(lambda: cm(x).sum().backward() or optimizer.step(), model, optimizer)


def _use_lifetimes(model, cm, x):
    with storage.record_lifetimes():
        cm(x)


INSTRUMENTS = {"memory.track": _use_track, "module_scope.record": _use_record, "autograd_graph.trace": _use_trace,
               "graph_view.show": _use_view, "forward_graph.trace": _use_forward_graph,
               "memory.saved_bytes_by_module": _use_saved_bytes, "profiling.work": _use_work,
               "memory_agreement.against_memtracker": _use_memtracker, "storage.record_lifetimes": _use_lifetimes}
# each dispatch-mode instrument's warning names where to look instead
DISPATCH_MODES = {"memory.track": "torch.profiler", "profiling.work": "torch.profiler",
                  "memory_agreement.against_memtracker": "torch.profiler", "forward_graph.trace": "compile_lens.capture"}


@pytest.mark.parametrize("name", INSTRUMENTS)
def test_a_compiled_module_runs_compiled_after_the_instrument(compiled, name):
    model, cm, x = compiled
    before = _global_state()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        INSTRUMENTS[name](model, cm, x)
    assert _global_state() == before
    graphs = counters["stats"]["unique_graphs"]
    out = cm(x)
    assert type(out.grad_fn).__name__ == "CompiledFunctionBackward"     # compiled, not eager
    assert counters["stats"]["unique_graphs"] == graphs                  # and with no recompile
    said = [w for w in caught if issubclass(w.category, eager_only.CompiledRanEagerly)]
    assert bool(said) == (name in DISPATCH_MODES), [str(w.message) for w in said]
    for w in said:
        assert "ran op by op" in str(w.message) and DISPATCH_MODES[name] in str(w.message)
        assert w.filename == __file__                                   # points at the learner's line


LENSES = {"compile_lens.capture": lambda model, x: compile_lens.capture(model, x, kernels=False),
          "compilation.find_breaks": lambda model, x: compilation.find_breaks(model, x),
          "diagnose.run": lambda model, x: diagnose.run(model, x)}


@pytest.mark.parametrize("name", LENSES)
def test_the_compile_lenses_start_from_a_clean_cache_and_leave_nothing_else(compiled, name):
    """capture and find_breaks reset Dynamo before and after, as torch._dynamo.explain does itself (`reset()` at
    the top of its `inner`, torch/_dynamo/eval_frame.py): without it a function compiled before would not be
    compiled again, so there would be nothing to see. The learner's compiled module compiles once more on its
    next call, and runs compiled; no hook, mode or config is left."""
    model, cm, x = compiled
    before = _global_state()
    LENSES[name](model, x)
    assert _global_state() == before
    graphs = counters["stats"]["unique_graphs"]
    out = cm(x)
    assert type(out.grad_fn).__name__ == "CompiledFunctionBackward"
    assert counters["stats"]["unique_graphs"] == graphs + 1              # compiled once more, not eager
    assert not torch._functorch.config.force_non_lazy_backward_lowering  # capture's one patch, undone


def test_module_scope_sees_a_compiled_module_without_breaking_its_graph(compiled):
    model, cm, x = compiled
    breaks = sum(counters["graph_break"].values())
    with module_scope.record():
        out = cm(x)
    assert sum(counters["graph_break"].values()) == breaks
    assert type(out.grad_fn).__name__ == "CompiledFunctionBackward"
    assert module_scope.module_of(out.grad_fn) == "Sequential"          # the module it wraps, not OptimizedModule


def test_no_warning_when_nothing_compiled_ran():
    model, x = _model(), torch.randn(4, 8)
    with warnings.catch_warnings():
        warnings.simplefilter("error", eager_only.CompiledRanEagerly)
        with memory.track():
            model(x).sum().backward()
        profiling.work(lambda: model(x))


def test_a_compiled_function_is_named_in_the_warning():
    def scaled_sine(a):
        return torch.sin(a) * 2

    torch.compiler.reset()
    compiled = torch.compile(scaled_sine, backend="aot_eager")
    named = r"scaled_sine \(test_observe_without_changing.py:\d+\) ran op by op"
    with pytest.warns(eager_only.CompiledRanEagerly, match=named):
        with memory.track():
            compiled(torch.randn(4))
    torch.compiler.reset()
