"""nbhelpers.autograd_graph.trace against an independent walk of grad_fn (the order backward runs is checked
against backward itself in test_graph_faithfulness, on the same models)."""
from collections import deque

import pytest
import torch
from torch import nn

from nbhelpers import autograd_graph
from tests.graph_cases import CASES, loss_of


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


@pytest.fixture(params=list(CASES))
def case(request):
    torch.manual_seed(0)
    model, x = CASES[request.param]()
    return model, loss_of(model, x)


def test_nodes_and_edges_equal_an_independent_walk(case):
    model, loss = case
    graph = autograd_graph.trace(loss, module=model)
    fns = autograd_graph._walk(loss.grad_fn)
    seen, edges = _bfs(loss.grad_fn)
    assert {id(f) for f in fns} == {id(f) for f in seen} and len(graph.nodes) == len(seen)
    assert {(id(fns[e.src]), id(fns[e.dst]), e.input_nr) for e in graph.edges} == edges
    assert [n.name for n in graph.nodes] == [f.name() for f in fns]


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
    model, x = CASES["shared weights"]()
    graph = autograd_graph.trace(loss_of(model, x), module=model)
    weight = next(n.id for n in graph.nodes if n.label == "layer.weight")
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
