"""nbhelpers.module_scope: which module made each autograd node, the optimizer's own phase, and no leftovers."""
import dataclasses

import pytest
import torch
from torch import nn

from nbhelpers import autograd_graph, module_scope


def test_nodes_are_tagged_with_the_innermost_module_and_the_loss_is_outside():
    model = nn.Sequential(nn.Linear(3, 4), nn.Tanh())
    with module_scope.record():
        loss = model(torch.randn(2, 3)).sum()
    tanh = loss.grad_fn.next_functions[0][0]
    addmm = tanh.next_functions[0][0]
    assert module_scope.module_of(loss.grad_fn) == module_scope.OUTSIDE
    assert module_scope.module_of(tanh) == "Sequential.1" and module_scope.module_of(addmm) == "Sequential.0"
    assert module_scope.modules_of(addmm) == ("Sequential", "Sequential.0")


def test_current_names_forward_backward_and_the_optimizer_step():
    model, seen = nn.Linear(2, 1), []
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with module_scope.record() as scope:
        model.register_forward_pre_hook(lambda m, args: seen.append(scope.current()))   # after the scope's own
        out = model(torch.randn(4, 2)).sum()
        out.register_hook(lambda g: seen.append(scope.current()))
        out.backward()
        optimizer.register_step_pre_hook(lambda opt, args, kwargs: seen.append(scope.current()))
        optimizer.step()
    assert seen == [("Linear", "forward"), (module_scope.OUTSIDE, "backward"), ("SGD.step", "optimizer")]


def _global_hooks() -> tuple[int, ...]:
    """How many hooks torch's own global registries hold: module forward pre/post, optimizer step pre/post."""
    from torch.nn.modules import module
    from torch.optim import optimizer

    return (len(module._global_forward_pre_hooks), len(module._global_forward_hooks),
            len(optimizer._global_optimizer_pre_hooks), len(optimizer._global_optimizer_post_hooks))


def test_the_scope_removes_its_hooks():
    before = _global_hooks()
    with module_scope.record() as scope:
        assert _global_hooks() == tuple(n + 1 for n in before)      # one in each registry, while it runs
    assert _global_hooks() == before and scope.current() == (module_scope.OUTSIDE, "forward")


class _Kept(torch.nn.Module):
    """Returns a dataclass, and keeps a second result on itself: ops of its own in both (tanh, exp)."""

    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)

    def forward(self, x):
        self.kept = torch.exp(self.linear(x))
        return _Result(torch.tanh(self.linear(x)), {"extra": torch.sin(x)})


@dataclasses.dataclass
class _Result:
    value: torch.Tensor
    more: dict


class _Parent(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.child = _Kept()

    def forward(self, x):
        result = self.child(x)
        return _Result(torch.sigmoid(result.value) + self.child.kept + result.more["extra"], {})


def test_a_node_belongs_to_the_module_that_ran_its_op_whatever_the_module_returns():
    # the oracle is the code: tanh, exp and sin run in the child, sigmoid and add in the parent, sum outside
    model, x = _Parent(), torch.rand(2, 4, requires_grad=True)
    with module_scope.record():
        out = model(x)
    loss = out.value.sum()
    graph = autograd_graph.trace(loss, module=model)
    where = {n.name: n.module for n in graph.nodes if not n.is_leaf}
    assert where["TanhBackward0"] == where["ExpBackward0"] == where["SinBackward0"] == "_Parent.child"
    assert where["AddmmBackward0"] == "_Parent.child.linear"
    assert where["SigmoidBackward0"] == where["AddBackward0"] == "_Parent"
    assert where["SumBackward0"] == module_scope.OUTSIDE


@pytest.mark.parametrize("reentrant", [False, True])
def test_a_checkpointed_blocks_recomputation_keeps_the_models_names(reentrant):
    """Checkpointing reruns the block alone in backward, with no model forward around it: its ops are still
    named from the model (before: `Sequential.0`, a path the model does not have)."""
    from torch.utils.checkpoint import checkpoint

    from nbhelpers import memory

    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.stem, self.block = torch.nn.Linear(6, 6), torch.nn.Sequential(torch.nn.Linear(6, 6), torch.nn.GELU())

        def forward(self, x):
            return checkpoint(self.block, self.stem(x), use_reentrant=reentrant)

    model = Model()
    with memory.track() as tracker:
        model(torch.rand(4, 6)).sum().backward()
    recomputed = {e.module for e in tracker.events if e.phase == "recompute"}
    assert recomputed == {"Model.block.0", "Model.block.1"}
    assert {path for path, _ in model.named_modules()} >= {m.removeprefix("Model.") for m in recomputed}


def test_a_module_returning_a_tuple_gets_its_own_nodes():
    class Pair(nn.Module):
        def forward(self, x):
            return torch.tanh(x), torch.exp(x)

    class Outer(nn.Module):
        def __init__(self):
            super().__init__()
            self.pair = Pair()

        def forward(self, x):
            a, b = self.pair(x)
            return torch.sigmoid(a) * b

    model = Outer()
    with module_scope.record():
        loss = model(torch.rand(2, 3, requires_grad=True)).sum()
    where = {n.name: n.module for n in autograd_graph.trace(loss, module=model).nodes}
    assert where["TanhBackward0"] == where["ExpBackward0"] == "Outer.pair"
    assert where["SigmoidBackward0"] == where["MulBackward0"] == "Outer"
