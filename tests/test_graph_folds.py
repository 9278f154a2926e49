"""nbhelpers.graph_folds: repeated blocks fold only where their recorded graphs match, any copy opens, and the
view keeps every node in exactly one box. (graph_view.js computes the same folds: tests/test_graph_layout_js.py.)"""
import functools

import pytest
import torch
from torch import nn

from nbhelpers import (autograd_graph, forward_graph, forward_view, graph_boxes, graph_folds, graph_layout, graph_view,
                       module_scope, node_times)
from tests.graph_cases import OutsideResidual


def _backward(model, run) -> graph_view.GraphData:
    with module_scope.record():
        loss = run(model)
    return graph_view.from_autograd(autograd_graph.trace(loss, module=model))


@functools.cache
def _resnet18() -> graph_view.GraphData:
    torchvision = pytest.importorskip("torchvision")
    torch.manual_seed(0)
    return _backward(torchvision.models.resnet18(), lambda m: m(torch.rand(2, 3, 32, 32)).sum())


def _labels(data) -> list[str]:
    return [f.label for f in graph_folds.folds(data)]


def test_resnet18_folds_layer1_alone_because_each_later_stage_starts_with_a_block_that_downsamples():
    data = _resnet18()
    assert _labels(data) == ["layer1.0-1 · BasicBlock × 2"]
    (fold,) = graph_folds.folds(data)
    assert fold.parent == "ResNet.layer1" and fold.nodes == 13
    copies = {p for f in graph_folds.folds(data) for p in f.copies}
    assert not copies & {"ResNet.layer2.0", "ResNet.layer2.1"}      # one class, different graphs: no fold


def test_same_class_siblings_with_different_shapes_do_not_fold_and_equal_ones_do():
    torch.manual_seed(0)
    wide = _backward(nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 8)), lambda m: m(torch.randn(2, 4)).sum())
    same = _backward(nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 4), nn.Linear(4, 4)),
                     lambda m: m(torch.randn(2, 4)).sum())
    assert _labels(wide) == []
    # the first Linear's input needs no gradient, so its addmm saves no weight for one: it is not a copy
    assert _labels(same) == ["1-2 · Linear × 2"]
    assert _labels(_backward(same_model := nn.Sequential(*[nn.Linear(4, 4) for _ in range(3)]),
                             lambda m: m(torch.randn(2, 4, requires_grad=True)).sum())) == ["0-2 · Linear × 3"]
    assert len(same_model) == 3
    interleaved = _backward(nn.Sequential(nn.Linear(4, 4), nn.Tanh(), nn.Linear(4, 4), nn.Tanh()),
                            lambda m: m(torch.randn(2, 4)).sum())
    assert _labels(interleaved) == []                               # not consecutive siblings


def _boxes(data, expanded) -> dict[str, graph_boxes.Box]:
    shown = graph_view.view(data, expanded)
    members = sorted(i for b in shown.boxes for i in b.members)
    assert members == list(range(len(data.nodes)))                  # every node in exactly one box
    return {b.key: b for b in shown.boxes}


def test_a_closed_fold_is_one_box_an_open_copy_splits_the_rest_into_runs_and_all_open_folds_nothing():
    torch.manual_seed(0)
    stack = nn.Sequential(*[nn.Sequential(nn.Linear(4, 4), nn.Tanh()) for _ in range(6)])
    data = _backward(stack, lambda m: m(torch.randn(2, 4, requires_grad=True)).sum())
    assert _labels(data) == ["0-5 · Sequential × 6"]
    root = next(n.group[0] for n in data.nodes if n.group)
    closed = _boxes(data, {root})
    assert [k for k in closed if not k.startswith("n:")] == [f"f:{root}.0|{root}.5"]   # and the loss, the input
    assert closed[f"f:{root}.0|{root}.5"].kind == "fold"
    assert closed[f"f:{root}.0|{root}.5"].lines[0] == "0-5 · Sequential × 6"
    middle = _boxes(data, {root, f"{root}.3"})
    assert {f"f:{root}.0|{root}.2", f"f:{root}.4|{root}.5", f"g:{root}.3.0", f"g:{root}.3.1"} == \
        {k for k in middle if not k.startswith("n:")}
    assert middle[f"f:{root}.4|{root}.5"].lines[0] == "4-5 · Sequential × 2"
    everything = {p for n in data.nodes for p in n.group}
    assert all(k.startswith("n:") for k in _boxes(data, everything))    # all open: one box per node


def test_a_node_in_a_copy_names_its_copy_in_the_details_panel():
    data = _resnet18()
    node = next(i for i, n in enumerate(data.nodes) if n.group[-1:] == ("ResNet.layer1.1.conv2",))
    rows = graph_view.details(data, node)
    assert ("copy", "layer1.1 is copy 2 of 2: layer1.0-1 · BasicBlock × 2") in rows
    outside = next(i for i, n in enumerate(data.nodes) if n.group[-1:] == ("ResNet.fc",))
    assert not [r for r in graph_view.details(data, outside) if r[0] == "copy"]


def test_the_first_view_opens_one_copy_of_a_fold_and_leaves_the_others_folded():
    torch.manual_seed(0)
    deep = nn.Sequential(*[nn.Sequential(nn.Linear(6, 6), nn.Tanh()) for _ in range(12)])
    forward, _, _, _ = forward_view.twin(forward_graph.trace(deep, torch.randn(2, 6)))
    (fold,) = graph_folds.folds(forward)                 # the first block saves less: its input needs no gradient
    assert fold.label == "1-11 · Sequential × 11"
    first = graph_boxes.first_expansion(forward)
    assert fold.copies[0] in first and not set(fold.copies[1:]) & first
    keys = {b.key for b in graph_view.view(forward).boxes}
    assert f"f:{fold.copies[1]}|{fold.copies[-1]}" in keys


def test_transformers_and_a_vit_fold_their_layers():
    transformers = pytest.importorskip("transformers")
    timm = pytest.importorskip("timm")
    torch.manual_seed(0)
    ids = torch.arange(16).reshape(2, 8) % 30
    gpt2 = transformers.GPT2LMHeadModel(transformers.GPT2Config(n_layer=3, n_embd=16, n_head=2, vocab_size=32,
                                                                n_positions=8))
    bert = transformers.BertModel(transformers.BertConfig(num_hidden_layers=3, hidden_size=16, num_attention_heads=2,
                                                          intermediate_size=32, vocab_size=32))
    vit = timm.create_model("vit_tiny_patch16_224", pretrained=False, img_size=32, patch_size=8, depth=3)
    assert _labels(_backward(gpt2, lambda m: m(input_ids=ids, labels=ids).loss)) == ["transformer.h.0-2 · GPT2Block × 3"]
    # inside each layer, query, key and value are three Linear(16, 16) with the same graph: named, not numbered,
    # they play different roles and stay apart
    assert _labels(_backward(bert, lambda m: m(input_ids=ids).last_hidden_state.sum())) == \
        ["encoder.layer.0-2 · BertLayer × 3"]
    assert _labels(_backward(vit, lambda m: m(torch.rand(2, 3, 32, 32)).sum())) == ["blocks.0-2 · Block × 3"]


def test_blocks_joined_through_their_parent_do_not_fold_into_a_box_before_and_after_the_same_add():
    torch.manual_seed(0)
    data = _backward(OutsideResidual(), lambda m: m(torch.randn(2, 4, requires_grad=True)).sum())
    graph = graph_folds._Graph(data)
    blocks = [f"OutsideResidual.blocks.{k}" for k in range(4)]
    assert len({graph.signature(b) for b in blocks}) == 1          # the same graph in each...
    assert graph.loops_back(tuple(blocks[:2])) and _labels(data) == []   # ...but the adds between them: no fold
    shown = graph_view.view(data, {"OutsideResidual"})
    assert not graph_layout.cycle_edges(len(shown.boxes), [(e.src, e.dst) for e in shown.edges])


def test_measured_times_in_the_panel_do_not_stop_copies_folding():
    torchvision = pytest.importorskip("torchvision")
    torch.manual_seed(0)
    model = torchvision.models.resnet18()
    with module_scope.record():
        loss = model(torch.rand(2, 3, 32, 32)).sum()
    graph, times = node_times.backward(loss, module=model)           # each copy's time differs
    timed = graph_view.from_autograd(graph, times=times)
    assert _labels(timed) == _labels(graph_view.from_autograd(graph)) == ["layer1.0-1 · BasicBlock × 2"]
