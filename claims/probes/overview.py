"""Article §1: the introduction's claims about 2.1, modules, autograd and modes."""
from __future__ import annotations


import torch
from torch import nn

from claims.probes import NotApplicable, parts, row, verdict

RELEASE_NOTES = "https://github.com/pytorch/pytorch/releases/tag/v2.0.0"


@row("1", "PyTorch 2.1 was the first release with a stable `torch.compile`",
     where="—", source=RELEASE_NOTES, fixed="false")
def compile_stable_in_2_1():
    raise NotApplicable("history: torch.compile shipped in 2.0, as beta; 2.1's notes do not call it stable")


@row("1", "Code that 'just ran' before 2.1 suddenly fails under compilation", where="05 4. Graph breaks",
     source="torch/__init__.py:3048 fullgraph: builtins.bool = False")
def old_code_fails():
    def eager_style(x):                 # a print, a .item(), a Python branch on it: three things Dynamo cannot trace
        print("", end="")
        return x * 2 if x.sum().item() > 0 else x - 1
    x = torch.ones(3)
    torch._dynamo.reset()
    same = torch.equal(torch.compile(eager_style, backend="eager")(x), eager_style(x))
    torch._dynamo.reset()
    return verdict(not same)


@row("1", "`nn.Linear(784, 128)` binds a device, allocates gradient buffers and registers forward/backward hooks",
     where="01 7. What `nn.Linear(784, 128)` allocates", source="torch/nn/modules/linear.py:108 self.weight = Parameter(")
def linear_allocates_grads_and_hooks():
    layer = nn.Linear(784, 128)
    hooks = [d for name, d in vars(layer).items() if name.endswith("hooks") and isinstance(d, dict) and d]
    # a binding would be device state the module keeps; its tensors merely sit on the default device, as any tensor
    bound = any(isinstance(v, (torch.device, str)) and str(v) in ("cpu", "cuda") for v in vars(layer).values())
    return parts(bound, layer.weight.grad is not None, bool(hooks))


@row("1", "`loss.backward()` is, in essence, a traversal of the graph's AccumulateGrad nodes, accumulating gradients",
     where="02 2. What backward runs", source="torch/autograd/graph.py:1072 Variable._execution_engine.run_backward(")
def backward_walks_accumulate_grad():
    model = nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 2))
    loss = model(torch.randn(5, 4)).sum()
    ran = []
    seen, stack = set(), [loss.grad_fn]
    while stack:
        node = stack.pop()
        if node in seen:
            continue
        seen.add(node)
        node.register_prehook(lambda grads, node=node: ran.append(node.name()))
        stack.extend(f for f, _ in node.next_functions if f is not None)
    loss.backward()
    accumulating = sum(name.endswith("AccumulateGrad") for name in ran)
    # every AccumulateGrad runs and accumulates (right), among every other node (what "in essence" leaves out)
    return "partly true" if accumulating == 4 and len(ran) > accumulating else verdict(len(ran) == accumulating)


@row("1", "PyTorch had reached 2.3 when the article was written", where="—",
     source="https://github.com/pytorch/pytorch/releases/tag/v2.3.0", fixed="not checkable")
def release_at_writing():
    raise NotApplicable("history: when the article was written is not in it")


@row("1", "`torch.compile` forces developers onto a static-graph premise (shapes fixed at compile time)",
     where="05 5. Dynamic shapes", source="torch/__init__.py:3049 dynamic: builtins.bool | None = None,")
def static_graph_premise():
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    double = torch.compile(lambda t: t * 2, backend="eager")
    for n in (8, 16, 32, 64):
        double(torch.ones(n))
    graphs = counters["stats"]["unique_graphs"]
    torch._dynamo.reset()
    return verdict(graphs == 4)          # one graph per shape would be a static premise; automatic dynamic makes 2


@row("1", "\"Trying to backward through the graph a second time\" is a real error", where="12 1. \"Trying to backward",
     source="torch/autograd/__init__.py:390 retain_graph = create_graph")
def backward_twice_error():
    w = torch.ones(3, requires_grad=True)
    loss = (w * w).sum()
    loss.backward()
    try:
        loss.backward()
    except RuntimeError as e:
        return verdict("Trying to backward through the graph a second time" in str(e))
    return "false"


@row("1", "`model.train()` and `torch.set_grad_enabled(True)` are different switches",
     where="03 4. Two independent switches", source="torch/nn/modules/module.py:2894 def train(self")
def train_and_grad_mode_differ():
    layer = nn.Dropout(0.5)
    with torch.no_grad():
        layer.train()
        still_training = layer.training and not torch.is_grad_enabled()
    layer.eval()
    with torch.enable_grad():
        grad_on_in_eval = torch.is_grad_enabled() and not layer.training
    return verdict(still_training and grad_on_in_eval)
