"""nbhelpers.compilation: counts agree with Dynamo, and no helper leaves Dynamo, inductor or logging changed."""
import logging

import pytest
import torch
from torch._dynamo.utils import counters, guard_failures

from nbhelpers import compilation


def _noisy(x):
    y = x.relu()
    print("side effect")
    return y * 2


def _double(x):
    return x * 2


def _state():
    # torch's own stderr handlers (the ones the helpers swap out for a while), per logger
    handlers = {name: [h for h in lg.handlers if type(h).__module__.startswith("torch")]
                for name, lg in logging.root.manager.loggerDict.items()
                if name.startswith("torch") and isinstance(lg, logging.Logger) and lg.handlers}
    return (torch._dynamo.config.get_config_copy(), torch._inductor.config.get_config_copy(), handlers)


def _fresh_compile_graphs():
    """Graphs a default compile makes for sizes 4, 8, 16: 2 when automatic dynamic works as default."""
    before = counters["stats"]["unique_graphs"]
    compiled = torch.compile(_double, backend="eager")
    for n in (4, 8, 16):
        compiled(torch.ones(n))
    torch.compiler.reset()
    return counters["stats"]["unique_graphs"] - before


def test_helpers_leave_no_global_state_behind(capsys):
    before = _state()
    compilation.compare_backends(_noisy, (torch.ones(3),), [("eager", None)], min_run_time=0.01)
    compilation.find_breaks(_noisy, torch.ones(3))
    with compilation.watch_compiles():
        torch.compile(_double, backend="eager", dynamic=False)(torch.ones(2))
    assert _state() == before and not guard_failures
    assert _fresh_compile_graphs() == 2


def test_watch_compiles_restores_logging_and_resets_when_the_block_raises():
    before = _state()
    with pytest.raises(RuntimeError, match="inside"):
        with compilation.watch_compiles():
            torch.compile(_double, backend="eager")(torch.ones(2))
            raise RuntimeError("inside")
    assert _state() == before and not guard_failures


def test_compare_backends_counts_graphs_and_breaks():
    rows = compilation.compare_backends(_noisy, (torch.ones(3),), [("eager", None)], min_run_time=0.01)
    assert [r.label for r in rows] == ["none (eager)", "eager"]
    assert (rows[0].graphs, rows[0].graph_breaks, rows[0].speedup) == (0, 0, 1.0)
    assert rows[1].graphs == 2 and rows[1].graph_breaks == 1 and rows[1].steady_s > 0
    table = compilation.render_results(rows)
    assert table.splitlines()[0].split() == ["backend", "first", "call", "steady", "vs", "eager", "graphs", "breaks"]


def test_find_breaks_names_reason_function_and_line(capsys):
    found = compilation.find_breaks(_noisy, torch.ones(3))
    assert found.graphs == 2 and len(found.breaks) == 1
    b = found.breaks[0]
    assert (b.reason, b.function, b.line) == ("Failed to trace builtin operator", "_noisy", 'print("side effect")')
    assert b.lineno == _noisy.__code__.co_firstlineno + 2


def test_watch_compiles_lists_recompile_reasons_and_the_recompile_limit():
    with compilation.watch_compiles() as log:
        compiled = torch.compile(_double, backend="eager", dynamic=False, recompile_limit=1)
        for n in (2, 3, 4):
            assert torch.equal(compiled(torch.ones(n)), torch.full((n,), 2.0))
    assert log.graphs == 1 and log.recompiles[0] == "0/0: tensor 'x' size mismatch at index 0. expected 2, actual 3"
    assert log.warnings == ["torch._dynamo hit config.recompile_limit (1)"]


def test_preflight_on_cpu_and_unknown_devices():
    check = compilation.preflight("cpu")
    assert [c.name for c in check.checks] == ["TorchDynamo", "C++ compiler (inductor)"]
    assert check.can_compile == all(c.available for c in check.checks)
    with pytest.raises(ValueError, match="knows cpu and cuda, got 'mps'"):
        compilation.preflight("mps")


def _checks_inside_torch(y):
    y = y * 2
    # Dynamo breaks inside torch/testing, not on the next line
    torch.testing.assert_close(y, y)
    return y + 1


def test_find_breaks_and_the_lens_place_a_break_inside_torch_on_the_same_user_line():
    from nbhelpers import compile_lens

    x = torch.rand(4)
    (explained,) = compilation.find_breaks(_checks_inside_torch, x).breaks
    lens = [b for b in compile_lens.capture(_checks_inside_torch, x, kernels=False).breaks if b.in_explain]
    assert explained.line == lens[0].line == "torch.testing.assert_close(y, y)"
    assert explained.function == "_checks_inside_torch"
    assert explained.where.startswith("torch/testing/") and lens[0].where.startswith("torch/testing/")
