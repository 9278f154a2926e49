"""Article §2.1-§2.3: the sandwich model, initialisation, and grad modes."""
from __future__ import annotations

import inspect
import math
import weakref

import torch
import torch.nn.functional as F
from torch import nn

from claims.probes import in_torch, parts, row, verdict


def _graphs(fn, *calls) -> int:
    """How many graphs Dynamo compiles for `fn` over `calls` (the eager backend: nothing is generated)."""
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    compiled = torch.compile(fn, backend="eager")
    for args in calls:
        compiled(*args)
    graphs = counters["stats"]["unique_graphs"]
    torch._dynamo.reset()
    return graphs


class _TextbookNet(nn.Module):                 # the article's §2.1 network, as printed
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(784, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        x = F.relu(self.fc1(x))
        return self.fc2(x)


@row("2.1", "The textbook network (`fc1`, `relu`, `fc2`) runs", where="03 1. Why three layers",
     source="torch/nn/modules/linear.py:134 return F.linear(input, self.weight, self.bias)")
def textbook_net_runs():
    return verdict(_TextbookNet()(torch.rand(4, 784)).shape == (4, 10))


@row("2.1", "`self.fc1(x)` passes `x`'s `requires_grad` on to the output (which decides whether a graph is built)",
     where="03 1. Why three layers", source="torch/nn/parameter.py:51 def __new__(cls, data=None, requires_grad=True):")
def fc1_passes_requires_grad():
    net = _TextbookNet()
    out = net.fc1(torch.rand(4, 784))             # x does not require grad; the weights do
    return verdict(not out.requires_grad)


@row("2.1", "`self.fc1(x)` registers an `AddmmBackward` node in `fc1.weight.grad_fn`", where="03 1. Why three layers",
     source="torch/nn/modules/module.py:630 Cannot assign non-leaf Tensor to parameter")
def fc1_registers_weight_grad_fn():
    net = _TextbookNet()
    out = net.fc1(torch.rand(4, 784))
    return verdict(net.fc1.weight.grad_fn is not None and out.grad_fn is not None)


@row("2.1", "`self.fc1(x)` binds `fc1.bias`'s gradient accumulator to the graph", where="03 1. Why three layers",
     source="torch/nn/modules/linear.py:134 return F.linear(input, self.weight, self.bias)")
def fc1_binds_bias_accumulator():
    net = _TextbookNet()
    out = net.fc1(torch.rand(4, 784))
    leaves = [f.variable for f, _ in out.grad_fn.next_functions if f is not None and hasattr(f, "variable")]
    return verdict(any(leaf is net.fc1.bias for leaf in leaves))


@row("2.1", "torch raises \"Cannot compile function with non-constant tensor inputs\"",
     where="12 10. Messages the article quotes", source='absent "Cannot compile function with non-constant tensor inputs"')
def message_non_constant_inputs():
    return verdict(in_torch("Cannot compile function with non-constant tensor inputs"))


@row("2.1", "`torch.compile` defaults to `fullgraph=True`", where="05 4. Graph breaks",
     source="torch/__init__.py:3048 fullgraph: builtins.bool = False")
def fullgraph_default():
    return verdict(inspect.signature(torch.compile).parameters["fullgraph"].default is True)


@row("2.1", "In 2.1 `torch.compile` needs every input's shape and device fixed at compile time",
     where="05 5. Dynamic shapes", source="torch/_dynamo/config.py:188 automatic_dynamic_shapes = (")
def shapes_fixed_at_compile_time():
    return verdict(_graphs(lambda t: t.sin(), *[(torch.ones(n),) for n in (8, 16, 32, 64)]) == 4)


@row("2.1", "A hard-coded `x.view(-1, 784)` makes compilation fail, \"because -1 is a dynamically derived value\"",
     where="03 1. Why three layers", source="torch/_prims_common/__init__.py:1081 def infer_size(")
def view_minus_one_fails():
    net = _TextbookNet()
    try:
        torch._dynamo.reset()
        torch.compile(lambda x: net(x.view(-1, 784)), fullgraph=True, backend="eager")(torch.rand(8, 1, 28, 28))
    except Exception:  # noqa: BLE001 - any failure is the article's claim holding
        return "true"
    finally:
        torch._dynamo.reset()
    return "false"


@row("2.1", "The sandwich model runs as printed (`NeuralNetwork` with `InputAdapter`, `CoreBlock`, `OutputAdapter`)",
     where="03 1. Why three layers",
     source="torch/nn/modules/module.py:403 Module [{type(self).__name__}] is missing the required")
def sandwich_runs_as_printed():
    class CoreBlock(nn.Module):                   # as printed: no forward; InputAdapter and OutputAdapter are
        def __init__(self):                       # never defined at all
            super().__init__()
            self.fc1, self.fc2, self.dropout = nn.Linear(784, 128), nn.Linear(128, 10), nn.Dropout(0.2)
    try:
        CoreBlock()(torch.rand(2, 784))
    except NotImplementedError:
        return "false"
    return "true"


@row("2.1", "`predict` (`with torch.no_grad(): self.forward(x)`) is an inference interface that disables gradients",
     where="03 4. Two independent switches",
     source="torch/nn/modules/dropout.py:73 return F.dropout(input, self.p, self.training, self.inplace)")
def predict_is_inference():
    net = nn.Sequential(nn.Linear(8, 8), nn.Dropout(0.5))           # freshly built: in training mode
    x = torch.ones(4, 8)
    with torch.no_grad():
        first, second = net(x), net(x)
    no_graph = first.grad_fn is None
    dropout_still_on = not torch.equal(first, second)               # nothing called eval()
    return "partly true" if no_graph and dropout_still_on else verdict(no_graph)


@row("2.1", "The adapter / core / adapter split lets you tell at once where a `torch.compile` error comes from",
     where="03 1. Why three layers",
     source="torch/_dynamo/exc.py:811 from user code:")
def split_localises_errors():
    # a compile error names the user's line whatever the structure; the split helps only where an adapter
    # checks its input and says what it expected
    class Bad(nn.Module):
        def forward(self, x):
            return x.nonzero().sum() if x.sum() > 0 else x
    torch._dynamo.reset()
    try:
        torch.compile(Bad(), fullgraph=True, backend="eager")(torch.ones(3))
    except Exception as e:  # noqa: BLE001 - the message is what is inspected
        names_line = "x.sum() > 0" in str(e) or "forward" in str(e)
    else:
        names_line = False
    finally:
        torch._dynamo.reset()
    return "partly true" if names_line else "false"


@row("2.1", "`F.interpolate` without a `size` rebuilds the graph on every forward (training 40% slower)",
     where="05 5. Dynamic shapes", source="torch/nn/functional.py:5003 def interpolate(")
def interpolate_recompiles():
    def resize(x):
        return F.interpolate(x, scale_factor=2.0, mode="bilinear")
    same_shape = [(torch.rand(1, 3, 8, 8),) for _ in range(4)]
    return verdict(_graphs(resize, *same_shape) > 1)


@row("2.1", "`nn.Dropout` in training mode conflicts with compilation", where="05 2. Three backends side by side",
     source="torch/nn/modules/dropout.py:73 return F.dropout(input, self.p, self.training, self.inplace)")
def dropout_conflicts():
    net = nn.Sequential(nn.Linear(8, 8), nn.Dropout(0.5)).train()
    try:
        torch._dynamo.reset()
        torch.compile(net, fullgraph=True, backend="eager")(torch.ones(4, 8))
    except Exception:  # noqa: BLE001 - any failure is the article's claim holding
        return "true"
    finally:
        torch._dynamo.reset()
    return "false"


def _article_core_block(device=None):
    class CoreBlock(nn.Module):                # the article's §2.2 CoreBlock (it has no forward)
        def __init__(self):
            super().__init__()
            self.fc1, self.fc2, self.dropout = nn.Linear(784, 128), nn.Linear(128, 10), nn.Dropout(0.2)
            self.reset_parameters()

        def reset_parameters(self):
            for name, param in self.named_parameters():
                if "weight" in name:
                    if param.is_cuda:
                        nn.init.kaiming_uniform_(param, a=math.sqrt(5), mode="fan_in", nonlinearity="relu")
                    else:
                        nn.init.normal_(param, std=0.01)
                elif "bias" in name:
                    nn.init.zeros_(param)
    return CoreBlock()


@row("2.2", "2.1 asks you to give up `nn.init.xavier_normal_`", where="03 3. Initialisation",
     source="torch/nn/init.py:512 def xavier_normal_")
def give_up_xavier():
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        nn.init.xavier_normal_(torch.empty(4, 4))
    return verdict(any(issubclass(w.category, (DeprecationWarning, FutureWarning)) for w in caught))


@row("2.2", "In 2.1 every module's `reset_parameters` switched to `kaiming_uniform_` instead of Xavier",
     where="03 3. Initialisation",
     source="torch/nn/modules/activation.py:1235 xavier_uniform_(self.in_proj_weight)")
def every_module_kaiming():
    linear = "kaiming_uniform_" in inspect.getsource(nn.Linear.reset_parameters)
    attention = "xavier_uniform_" in inspect.getsource(nn.MultiheadAttention._reset_parameters)
    embedding = "normal_" in inspect.getsource(nn.Embedding.reset_parameters)
    return verdict(linear and not attention and not embedding)


@row("2.2", "The switch to Kaiming (`a=math.sqrt(5)`) comes from adapting to ReLU-dominated architectures",
     where="03 3. Initialisation", source="torch/nn/init.py:238 return math.sqrt(2.0 / (1 + negative_slope**2))")
def kaiming_for_relu():
    default_gain = nn.init.calculate_gain("leaky_relu", math.sqrt(5))
    return verdict(math.isclose(default_gain, nn.init.calculate_gain("relu")))   # √(1/3) vs √2


@row("2.2", "Kaiming's variance factor is 1/fan_in and Xavier's 1/sqrt(fan_in)", where="03 3. Initialisation",
     source="torch/nn/init.py:667 std = gain / math.sqrt(fan)")
def variance_factors():
    torch.manual_seed(0)
    fan_in = fan_out = 1024
    kaiming = nn.init.kaiming_normal_(torch.empty(fan_out, fan_in), nonlinearity="relu").var().item()
    xavier = nn.init.xavier_normal_(torch.empty(fan_out, fan_in)).var().item()
    kaiming_ok = math.isclose(kaiming, 1 / fan_in, rel_tol=0.05)            # measured: 2/fan_in
    xavier_ok = math.isclose(xavier, 1 / math.sqrt(fan_in), rel_tol=0.05)    # measured: 2/(fan_in+fan_out)
    return verdict(kaiming_ok and xavier_ok)


@row("2.2", "Kaiming suppresses vanishing gradients better than Xavier in deep networks", where="03 3. Initialisation",
     source="torch/nn/init.py:225 return math.sqrt(2.0)")
def kaiming_keeps_scale():
    def last_std(init):
        torch.manual_seed(0)
        x = torch.randn(512, 256)
        with torch.no_grad():
            for _ in range(20):
                layer = nn.Linear(256, 256)
                init(layer.weight)
                nn.init.zeros_(layer.bias)
                x = torch.relu(layer(x))
        return x.std().item()
    kaiming = last_std(lambda w: nn.init.kaiming_normal_(w, nonlinearity="relu"))
    return verdict(kaiming > 100 * last_std(nn.init.xavier_normal_))


@row("2.2", "`kaiming_uniform_` does not check the CUDA cache, so after `model.cuda()` some weights stayed on the CPU",
     where="03 2. Registration", source="torch/nn/modules/module.py:930 def _apply(")
def weights_stay_behind():
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2))
    for p in model.parameters():
        if p.dim() > 1:
            nn.init.kaiming_uniform_(p)
    model.to("meta")                      # .cuda() is .to("cuda"): the same _apply, on a device every machine has
    return verdict(any(p.device.type != "meta" for p in model.parameters()))


@row("2.2", "The article's `CoreBlock` initialises with Kaiming on a GPU (its `param.is_cuda` branch)",
     where="03 3. Initialisation",
     source="torch/nn/modules/linear.py:109 torch.empty((out_features, in_features), **factory_kwargs)")
def core_block_kaiming_on_gpu():
    block = _article_core_block()          # the article builds it, then calls .cuda(): is_cuda is False here
    return verdict(not math.isclose(block.fc1.weight.std().item(), 0.01, rel_tol=0.05))


@row("2.2", "The CPU fallback `normal_(param, std=0.01)` is \"the standard normal distribution\"",
     where="03 3. Initialisation", source="torch/nn/init.py:274 def normal_")
def standard_normal_fallback():
    torch.manual_seed(0)
    return verdict(math.isclose(nn.init.normal_(torch.empty(100_000), std=0.01).std().item(), 1.0, rel_tol=0.05))


@row("2.2", "`a=math.sqrt(5)` is ReLU's negative slope in `kaiming_uniform_(..., nonlinearity='relu')`",
     where="03 3. Initialisation", source="torch/nn/init.py:235 negative_slope = param")
def a_is_relu_slope():
    torch.manual_seed(0)
    with_a = nn.init.kaiming_uniform_(torch.empty(64, 64), a=math.sqrt(5), nonlinearity="relu")
    torch.manual_seed(0)
    without = nn.init.kaiming_uniform_(torch.empty(64, 64), nonlinearity="relu")
    return verdict(not torch.equal(with_a, without))       # `a` is read only for leaky_relu


@row("2.2", "Initialise by branching on `param.is_cuda` (`normal_(std=0.01)` on the CPU)", where="03 3. Initialisation",
     source="torch/nn/modules/linear.py:109 torch.empty((out_features, in_features), **factory_kwargs)")
def branch_on_is_cuda():
    # the advice gives the same model everywhere only by accident: the branch is always False in __init__,
    # and a model built on its device (torch.device as a context) would need no branch at all
    block = _article_core_block()
    return verdict(block.fc1.weight.is_cuda)


@row("2.2", "`torch.compile` graph-optimises `reset_parameters`; an `is_cuda` branch raises `DynamoBackendError`",
     where="03 3. Initialisation", source="torch/_dynamo/eval_frame.py:652 return getattr(self._orig_mod, name)")
def compile_optimises_reset_parameters():
    from torch._dynamo.utils import counters

    linear = nn.Linear(3, 2)
    torch._dynamo.reset()
    counters.clear()
    torch.compile(linear, backend="eager").reset_parameters()
    compiled_it = counters["stats"]["calls_captured"] > 0
    branch = torch.compile(lambda w: w * 2 if w.is_cuda else w * 0.01, fullgraph=True, backend="eager")
    branch_ok = torch.equal(branch(torch.ones(2)), torch.ones(2) * 0.01)
    torch._dynamo.reset()
    return parts(compiled_it, not branch_ok or in_torch("DynamoBackendError"))


@row("2.2", "A block calls `reset_parameters()` itself to avoid delayed initialisation", where="03 3. Initialisation",
     source="torch/nn/modules/linear.py:115 self.reset_parameters()")
def explicit_reset_avoids_delay():
    # the call does run (right); nothing was delayed without it: nn.Linear initialises in its own __init__
    linear_initialises = "self.reset_parameters()" in inspect.getsource(nn.Linear.__init__)
    return "partly true" if linear_initialises else "true"


@row("2.2", "Use `torch.cuda.is_available()` instead of `param.is_cuda` to avoid the Dynamo error",
     where="03 3. Initialisation", source="torch/_dynamo/variables/tensor.py:594 def method_attr_is_cuda(")
def use_is_available():
    # there is no such error to avoid (previous rows); and the swap makes a CPU model on a GPU machine take the
    # Kaiming branch: it changes what the code means
    return verdict(in_torch("DynamoBackendError"))


@row("2.2", "A forgotten tensor gives \"Expected all tensors to be on the same device\"", where="12 3. Device mismatch",
     source="torch/_subclasses/fake_tensor.py:165 Expected all tensors to be on the same device, but found")
def same_device_message():
    if torch.cuda.is_available():
        try:
            torch.ones(2, device="cuda") * torch.ones(2)
        except RuntimeError as e:
            return verdict("Expected all tensors to be on the same device" in str(e))
        return "false"
    return verdict(in_torch("Expected all tensors to be on the same device", libraries=True))   # the C++ check


@row("2.3", "`no_grad()` and `set_grad_enabled()` differ in essence", where="01 9. `no_grad`",
     source="torch/autograd/grad_mode.py:83 torch.set_grad_enabled(False)")
def no_grad_and_set_grad_enabled_differ():
    x = torch.ones(3, requires_grad=True)
    with torch.no_grad():
        a = (x * 2, torch.is_grad_enabled())
    with torch.set_grad_enabled(False):
        b = (x * 2, torch.is_grad_enabled())
    same = a[0].grad_fn is None and b[0].grad_fn is None and a[1] == b[1] is False
    return verdict(not same)


@row("2.3", "`no_grad` disables gradients globally", where="01 9. `no_grad`",
     source="torch/autograd/grad_mode.py:22 class no_grad")
def no_grad_global():
    import threading

    seen = {}
    with torch.no_grad():
        worker = threading.Thread(target=lambda: seen.update(on=torch.is_grad_enabled()))
        worker.start()
        worker.join()
        here = torch.is_grad_enabled()
    # for every op in this thread: yes; in another thread: no
    return "partly true" if not here and seen["on"] else verdict(not seen["on"])


@row("2.3", "`no_grad` marks tensors `requires_grad=False`", where="01 9. `no_grad`",
     source="torch/autograd/grad_mode.py:83 torch.set_grad_enabled(False)")
def no_grad_marks_tensors():
    x = torch.ones(3, requires_grad=True)
    with torch.no_grad():
        flag = x.requires_grad
    return verdict(not flag)


@row("2.3", "Under `no_grad` results get no `grad_fn`; the existing graph is untouched", where="01 9. `no_grad`",
     source="torch/autograd/grad_mode.py:22 class no_grad")
def no_grad_keeps_graph():
    x = torch.ones(3, requires_grad=True)
    y = x * 2
    with torch.no_grad():
        z = y * 3
    return verdict(z.grad_fn is None and y.grad_fn is not None)


@row("2.3", "`set_grad_enabled` keeps a global counter", where="01 9. `no_grad`",
     source="torch/autograd/grad_mode.py:195 torch._C._set_grad_enabled(self.mode)")
def set_grad_enabled_counter():
    with torch.set_grad_enabled(False), torch.set_grad_enabled(False):
        with torch.set_grad_enabled(True):
            on = torch.is_grad_enabled()                 # a counter would still be at -1
    return verdict(not on)


@row("2.3", "Under `set_grad_enabled(False)` gradients are not accumulated even with `requires_grad=True`",
     where="03 4. Two independent switches", source="torch/autograd/__init__.py:402 accumulate_grad=True,")
def set_grad_enabled_stops_accumulation():
    w = torch.ones(3, requires_grad=True)
    loss = (w * w).sum()                                # recorded with grad on
    with torch.set_grad_enabled(False):
        loss.backward()                                 # backward under False still accumulates
        recorded = (w * 2).grad_fn is not None
    return "partly true" if w.grad is not None and not recorded else verdict(w.grad is None)


@row("2.3", "`set_grad_enabled(False)` temporarily overrides `x.requires_grad`", where="03 4. Two independent switches",
     source="torch/autograd/grad_mode.py:195 torch._C._set_grad_enabled(self.mode)")
def set_grad_enabled_overrides_flag():
    x = torch.ones(3, requires_grad=True)
    with torch.set_grad_enabled(False):
        flag = x.requires_grad
    return verdict(not flag)


@row("2.3", "Under `no_grad` the output keeps a reference to `x`, which cannot be freed (\"method 1, wrong usage\")",
     where="01 9. `no_grad`", source="torch/autograd/grad_mode.py:22 class no_grad")
def no_grad_keeps_input():
    model = nn.Sequential(nn.Linear(16, 8), nn.ReLU(), nn.Linear(8, 2))
    x = torch.randn(4, 16, requires_grad=True)
    alive = weakref.ref(x)
    with torch.no_grad():
        out = model(x)
    del x
    return verdict(alive() is not None and out is not None)


@row("2.3", "`no_grad` and `set_grad_enabled` differ in what `torch.compile` optimises", where="01 9. `no_grad`",
     source="torch/autograd/grad_mode.py:83 torch.set_grad_enabled(False)")
def modes_differ_under_compile():
    def twice(x):
        return x * 2
    x = torch.ones(3, requires_grad=True)
    torch._dynamo.reset()
    compiled = torch.compile(twice, backend="eager")
    from torch._dynamo.utils import counters
    counters.clear()
    with torch.no_grad():
        compiled(x)
    with torch.set_grad_enabled(False):
        compiled(x)
    graphs = counters["stats"]["unique_graphs"]         # the same flag: one graph serves both
    torch._dynamo.reset()
    return verdict(graphs != 1)


@row("2.3", "`torch.compile` warns about such leaks through \"GraphGuard\"", where="12 10. Messages the article quotes",
     source='absent "GraphGuard"')
def graphguard_warning():
    return verdict(in_torch("GraphGuard", whole_word=True) or in_torch("GraphGuard", libraries=True))
