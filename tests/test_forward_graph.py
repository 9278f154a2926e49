"""forward_graph.trace on architectures no notebook uses (tests/test_unseen_models.py's, plus ResNet-18 and an MLP),
against oracles that share none of its code:

- the link to backward: every node of `autograd_graph.trace` (a walk of grad_fn.next_functions) other than
  AccumulateGrad is made by exactly one forward op, and the nodes' sequence numbers (autograd's own per-thread
  counter, taken as each node is made) rise with the ops that made them;
- shapes, dtypes and strides: a plain dispatch mode written here records every op's outputs; each leaf module's
  output (a forward hook) is the last output its ops made; the model's output is the last op's.
"""
import warnings

import pytest
import torch
import torchvision
from torch import nn

from nbhelpers import eager_only, forward_graph, module_scope
from tests.menagerie import DispatchOutputs
from tests.test_unseen_models import ARCHITECTURES as UNSEEN, _first_tensor

ACCUMULATE = module_scope.ACCUMULATE_GRAD


def _mlp():
    return nn.Sequential(nn.Linear(6, 12), nn.ReLU(), nn.Linear(12, 3))


ARCHITECTURES = {**{name: spec for name, spec in UNSEEN.items() if name != "compiled"},
                 "resnet18": (lambda: torchvision.models.resnet18(num_classes=5), lambda: torch.rand(1, 3, 64, 64)),
                 "mlp": (_mlp, lambda: torch.rand(4, 6))}


def _build(name):
    torch.manual_seed(0)
    make_model, make_input = ARCHITECTURES[name]
    model, x = make_model(), make_input()
    return model, ((x, x, x) if isinstance(model, nn.MultiheadAttention) else (x,))


@pytest.mark.parametrize("name", ARCHITECTURES)
def test_every_backward_node_is_made_by_exactly_one_forward_op(name):
    model, inputs = _build(name)
    fg = forward_graph.trace(model, *inputs)
    assert fg.error is None
    graph = fg.backward
    makers = {}
    for op in fg.ops:
        for node in ([op.backward] if op.backward is not None else []) + list(op.also):
            makers.setdefault(node, []).append(op.id)
    returned = [t for t in module_scope.tensors_in(fg.output) if t.grad_fn is not None]
    reduction = len(returned) > 1            # several outputs: trace sums them, ops of no forward
    for node in graph.nodes:
        if node.name == ACCUMULATE:
            assert node.id not in makers
        elif not reduction or node.module != module_scope.OUTSIDE or node.id in makers:
            assert len(makers.get(node.id, [])) == 1, (node.id, node.name, makers.get(node.id))
    for op in fg.ops:                        # two nodes only for an in-place op on a view: CopySlices and the view's
        assert not op.also or (op.mutates and graph.nodes[op.backward].name == forward_graph.COPY_SLICES), op
    made_in_order = [graph.nodes[op.backward].sequence_nr for op in fg.ops if op.backward is not None]
    assert made_in_order == sorted(made_in_order) and len(set(made_in_order)) == len(made_in_order)


@pytest.mark.parametrize("name", ARCHITECTURES)
def test_shapes_dtypes_and_strides_are_the_real_tensors(name):
    model, inputs = _build(name)
    with DispatchOutputs() as seen:
        model(*inputs)
    fg = forward_graph.trace(model, *inputs)
    ours = [(op.op, [(o.shape, o.dtype, o.stride) for o in op.outputs]) for op in fg.ops]
    assert ours == seen.ops
    assert fg.ops[-1].outputs[0].shape == tuple(_first_tensor(fg.output).shape) or len(fg.ops[-1].outputs) > 1


def test_each_leaf_modules_output_is_the_last_output_its_ops_made():
    model, (x,) = _build("resnet18")
    leaf_outputs = {}
    names = {m: f"ResNet.{n}" for n, m in model.named_modules() if n}
    hooks = [m.register_forward_hook(lambda m, a, out: leaf_outputs.__setitem__(names[m], tuple(out.shape)))
             for m in names if not list(m.children())]
    try:
        fg = forward_graph.trace(model, x)
    finally:
        for h in hooks:
            h.remove()
    last = {}
    for op in fg.ops:
        if op.outputs and op.op != "aten.detach.default":   # autograd's own detach when it saves an output
            last[op.module] = op.outputs[0].shape
    assert {path: last[path] for path in leaf_outputs} == leaf_outputs


def test_inputs_are_named_by_where_they_came_from():
    model = _mlp()
    fg = forward_graph.trace(model, torch.rand(4, 6))
    t, addmm = fg.ops[0], fg.ops[1]
    assert (t.op, addmm.op) == ("aten.t.default", "aten.addmm.default")
    assert t.sources[0].name == "Sequential.0.weight"
    assert [s.name or s.op for s in addmm.sources] == ["Sequential.0.bias", "input 0", 0]
    assert t.views == (0,) and addmm.views == (None,)           # t is a view of its input, addmm is not
    assert addmm.module == "Sequential.0" and fg.backward.nodes[addmm.backward].name == "AddmmBackward0"


def test_an_in_place_op_on_a_view_links_copy_slices_and_the_replayed_view():
    class InPlaceOnView(nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = nn.Linear(4, 4)

        def forward(self, x):
            y = self.linear(x)
            y[:, :2].relu_()
            return y[:, 1:] * 2                  # reads the changed base through a new view

    fg = forward_graph.trace(InPlaceOnView(), torch.rand(3, 4))
    (relu,) = [op for op in fg.ops if op.op == "aten.relu_.default"]
    assert relu.mutates == (0,) and fg.backward.nodes[relu.backward].name == forward_graph.COPY_SLICES


def test_a_forward_that_raises_returns_the_graph_up_to_the_failing_op():
    model = nn.Sequential(nn.Linear(6, 12), nn.ReLU(), nn.Linear(10, 3))      # 12 features into a 10-input layer
    fg = forward_graph.trace(model, torch.rand(4, 6))
    assert isinstance(fg.error, RuntimeError) and "cannot be multiplied" in str(fg.error)
    assert fg.output is None and fg.backward is None
    assert [op.op for op in fg.ops][-1] == "aten.addmm.default" and fg.ops[-1].failed
    assert fg.ops[-1].module == "Sequential.2" and [op.failed for op in fg.ops].count(True) == 1
    assert fg.ops[-1].inputs[1].shape == (4, 12) and fg.ops[-1].inputs[2].shape == (10, 3)


def test_a_compiled_model_is_traced_eagerly_and_says_so():
    torch.compiler.reset()
    compiled = torch.compile(_mlp(), backend="aot_eager")
    x = torch.rand(4, 6)
    compiled(x)
    with pytest.warns(eager_only.CompiledRanEagerly):
        fg = forward_graph.trace(compiled, x)
    assert "aten.addmm.default" in {op.op for op in fg.ops}
    torch.compiler.reset()


@pytest.mark.parametrize("call, error, words", [
    (lambda: forward_graph.trace(lambda x: x * 2, torch.rand(2)), TypeError, "`model` must be a torch.nn.Module"),
    (lambda: forward_graph.trace("model", torch.rand(2)), TypeError, "`model` must be a torch.nn.Module"),
    (lambda: forward_graph.trace(_NoTensor(), torch.rand(2)), ValueError, "with no tensor in it"),
    (lambda: forward_graph.trace(_mlp().to("meta"), torch.rand(4, 6)), ValueError, "`inputs` are on ['cpu']"),
])
def test_wrong_calls_say_what_to_pass(call, error, words):
    with pytest.raises(error) as caught:
        call()
    assert words in str(caught.value)


class _NoTensor(nn.Module):
    def forward(self, x):
        return {"count": int(x.numel())}


def test_nothing_is_left_behind():
    before = (torch._C._len_torch_dispatch_stack(), len(torch.nn.modules.module._global_forward_hooks))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        forward_graph.trace(_mlp(), torch.rand(4, 6))
        forward_graph.trace(nn.Sequential(nn.Linear(6, 2), nn.Linear(3, 1)), torch.rand(4, 6))   # raising
    assert (torch._C._len_torch_dispatch_stack(), len(torch.nn.modules.module._global_forward_hooks)) == before



def test_views_and_writes_come_from_the_schema_with_lists_of_tensors_counted():
    class SplitCat(nn.Module):
        def forward(self, x):
            a, b = x.split(2, dim=1)
            c = torch.cat([a, b, a], dim=1)
            c.add_(1)
            return c.t() * 2

    fg = forward_graph.trace(SplitCat(), torch.rand(3, 4, requires_grad=True))
    rows = [(op.op, len(op.inputs), op.views, op.mutates) for op in fg.ops]
    assert rows == [("aten.split.Tensor", 1, (0, 0), ()), ("aten.cat.default", 3, (None,), ()),
                    ("aten.add_.Tensor", 1, (None,), (0,)), ("aten.t.default", 1, (0,), ()),
                    ("aten.mul.Tensor", 1, (None,), ())]


def test_autograd_saving_an_ops_output_shows_as_a_detach_and_nothing_else_does():
    """exp and relu save their result (a shallow copy, tensor_data(), which a watching mode sees as aten.detach);
    sin saves its input (no copy); under no_grad nothing is saved."""
    x = torch.rand(3, requires_grad=True)
    seen = {}
    for name, op in (("exp", torch.exp), ("relu", torch.relu), ("sin", torch.sin)):
        with DispatchOutputs() as recording:
            op(x)
        with torch.no_grad(), DispatchOutputs() as not_recording:
            op(x)
        seen[name] = ([o for o, _ in recording.ops], [o for o, _ in not_recording.ops])
    assert seen["exp"] == (["aten.exp.default", "aten.detach.default"], ["aten.exp.default"])
    assert seen["relu"] == (["aten.relu.default", "aten.detach.default"], ["aten.relu.default"])
    assert seen["sin"] == (["aten.sin.default"], ["aten.sin.default"])


def _twin_states(fg):
    from nbhelpers import graph_view

    widget = graph_view.show_twin(fg)
    return widget, [graph_view._untext(t) for t in (widget.graph, widget.other) if t]


def test_the_twin_view_pairs_each_op_with_its_node_and_lights_what_the_node_saved():
    torch.manual_seed(0)
    fg = forward_graph.trace(_mlp(), torch.rand(4, 6))
    widget, (forward, backward) = _twin_states(fg)
    labels = [n[0] for n in forward["nodes"]]
    assert labels == ["input 0", "t", "addmm", "relu", "t", "addmm"]          # autograd's detach not drawn
    assert "(1 aten.detach from autograd saving an output, not drawn)" in forward["title"]
    names = [n[0] for n in backward["nodes"]]
    assert {(labels[f], names[b]) for f, b in backward["matched"]} == {
        ("t", "TBackward0"), ("addmm", "AddmmBackward0"), ("relu", "ReluBackward0")}
    lit = {names[b]: sorted(labels[f] for f in nodes) for b, nodes in forward["lit"]}
    root = backward["nodes"][0]
    assert root[0] == "AddmmBackward0" and lit["AddmmBackward0"] == ["relu", "t"]   # it saved mat1 and mat2
    assert forward["nodes"][1][10] == ["[6, 12]"]                                  # shapes on the edges
    assert "addmm: [12] float32, [4, 6] float32, [6, 12] float32 -> [4, 12] float32" in [n[9] for n in forward["nodes"]]
    assert widget._repr_mimebundle_()["image/svg+xml"].count("<svg") == 3          # both panes in the picture


def test_a_raised_forward_is_drawn_alone_with_its_failing_op_in_red():
    fg = forward_graph.trace(nn.Sequential(nn.Linear(6, 12), nn.Linear(10, 3)), torch.rand(4, 6))
    widget, states = _twin_states(fg)
    assert len(states) == 1 and "stopped: RuntimeError: mat1 and mat2 shapes cannot be multiplied" in states[0]["title"]
    assert states[0]["nodes"][-1][1] == "error" and 'fill="#e05252"' in widget._repr_mimebundle_()["image/svg+xml"]
    made = dict(states[0]["nodes"][2][8])                 # the first addmm, which ran: not linked, and why
    assert made["made"].startswith("not linked: the forward raised before it returned an output")


def test_show_twin_refuses_what_is_not_a_forward_graph():
    from nbhelpers import graph_view

    with pytest.raises(TypeError, match="`fg` must be a forward_graph.ForwardGraph"):
        graph_view.show_twin(_mlp())


class _Doubled(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * 2                                       # saves nothing

    @staticmethod
    def backward(ctx, grad):
        return grad * 2


class _Early(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        kept = x.exp()
        x.sin()                                            # the last op inside is not what it returns
        return kept

    @staticmethod
    def backward(ctx, grad):
        return grad


class _Functions(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(3, 3)

    def forward(self, x):
        return torch.tanh(_Early.apply(_Doubled.apply(self.linear(x))))


def test_custom_function_nodes_are_linked_to_the_op_that_made_what_they_returned():
    fg = forward_graph.trace(_Functions(), torch.rand(2, 3))
    names = {fg.backward.nodes[n].name: op.op for op in fg.ops for n in ((op.backward,) if op.backward is not None
                                                                          else ()) + op.also}
    assert names["_DoubledBackward"] == "aten.mul.Tensor" and names["_EarlyBackward"] == "aten.exp.default"
    assert {n.name for n in fg.backward.nodes if not n.is_leaf} <= set(names)     # every node linked


def test_inputs_are_named_by_position_keyword_and_first_use():
    class TwoInputs(nn.Module):
        def forward(self, x, *, scale):
            return x * scale

    fg = forward_graph.trace(TwoInputs(), torch.rand(2), scale=torch.rand(2))
    assert [s.name for s in fg.ops[0].sources] == ["input 0", "input scale"]
    x = torch.rand(2, 5, 8)
    attention = forward_graph.trace(nn.MultiheadAttention(8, 2, batch_first=True), x, x, x)
    assert {s.name for op in attention.ops for s in op.sources if s.name.startswith("input")} == {"input 0"}


def test_an_in_place_relu_lights_only_itself_not_what_it_overwrote():
    from nbhelpers import forward_view

    model = nn.Sequential(nn.Conv2d(1, 2, 3), nn.BatchNorm2d(2), nn.ReLU(inplace=True))
    fg = forward_graph.trace(model, torch.rand(1, 1, 5, 5))
    forward, backward, _, saved_by = forward_view.twin(fg)
    relu_node = next(k for k, n in enumerate(backward.nodes) if n.label == "ReluBackward0")
    assert [forward.nodes[f].label for f in dict(saved_by)[relu_node]] == ["relu_"]
