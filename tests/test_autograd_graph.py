"""nbhelpers.autograd_graph.trace against independent walks of grad_fn, and against backward itself."""
from collections import deque

import pytest
import torch
from torch import nn

from nbhelpers import autograd_graph


class Residual(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1, self.conv2 = nn.Conv2d(4, 4, 3, padding=1), nn.Conv2d(4, 4, 3, padding=1)

    def forward(self, x):
        return torch.relu(x + self.conv2(torch.relu(self.conv1(x))))


class Shared(nn.Module):
    """One Linear applied twice: its weight gets one AccumulateGrad fed by two paths."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(6, 6)

    def forward(self, x):
        return self.fc(torch.tanh(self.fc(x)))


class InPlace(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(6, 6)

    def forward(self, x):
        h = self.fc(x)
        h.relu_()                  # in place: ReluBackward0 replaces AddmmBackward0 as h's grad_fn
        return h * 2


def _models():
    torch.manual_seed(0)
    return {
        "mlp": (nn.Sequential(nn.Flatten(), nn.Linear(784, 128), nn.ReLU(), nn.Linear(128, 10)),
                torch.randn(8, 1, 28, 28)),
        "cnn": (nn.Sequential(nn.Conv2d(1, 4, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                              nn.Linear(4 * 13 * 13, 10)), torch.randn(2, 1, 28, 28)),
        "residual": (Residual(), torch.randn(2, 4, 8, 8)),
        "shared": (Shared(), torch.randn(3, 6)),
        "inplace": (InPlace(), torch.randn(3, 6)),
    }


def _bfs(root):
    """Independent walk: breadth first, identity-keyed, edges as (src, dst, input index)."""
    seen, queue, edges = {root}, deque([root]), set()
    while queue:
        fn = queue.popleft()
        for k, (nxt, _) in enumerate(fn.next_functions):
            if nxt is None:
                continue
            edges.add((id(fn), id(nxt), k))
            if nxt not in seen:
                seen.add(nxt)
                queue.append(nxt)
    return seen, edges


@pytest.fixture(params=list(_models()))
def case(request):
    model, x = _models()[request.param]
    loss = model(x).sum()
    return model, loss


def test_nodes_and_edges_equal_an_independent_walk(case):
    model, loss = case
    graph = autograd_graph.trace(loss, module=model)
    fns = autograd_graph._walk(loss.grad_fn)
    seen, edges = _bfs(loss.grad_fn)
    assert {id(f) for f in fns} == {id(f) for f in seen} and len(graph.nodes) == len(seen)
    assert {(id(fns[e.src]), id(fns[e.dst]), e.input_nr) for e in graph.edges} == edges
    assert [n.name for n in graph.nodes] == [f.name() for f in fns]


def test_order_is_the_order_backward_runs(case):
    model, loss = case
    graph = autograd_graph.trace(loss, module=model)
    fns, ran = autograd_graph._walk(loss.grad_fn), []
    for i, fn in enumerate(fns):
        fn.register_prehook(lambda grads, i=i: ran.append(i))
    loss.backward()
    assert sorted(graph.order) == list(range(len(fns)))
    assert list(graph.order) == ran


def test_every_parameter_has_one_labelled_accumulate_grad(case):
    model, loss = case
    graph = autograd_graph.trace(loss, module=model)
    leaves = [n.label for n in graph.nodes if n.is_leaf]
    assert sorted(leaves) == sorted(name for name, _ in model.named_parameters())


def test_saved_tensor_identity_agrees_with_storage_pointers():
    torch.manual_seed(0)
    fc1, fc2 = nn.Linear(5, 4), nn.Linear(4, 3)
    x = torch.randn(2, 5)
    h = torch.relu(fc1(x))
    loss = fc2(h).sum()
    graph = autograd_graph.trace(loss)
    by_name = {n.name: n for n in graph.nodes}
    relu_out = next(s for s in by_name["ReluBackward0"].saved if s.attr == "_saved_result")
    fc2_in = next(n for n in graph.nodes if n.name == "AddmmBackward0" and
                  any(s.shape == (2, 4) for s in n.saved))
    mat1 = next(s for s in fc2_in.saved if s.attr == "_saved_mat1")
    assert relu_out.storage_ptr == mat1.storage_ptr == h.untyped_storage().data_ptr()
    assert relu_out.attr != mat1.attr                       # the same memory, two saves, never merged
    first = next(n for n in graph.nodes if n.name == "AddmmBackward0" and n is not fc2_in)
    assert [s.storage_ptr for s in first.saved] == [x.untyped_storage().data_ptr()]  # only x: mat2 unneeded


def test_shared_weight_gets_two_incoming_edges():
    model, x = _models()["shared"]
    graph = autograd_graph.trace(model(x).sum(), module=model)
    weight = next(n.id for n in graph.nodes if n.label == "fc.weight")
    assert sum(e.dst == weight for e in graph.edges) == 2


@pytest.mark.parametrize("bad", [3.0, [torch.ones(2)], None])
def test_trace_rejects_non_tensors(bad):
    with pytest.raises(TypeError, match="`t` must be a tensor made by autograd"):
        autograd_graph.trace(bad)


def test_trace_explains_a_tensor_without_grad_fn():
    with pytest.raises(ValueError, match="no grad_fn.*output of a differentiable op"):
        autograd_graph.trace(torch.ones(2, requires_grad=True))
    with torch.no_grad():
        y = torch.ones(2, requires_grad=True) * 2
    with pytest.raises(ValueError, match="no_grad"):
        autograd_graph.trace(y)


def test_trace_explains_a_graph_freed_by_backward():
    w = torch.randn(3, requires_grad=True)
    loss = w.sigmoid().sum()
    loss.backward()
    with pytest.raises(ValueError, match="freed by backward.*retain_graph=True"):
        autograd_graph.trace(loss)
