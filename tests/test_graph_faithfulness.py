"""The drawn graph is the one backward runs: replaying autograd_graph.trace's nodes, in its order, on the
gradients arriving along its edges reproduces every leaf's .grad, and the order is the one real node
pre-hooks record, on ten models that exercise different parts of the engine."""
import pytest
import torch
from torch import nn

from nbhelpers import autograd_graph, models, module_scope
from tests.graph_cases import CASES, loss_of


def _replay(loss, graph):
    """Run each traced node in graph.order on the gradients that arrive along graph.edges."""
    fns = autograd_graph._walk(loss.grad_fn)                   # trace's own node order: ids are indices
    arriving = {i: [None] * len(fn._input_metadata) for i, fn in enumerate(fns)}
    arriving[graph.root][0] = torch.ones_like(loss)
    leaf_grads = {}
    for i in graph.order:
        fn, node = fns[i], graph.nodes[i]
        if node.is_leaf:
            leaf_grads[fn.variable] = arriving[i][0]
            continue
        outputs = fn(*arriving[i]) if callable(fn) else fn.apply(*arriving[i])   # a Python Function's node
        outputs = outputs if isinstance(outputs, tuple) else (outputs,)
        for edge in (e for e in graph.edges if e.src == i):
            grad, slots = outputs[edge.input_nr], arriving[edge.dst]
            if grad is not None:
                k = edge.dst_input
                meta = fns[edge.dst]._input_metadata[k]         # what the engine's validate_outputs does:
                grad = grad.sum_to_size(meta.shape).to(meta.dtype)   # reduce a broadcast, match the dtype
                slots[k] = grad if slots[k] is None else slots[k] + grad
    return leaf_grads


def _real_order(loss, backwards=1):
    fns = autograd_graph._walk(loss.grad_fn)
    ran = []
    handles = [fn.register_prehook(lambda grads, i=i: ran.append(i)) for i, fn in enumerate(fns)]
    try:
        for _ in range(backwards):
            loss.backward(retain_graph=True)
    finally:
        for h in handles:
            h.remove()
    return ran


@pytest.mark.parametrize("name", CASES)
def test_replaying_the_traced_graph_reproduces_backward(name):
    torch.manual_seed(0)
    model, x = CASES[name]()
    seen_by_hook = []
    with module_scope.record():
        loss = loss_of(model, x)
    if name == "tensor hooks":
        hidden = loss.grad_fn.next_functions[0][0]             # observe the gradient into the sum's input
        hidden.register_prehook(lambda grads: seen_by_hook.append(grads[0].clone()))
    graph = autograd_graph.trace(loss, module=model)
    backwards = 2 if name.startswith("retain_graph") else 1
    replayed = [_replay(loss, graph) for _ in range(backwards)]
    real = _real_order(loss, backwards)
    assert real == list(graph.order) * backwards                # the order pre-hooks record
    leaves = [p for p in model.parameters() if p.requires_grad]
    assert leaves and all(p in replayed[0] for p in leaves)      # every parameter is a traced leaf
    for p in leaves:
        expected = sum(r[p] for r in replayed)                   # two backwards accumulate
        torch.testing.assert_close(p.grad, expected)
    if name == "tensor hooks":
        torch.testing.assert_close(seen_by_hook[0], torch.ones_like(seen_by_hook[0]))


def test_every_node_carries_the_module_whose_forward_made_it():
    torch.manual_seed(0)
    model = models.mlp()
    with module_scope.record():
        loss = nn.functional.cross_entropy(model(torch.rand(4, 28, 28)), torch.tensor([0, 1, 2, 3]))
    graph = autograd_graph.trace(loss, module=model)
    by_label = {n.label: n.module for n in graph.nodes}
    assert by_label["core.fc1.weight"] == "NeuralNetwork.core.fc1"
    assert by_label["NllLossBackward0"] == "(outside modules)"   # the loss ran outside the model
    assert {n.module for n in graph.nodes if n.name == "AddmmBackward0"} == {"NeuralNetwork.core.fc1",
                                                                               "NeuralNetwork.core.fc2"}
