"""The instruments on models no notebook uses, each compared with an oracle that does not share its code:

- `autograd_graph.trace` (nodes, edges, saved tensors): a walk of `grad_fn.next_functions` written here, and each
  node's `_saved_*` attributes read directly;
- `memory.track`, category by category at the peak: torch's MemTracker (`memory_agreement.against_memtracker`);
- `profiling.work` FLOPs: torch's FlopCounterMode (plus torch's own attention formula where the CPU kernel has none);
- module grouping (`module_scope`): the module each op type runs in, known from the model's code.

Twelve and more architectures: torchvision's efficientnet_b0, shufflenet_v2, squeezenet, mobilenet_v3 (in-place
activations, squeeze-excitation, channel shuffle, stochastic depth), recurrent (GRU, LSTM), attention (a standalone
MultiheadAttention, a TransformerEncoderLayer), a custom autograd.Function, non-reentrant and reentrant
checkpointing, tied weights, depthwise convolution, in-place ops, a module returning a dataclass, an EmbeddingBag
with sparse gradients, and a compiled module (`torch.compile(..., backend="aot_eager")`: the trace and the
saved-tensor hooks see its CompiledFunctionBackward; the dispatch modes of `memory.track` and `profiling.work`
cannot see a compiled program, so it runs op by op there, as under MemTracker and FlopCounterMode, and both
say so with a CompiledRanEagerly warning).
"""
import contextlib
import dataclasses
import warnings

import pytest
import torch
import torchvision
from torch import nn
from torch.utils.checkpoint import checkpoint
from torch.utils.flop_counter import FlopCounterMode

from nbhelpers import autograd_graph, eager_only, memory, memory_agreement, module_scope, profiling
from tests.menagerie import independent_walk, saved_bytes_read_directly


class _Square(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return 2 * x * grad


class CustomFunction(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(6, 6)

    def forward(self, x):
        return _Square.apply(self.linear(x))


class Checkpointed(nn.Module):
    def __init__(self):
        super().__init__()
        self.block = nn.Sequential(nn.Linear(6, 12), nn.GELU(), nn.Linear(12, 6))
        self.head = nn.Linear(6, 2)

    def forward(self, x):
        return self.head(checkpoint(self.block, x, use_reentrant=False))


class ReentrantCheckpointed(Checkpointed):
    """Reentrant checkpointing (an autograd.Function) needs an input that requires grad: a layer before it."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Linear(6, 6)

    def forward(self, x):
        return self.head(checkpoint(self.block, self.stem(x), use_reentrant=True))


def _compiled(model):
    torch.compiler.reset()                # a fresh cache per test: no recompile limit reached across tests
    return torch.compile(model, backend="aot_eager")


class TiedWeights(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(20, 8)
        self.out = nn.Linear(8, 20, bias=False)
        self.out.weight = self.embed.weight

    def forward(self, tokens):
        return self.out(torch.tanh(self.embed(tokens)))


class Depthwise(nn.Module):
    def __init__(self):
        super().__init__()
        self.depthwise = nn.Conv2d(4, 4, 3, padding=1, groups=4)
        self.pointwise = nn.Conv2d(4, 8, 1)

    def forward(self, x):
        return self.pointwise(torch.relu(self.depthwise(x)))


class InPlace(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(6, 6)
        self.act = nn.ReLU(inplace=True)

    def forward(self, x):
        y = self.act(self.linear(x)) * 3          # ReLU in place on addmm's output, which addmm does not save
        y.add_(1)                                 # and an in-place add on mul's output, which mul does not save
        return y


@dataclasses.dataclass
class Output:
    logits: torch.Tensor
    hidden: torch.Tensor


class DataclassOutput(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = nn.Linear(6, 8)
        self.head = nn.Linear(8, 3)

    def forward(self, x):
        hidden = torch.tanh(self.encoder(x))
        return Output(self.head(hidden), hidden)


class Recurrent(nn.Module):
    def __init__(self, cell):
        super().__init__()
        self.rnn = cell(8, 12, num_layers=2, batch_first=True)
        self.head = nn.Linear(12, 3)

    def forward(self, x):
        out, _ = self.rnn(x)
        return self.head(out[:, -1])


def _tokens():
    return torch.randint(0, 20, (3, 5))


ARCHITECTURES = {
    "efficientnet_b0": (lambda: torchvision.models.efficientnet_b0(num_classes=5), lambda: torch.rand(2, 3, 32, 32)),
    "shufflenet_v2": (lambda: torchvision.models.shufflenet_v2_x0_5(num_classes=5), lambda: torch.rand(2, 3, 32, 32)),
    "squeezenet": (lambda: torchvision.models.squeezenet1_1(num_classes=5), lambda: torch.rand(2, 3, 48, 48)),
    "mobilenet_v3": (lambda: torchvision.models.mobilenet_v3_small(num_classes=5), lambda: torch.rand(2, 3, 32, 32)),
    "gru": (lambda: Recurrent(nn.GRU), lambda: torch.rand(2, 5, 8)),
    "lstm": (lambda: Recurrent(nn.LSTM), lambda: torch.rand(2, 5, 8)),
    "multihead_attention": (lambda: nn.MultiheadAttention(8, 2, batch_first=True), lambda: torch.rand(2, 5, 8)),
    "transformer_layer": (lambda: nn.TransformerEncoderLayer(8, 2, dim_feedforward=16, batch_first=True),
                          lambda: torch.rand(2, 5, 8)),
    "custom_function": (CustomFunction, lambda: torch.rand(4, 6)),
    "checkpointed": (Checkpointed, lambda: torch.rand(4, 6)),
    "tied_weights": (TiedWeights, _tokens),
    "depthwise": (Depthwise, lambda: torch.rand(2, 4, 8, 8)),
    "in_place": (InPlace, lambda: torch.rand(4, 6)),
    "dataclass_output": (DataclassOutput, lambda: torch.rand(4, 6)),
    "sparse_embedding_bag": (lambda: nn.EmbeddingBag(20, 8, sparse=True), _tokens),
    "reentrant_checkpoint": (ReentrantCheckpointed, lambda: torch.rand(4, 6)),
    "compiled": (lambda: _compiled(Depthwise()), lambda: torch.rand(2, 4, 8, 8)),
}


def _says_it_ran_eagerly(name):
    """The dispatch-mode instruments on the compiled module: a CompiledRanEagerly warning, else nothing."""
    if name == "compiled":
        return pytest.warns(eager_only.CompiledRanEagerly)
    return contextlib.nullcontext()


def _build(name):
    torch.manual_seed(0)
    make_model, make_input = ARCHITECTURES[name]
    return make_model(), make_input()


def _first_tensor(out):
    if isinstance(out, torch.Tensor):
        return out
    if dataclasses.is_dataclass(out):
        return getattr(out, dataclasses.fields(out)[0].name)
    return out[0]


def _forward(model, x):
    return _first_tensor(model(x, x, x) if isinstance(model, nn.MultiheadAttention) else model(x))


def _loss(model, x):
    return _forward(model, x).float().pow(2).mean()


@pytest.mark.parametrize("name", ARCHITECTURES)
def test_the_trace_equals_an_independent_walk_and_the_saved_attributes(name):
    model, x = _build(name)
    loss = _loss(model, x)
    graph = autograd_graph.trace(loss, module=model)
    nodes, edges = independent_walk(loss.grad_fn)
    assert len(graph.nodes) == len(nodes) and len(graph.edges) == edges
    if name != "checkpointed":          # checkpointing's saved tensors are _Holders the trace reports as packed
        traced = sum(s.nbytes for n in graph.nodes for s in n.saved)
        assert traced == sum(saved_bytes_read_directly(fn) for fn in nodes)


@pytest.mark.parametrize("name", ARCHITECTURES)
def test_memory_track_agrees_with_memtracker(name):
    model, x = _build(name)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)

    def step():
        _loss(model, x).backward()
        optimizer.step()

    if name == "sparse_embedding_bag":         # MemTracker cannot run on sparse gradients: said plainly
        with pytest.raises(ValueError, match="MemTracker cannot follow sparse tensors"):
            memory_agreement.against_memtracker(step, model, optimizer)
        return
    with _says_it_ran_eagerly(name):
        rows = memory_agreement.against_memtracker(step, model, optimizer)
    assert all(row.agrees for row in rows), [(r.category, r.memtracker, r.ours, r.accounted) for r in rows
                                             if not r.agrees]


@pytest.mark.parametrize("name", ARCHITECTURES)
def test_work_counts_the_flops_flop_counter_mode_counts(name):
    model, x = _build(name)
    official = FlopCounterMode(display=False)
    with official:
        _loss(model, x).backward()
    with _says_it_ran_eagerly(name):
        counted = profiling.work(lambda: _loss(model, x).backward())
    assert counted.flops - counted.added_flops == official.get_total_flops()
    assert counted.added_flops == 0 or name in {"multihead_attention", "transformer_layer"}


def test_module_grouping_on_a_torchvision_model_follows_named_modules():
    model, x = _build("efficientnet_b0")
    with module_scope.record():
        loss = _loss(model, x)
    graph = autograd_graph.trace(loss, module=model)
    convolutions = [n for n in graph.nodes if n.name == "ConvolutionBackward0"]
    names = {f"EfficientNet.{path}" for path, m in model.named_modules() if isinstance(m, nn.Conv2d)}
    assert len(convolutions) == len(names) and {n.module for n in convolutions} == names   # each conv, its own


def test_a_compiled_model_is_seen_as_one_compiled_node_credited_to_it():
    torch.compiler.reset()
    model, x = _build("depthwise")
    compiled = torch.compile(model, backend="aot_eager")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)          # torch's note on global hooks and OptimizedModule
        with module_scope.record():
            loss = _loss(compiled, x)
    graph = autograd_graph.trace(loss, module=model)
    (node,) = [n for n in graph.nodes if n.name == "CompiledFunctionBackward"]
    assert node.module == "Depthwise"
    torch.compiler.reset()


def test_memory_track_counts_a_sparse_gradients_indices_and_values():
    model, tokens = _build("sparse_embedding_bag")
    with memory.track() as tracker:
        model(tokens).sum().backward()
    grad = model.weight.grad
    assert grad.layout == torch.sparse_coo
    alive = {a.key: a.nbytes for a in tracker.allocations if a.freed_at is None}
    for part in (grad._indices(), grad._values()):
        assert alive[part.untyped_storage().data_ptr()] == part.untyped_storage().nbytes()


@pytest.mark.parametrize("name", ARCHITECTURES)
def test_saved_bytes_by_module_accounts_for_every_byte_the_trace_shows(name):
    # the hooks' count, plus Python numbers autograd saves without hooks, minus the inputs checkpointing keeps
    # outside every node, equals the trace's saved bytes: to the byte (efficientnet's in-place Dropout inside a
    # CopySlices node, MultiheadAttention's wrapped scale, the checkpoint's kept input included)
    model, x = _build(name)
    saved, out = memory.saved_bytes_by_module(lambda inputs: _forward(model, inputs), x)
    traced = autograd_graph.trace(out.float().sum())
    if name == "checkpointed":
        assert "_Holder" in {s.packed for n in traced.nodes for s in n.saved}    # the block's: checkpoint's hooks
    accounted = sum(s.nbytes + s.wrapped_numbers - s.checkpoint_inputs for s in saved.values())
    assert accounted == sum(s.nbytes for n in traced.nodes for s in n.saved)
