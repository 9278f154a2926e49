"""nbhelpers.memory: exact on constructed cases, saved bytes equal the graph's own `_saved_*` tensors,
and nothing it installs outlives the block."""
import gc
import weakref

import pytest
import torch
import torch.nn.functional as F

from nbhelpers import memory, models, module_scope



def test_known_allocations_and_frees_give_known_live_bytes_and_peak():
    with memory.track() as t:
        a = torch.empty(1000)              # 4,000
        b = torch.empty(250, dtype=torch.float64)   # 2,000 -> 6,000
        c = a[:10]                         # a view: no new storage
        del a, c                           # frees 4,000 -> 2,000
        d = torch.cat([b, b])              # 4,000 -> 6,000 (the freed 4,000 shows first here)
        del d                              # -> 2,000
    # events come after ops; frees between ops show in the next event and in live_bytes
    assert [e.live_bytes for e in t.events] == [4000, 6000, 6000, 6000]
    assert t.peak_bytes == 6000 and t.live_bytes == 2000
    assert [(a.nbytes, a.freed_at is None) for a in t.allocations] == [(4000, False), (2000, True), (4000, False)]


def test_tensors_made_before_the_block_are_never_counted():
    x = torch.randn(100, 100)
    with memory.track() as t:
        y = x.t()                          # a view of an outside tensor
        x.add_(1)                          # in place on an outside tensor
        z = x + 1                          # 40,000 new bytes
    assert t.live_bytes == 40_000 and len(t.allocations) == 1
    del y, z


def test_attribution_names_modules_in_forward_and_backward():
    model = models.mlp()
    with memory.track() as t:
        F.cross_entropy(model(torch.rand(4, 784)), torch.tensor([1, 2, 3, 4])).backward()
    where = {(e.phase, e.module) for e in t.events}
    assert ("forward", "NeuralNetwork.core.fc1") in where and ("backward", "NeuralNetwork.core.fc1") in where
    assert ("backward", "NeuralNetwork.core.act") in where


def test_tracking_does_not_keep_graphs_alive():
    model = models.mlp()
    freed = []

    def watch(module, args, out):
        weakref.finalize(out.untyped_storage(), freed.append, 1)

    handle = model.core.act.register_forward_hook(watch)
    try:
        with memory.track() as t:
            for _ in range(3):
                model(torch.rand(8, 784))
            assert len(freed) == 3 and t.live_bytes == 0     # freed at once, without the garbage collector
    finally:
        handle.remove()


def test_hooks_are_removed_and_the_mode_popped_even_on_error():
    before = (dict(torch.nn.modules.module._global_forward_pre_hooks),
              dict(torch.nn.modules.module._global_forward_hooks))
    with pytest.raises(ValueError):
        with memory.track():
            models.mlp()(torch.zeros(2, 3))
    after = (dict(torch.nn.modules.module._global_forward_pre_hooks),
             dict(torch.nn.modules.module._global_forward_hooks))
    assert after == before and not torch._C._len_torch_dispatch_stack()


def _direct_saved_bytes(output: torch.Tensor) -> int:
    seen, stack, total = set(), [output.grad_fn], 0
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        for name in dir(node):
            if name.startswith("_saved_"):
                value = getattr(node, name)
                for t in value if isinstance(value, (tuple, list)) else (value,):
                    if isinstance(t, torch.Tensor):
                        total += t.numel() * t.element_size()
        stack.extend(f for f, _ in node.next_functions)
    return total


@pytest.mark.parametrize("build", [models.mlp, models.cnn])
def test_saved_bytes_equal_the_graphs_saved_tensors(build):
    saved, out = memory.saved_bytes_by_module(build(), torch.rand(16, 784))
    assert sum(s.nbytes for s in saved.values()) == _direct_saved_bytes(out)
    assert all(name.startswith("NeuralNetwork.core") or name == "(outside modules)" for name in saved)


def test_timeline_splits_categories_and_plots():
    model = models.mlp()
    with memory.track() as t:
        F.cross_entropy(model(torch.rand(4, 784)), torch.tensor([1, 2, 3, 4])).backward()
    data = memory.timeline(t, {"gradients": [p.grad for p in model.parameters()]})
    assert data.bytes_by_category["gradients"][-1] == sum(p.numel() * 4 for p in model.parameters())
    assert len(data.labels) == len(t.events)
    ax = memory.plot_timeline(data)
    assert [t.get_text() for t in ax.get_legend().get_texts()][:len(data.bytes_by_category)] == list(data.bytes_by_category)
    assert ax.get_title() == f"peak {data.peak_bytes:,} B" and ax.get_ylabel() == "live bytes"


def test_cuda_history_needs_cuda():
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    with pytest.raises(ValueError, match="`device` must be a CUDA device.*use memory.track"):
        with memory.cuda_history("cpu"):
            pass
    with pytest.raises(RuntimeError, match="this machine has none.*use memory.track"):
        with memory.cuda_history("cuda"):
            pass


def test_cuda_history_replays_a_snapshot_trace():
    tracker = memory.Tracker()
    memory._replay([{"action": "alloc", "addr": 1, "size": 512}, {"action": "alloc", "addr": 2, "size": 1024},
                    {"action": "free_requested", "addr": 1, "size": 512},
                    {"action": "free_completed", "addr": 1, "size": 512}], tracker)
    assert [e.live_bytes for e in tracker.events] == [512, 1536, 1024] and tracker.peak_bytes == 1536


@pytest.mark.gpu
def test_tracker_peak_matches_the_caching_allocator_on_cuda():
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    model = models.mlp(device="cuda")
    x, y = torch.rand(512, 784, device="cuda"), torch.randint(0, 10, (512,), device="cuda")
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    with memory.track("cuda") as t:
        F.cross_entropy(model(x), y).backward()
    peak = torch.cuda.max_memory_allocated() - base
    assert abs(t.peak_bytes - peak) <= 0.05 * peak
    gc.collect()


def test_the_optimizer_step_is_a_phase_of_its_own():
    torch.manual_seed(0)
    model = models.mlp()
    optimizer = torch.optim.Adam(model.parameters())
    with memory.track() as t:
        F.cross_entropy(model(torch.rand(4, 784)), torch.tensor([1, 2, 3, 4])).backward()
        optimizer.step()                                         # Adam's state is made here, on step one
    assert {e.module for e in t.events if e.phase == "optimizer"} == {"Adam.step"}
    made = sum(a.nbytes for a in t.allocations if a.phase == "optimizer" and a.freed_at is None)
    state = sum(s.untyped_storage().nbytes() for v in optimizer.state.values() for s in v.values())
    assert made == state
    assert "optimizer step" in memory.timeline(t).bytes_by_category


def test_a_tensor_made_from_python_data_in_the_block_is_counted():
    with memory.track() as t:
        kept = torch.tensor([1.0, 2.0, 3.0])          # its storage is filled before lift_fresh runs
    assert t.live_bytes == 12 and not t.earlier
    del kept


def test_module_scope_probes_are_not_recorded_as_ops_of_the_program():
    model, x = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Tanh()), torch.rand(2, 4)
    with memory.track() as t:
        model(x)
    assert [e.op for e in t.events] == ["aten.t.default", "aten.addmm.default", "aten.tanh.default",
                                        "aten.detach.default"]     # no probe's empty and view


def test_saved_bytes_name_what_the_hooks_cannot_line_up_with_the_graph():
    from torch.utils.checkpoint import checkpoint

    from nbhelpers import autograd_graph

    x = torch.rand(4, 8, requires_grad=True)
    saved, out = memory.saved_bytes_by_module(lambda t: t * 2, x)            # 2 is saved as an int64 0-dim tensor
    assert saved[module_scope.OUTSIDE] == memory.SavedBytes(0, 0, wrapped_numbers=8)
    block = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.GELU())
    saved, out = memory.saved_bytes_by_module(lambda t: checkpoint(block, t, use_reentrant=False), x)
    assert saved[module_scope.OUTSIDE].checkpoint_inputs == x.numel() * 4   # the kept input, in no node
    assert sum(s.nbytes for n in autograd_graph.trace(out.sum()).nodes for s in n.saved) == 0
    base = x * 1
    torch.nn.functional.dropout(base[:, :4], 0.5, training=True, inplace=True)   # an in-place op on a view
    copy_slices = autograd_graph.trace(base.sum()).nodes[1]
    assert copy_slices.name == "torch::autograd::CopySlices"
    assert [s.attr for s in copy_slices.saved] == ["_wrapped_node._saved_other"]   # the dropout mask, 4 x 4
    assert copy_slices.saved[0].nbytes == 16 * 4


def test_a_wrapped_number_reached_from_two_outputs_counts_once():
    x = torch.rand(4, requires_grad=True)
    saved, _ = memory.saved_bytes_by_module(lambda t: (lambda y: (y + 1, y - 1))(t * 2), x)   # both reach t * 2
    assert saved[module_scope.OUTSIDE].wrapped_numbers == 8


def _node_names_and_bytes(out):
    from nbhelpers import autograd_graph

    graph = autograd_graph.trace(out.sum())
    return {n.name for n in graph.nodes}, sum(s.nbytes for n in graph.nodes for s in n.saved)


@pytest.mark.parametrize("kind", ["reentrant checkpoint", "compiled"])
def test_saved_bytes_agree_with_the_trace_on_a_python_function_node_and_a_compiled_graph(kind):
    """Reentrant checkpointing is an autograd.Function (CheckpointFunctionBackward keeps its inputs by
    save_for_backward, which runs the saved-tensor hooks); a compiled module is one CompiledFunctionBackward
    whose saves AOTAutograd makes with save_for_backward too: both seen by the trace and the hooks, to the byte."""
    from torch.utils.checkpoint import checkpoint

    torch.manual_seed(0)
    block = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.GELU())
    x = torch.rand(4, 8, requires_grad=True)
    if kind == "compiled":
        torch.compiler.reset()
        fn, node = torch.compile(block, backend="aot_eager"), "CompiledFunctionBackward"
    else:
        fn, node = (lambda t: checkpoint(block, t, use_reentrant=True)), "CheckpointFunctionBackward"
    saved, out = memory.saved_bytes_by_module(fn, x)
    names, traced = _node_names_and_bytes(out)
    assert node in names
    assert traced > 0
    assert sum(s.nbytes + s.wrapped_numbers - s.checkpoint_inputs for s in saved.values()) == traced
    assert sum(s.checkpoint_inputs for s in saved.values()) == 0      # only the non-reentrant kind keeps them aside
    torch.compiler.reset()
