"""Article §4.1-§4.4: constants and buffers, silent fallback, DDP with torch.compile, and memory."""
from __future__ import annotations

import contextlib
import inspect
import logging
import os
import socket
import tempfile
import warnings
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from claims.probes import NotApplicable, in_torch, needs, row, verdict


class _Masked(nn.Module):                         # the article's §4.1 BadModel, with a layer to train
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(3, 2)
        self.mask = torch.tensor([1.0, 0.0, 1.0])    # "problem: requires_grad=False not given"

    def forward(self, x):
        return self.linear(x * self.mask)


def _compiles(fn, *args, backend="aot_eager", fullgraph=True) -> bool:
    torch._dynamo.reset()
    try:
        torch.compile(fn, backend=backend, fullgraph=fullgraph)(*args)
        return True
    except Exception:  # noqa: BLE001 - any failure to compile counts
        return False
    finally:
        torch._dynamo.reset()


@row("4.1", "A plain `torch.tensor` mask makes `torch.compile` raise \"Cannot insert a Tensor that requires grad as a "
     "constant\"", where="03 2. Registration",
     source="torch/_dynamo/variables/builder.py:3076 tensor_proxy = self.tx.output.root_tracer.create_graph_input(")
def mask_breaks_compile():
    return verdict(not _compiles(_Masked(), torch.rand(4, 3)))


@row("4.1", "That error's root cause is `torch.compile`'s stricter definition of constant tensors",
     where="03 2. Registration", source='absent "Cannot insert a Tensor that requires grad as a constant"')
def root_cause_is_compile():
    # the message is TorchScript's (a string of its C++ library, in no Python file), raised by torch.jit.trace
    message = "Cannot insert a Tensor that requires grad as a constant"
    return verdict(in_torch(message) or not in_torch(message, libraries=True))


@row("4.1", "The mask takes part in the graph as a trainable parameter", where="03 2. Registration",
     source="torch/nn/modules/module.py:1986 if isinstance(value, Parameter):")
def mask_is_a_parameter():
    model = _Masked()
    return verdict(model.mask.requires_grad or any(p is model.mask for p in model.parameters()))


@row("4.1", "Fix 1: add `requires_grad=False` to the mask", where="03 2. Registration",
     source="torch/_refs/__init__.py:7162 pin_memory=False, requires_grad=False):")
def fix_requires_grad_false():
    # the fix sets what torch.tensor already gives, so it changes nothing (and there was no error to fix)
    return verdict(torch.tensor([1.0, 0.0, 1.0]).requires_grad)


@row("4.1", "Fix 2: register the mask with `self.register_buffer('mask', ...)`", where="03 2. Registration",
     source="torch/nn/modules/module.py:1036 self._buffers[key] = fn(buf)")
def fix_register_buffer():
    class Buffered(_Masked):
        def __init__(self):
            super().__init__()
            del self.mask
            self.register_buffer("mask", torch.tensor([1.0, 0.0, 1.0]))
    moved = Buffered().to("meta")
    return _buffer_fix_verdict(buffer_compiles=_compiles(Buffered(), torch.rand(4, 3)),
                               buffer_moves=moved.mask.is_meta and "mask" in moved.state_dict(),
                               plain_compiles=_compiles(_Masked(), torch.rand(4, 3)))


def _buffer_fix_verdict(buffer_compiles: bool, buffer_moves: bool, plain_compiles: bool) -> str:
    """A fix of the compile error (the plain mask fails, the buffer compiles) and the right home for a mask; or only
    the right home, when the plain mask compiled anyway."""
    if not (buffer_compiles and buffer_moves):
        return "false"
    return "partly true" if plain_compiles else "true"


@row("4.1", "Buffers are not in `parameters()` and move with `.to(device)`", where="03 2. Registration",
     source="torch/nn/modules/module.py:528 def register_buffer")
def buffers_move():
    model = nn.Linear(3, 2)
    model.register_buffer("mask", torch.ones(3))
    model.to("meta")
    return verdict(model.mask.is_meta and all(p is not model.mask for p in model.parameters()))


@row("4.1", "`torch.compile` treats buffers as immutable constants", where="03 2. Registration",
     source="torch/_dynamo/variables/builder.py:3076 tensor_proxy = self.tx.output.root_tracer.create_graph_input(")
def buffers_are_constants():
    model = nn.Module()
    model.register_buffer("offset", torch.zeros(3))
    model.forward = lambda x: x + model.offset
    torch._dynamo.reset()
    compiled = torch.compile(model.forward, backend="eager")
    first = compiled(torch.zeros(3)).clone()
    model.offset.fill_(1.0)
    second = compiled(torch.zeros(3))
    torch._dynamo.reset()
    return verdict(torch.equal(first, second))


@row("4.1", "Fix 3: `torch.compile(model, dynamic_shapes={...}, disable=True)` excludes the model from compilation",
     where="03 2. Registration", source="torch/_dynamo/eval_frame.py:1861 return _NullDecorator()",
     changed="2.14: torch.compile gained an experimental dynamic_shapes argument "
             "(https://github.com/pytorch/pytorch/pull/187010)")
def fix_disable():
    model = _Masked()
    try:
        return verdict(torch.compile(model, dynamic_shapes={}, disable=True) is model)
    except TypeError:                     # no such argument: the line itself fails
        return "false"


@row("4.2", "Compilation can fall back to interpretation for various reasons", where="05 7. \"Silent fallback\"",
     source="torch/_dynamo/config.py:276 suppress_errors = bool(")
def falls_back():
    from torch._dynamo.utils import counters

    def with_print(x):
        print("", end="")
        return x * 2
    torch._dynamo.reset()
    counters.clear()
    torch.compile(with_print, backend="eager")(torch.ones(2))
    broke = sum(counters["graph_break"].values()) > 0           # the print runs in Python, around the graphs...
    torch._dynamo.reset()
    # ...which counters, explain and logs show; "for various reasons", unseen, is what is not right
    return "partly true" if broke and not torch._dynamo.config.suppress_errors else verdict(broke)


@row("4.2", "`torch._inductor.config.debug` and `trace.enabled` exist", where="05 6. Inside inductor",
     source="torch/_inductor/config.py:2870 class trace")
def debug_options_exist():
    config = torch._inductor.config
    return verdict(hasattr(config, "debug") and hasattr(config.trace, "enabled"))


@row("4.2", "With `debug` and `trace.enabled`, the kernels appear in your `TemporaryDirectory`",
     where="05 6. Inside inductor",
     source="torch/_inductor/debug.py:456 debug_dir = config.trace.debug_dir or get_debug_dir()")
def kernels_in_tmpdir():
    with tempfile.TemporaryDirectory() as elsewhere, tempfile.TemporaryDirectory() as tmpdir:
        patches = [torch._dynamo.config.patch(debug_dir_root=elsewhere),       # not the repository's folder
                   torch._inductor.config.patch(debug=True)]
        patches.append(torch._inductor.config.patch({"trace.enabled": True}))
        with contextlib.ExitStack() as stack, contextlib.redirect_stderr(open(os.devnull, "w")):
            for patch in patches:
                stack.enter_context(patch)
            logging.getLogger("torch._dynamo").setLevel(logging.WARNING)
            torch._dynamo.reset()
            torch.compile(lambda t: torch.sin(t) + torch.cos(t))(torch.randn(8))
            torch._dynamo.reset()
        logging.getLogger("torch._dynamo").setLevel(logging.NOTSET)
        return verdict(any(Path(tmpdir).iterdir()))


@row("4.2", "`logging.getLogger('torch._dynamo').setLevel(logging.DEBUG)` shows what Dynamo does",
     where="05 7. \"Silent fallback\"", source="torch/_dynamo/convert_frame.py:2056 torchdynamo start compiling")
def dynamo_debug_logging():
    logger = logging.getLogger("torch._dynamo")
    records = []
    handler = logging.Handler()
    handler.emit = records.append
    saved = logger.level, logger.handlers[:], logger.propagate
    logger.handlers, logger.propagate = [handler], False
    logger.setLevel(logging.DEBUG)
    try:
        torch._dynamo.reset()
        torch.compile(lambda t: t.sin() + 1, backend="eager")(torch.ones(3))
    finally:
        logger.setLevel(saved[0])
        logger.handlers, logger.propagate = saved[1], saved[2]
        torch._dynamo.reset()
    return verdict(sum(r.levelno == logging.DEBUG for r in records) > 0)


@row("4.2", "A `collate_fn` returning a dict makes the compiled step raise `Unsupported` and silently fall back",
     where="04 1. What a DataLoader does",
     source="torch/_dynamo/variables/builder.py:1176 istype(value, (dict, collections.defaultdict")
def dict_batch_unsupported():
    from torch.utils.data import default_collate

    head = nn.Linear(4, 2)
    batch = default_collate([{"image": torch.rand(4), "label": 1}, {"image": torch.rand(4), "label": 0}])
    return verdict(not _compiles(lambda b: F.cross_entropy(head(b["image"]), b["label"]), batch, backend="eager"))


@row("4.2", "Timing the compiled model with a `time.time()` loop measures its speedup", where="—",
     source="torch/utils/benchmark/utils/timer.py:19 torch.accelerator.synchronize()", fixed="false")
def time_time_loop():
    raise NotApplicable("needs CUDA: there the loop, without a synchronize, times kernel launches")


@contextlib.contextmanager
def _one_rank():
    """A gloo process group of one rank in this process, for DDP's checks."""
    import torch.distributed as dist

    needs(dist.is_available() and dist.is_gloo_available(), "this torch has no gloo backend")
    with tempfile.TemporaryDirectory() as tmp:
        dist.init_process_group("gloo", init_method=f"file://{tmp}/rendezvous", rank=0, world_size=1)
        try:
            yield
        finally:
            dist.destroy_process_group()


class _TwoHeads(nn.Module):
    def __init__(self):
        super().__init__()
        self.body, self.head, self.spare, self.dropout = nn.Linear(8, 8), nn.Linear(8, 2), nn.Linear(8, 2), nn.Dropout(0.5)

    def forward(self, x):
        return self.head(self.dropout(torch.relu(self.body(x))))        # `spare` never used


def _steps(model, steps=3) -> str:
    optimizer = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.1)
    for _step in range(steps):
        optimizer.zero_grad()
        try:
            model(torch.randn(4, 8)).sum().backward()
        except RuntimeError as e:
            return str(e)
        optimizer.step()
    return "ok"


@row("4.3", "`torch.compile(DDP(model))` is the supported, recommended order", where="07 7. `torch.compile` with DDP",
     source="torch/nn/parallel/distributed.py:1689 def _get_active_ddp_module")
def compile_ddp_recommended():
    from torch.nn.parallel import DistributedDataParallel as DDP

    with _one_rank(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch._dynamo.reset()
        outcome = _steps(torch.compile(DDP(nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 2))), backend="eager"))
        torch._dynamo.reset()
    # supported: it trains; recommended: only the documentation says so (the other order works as well)
    return "partly true" if outcome == "ok" else "false"


@row("4.3", "`DDP(torch.compile(model))` raises \"DDP does not support compiled modules\"",
     where="07 7. `torch.compile` with DDP", source='absent "DDP does not support compiled modules"')
def ddp_of_compiled_raises():
    from torch.nn.parallel import DistributedDataParallel as DDP

    with _one_rank(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch._dynamo.reset()
        outcome = _steps(DDP(torch.compile(nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 2)), backend="eager")))
        torch._dynamo.reset()
    return verdict("does not support compiled modules" in outcome or in_torch("DDP does not support compiled modules"))


@row("4.3", "`find_unused_parameters` must be `False`", where="07 6. Parameters that get no gradient",
     source="torch/nn/parallel/distributed.py:1838 self.reducer.prepare_for_backward(list(_find_tensors(output)))")
def find_unused_must_be_false():
    from torch.nn.parallel import DistributedDataParallel as DDP

    with _one_rank():
        torch.manual_seed(0)
        with_unused = _steps(DDP(_TwoHeads(), find_unused_parameters=True))
    return verdict(with_unused != "ok")                  # True is what a model with unused parameters needs


@row("4.3", "With it `False`, unused parameters raise \"Expected to have finished reduction in the prior iteration\"",
     where="07 6. Parameters that get no gradient",
     source="torch/nn/parallel/distributed.py:1840 self.reducer.prepare_for_backward([])")
def unused_parameters_raise():
    from torch.nn.parallel import DistributedDataParallel as DDP

    with _one_rank():
        torch.manual_seed(0)
        outcome = _steps(DDP(_TwoHeads(), find_unused_parameters=False))
    return verdict("Expected to have finished reduction in the prior iteration" in outcome)


@row("4.3", "A skipped `nn.Dropout` (in eval mode) caused that error", where="07 6. Parameters that get no gradient",
     source="torch/nn/modules/dropout.py:22 def __init__(self, p: float = 0.5, inplace: bool = False)")
def dropout_caused_it():
    from torch.nn.parallel import DistributedDataParallel as DDP

    class NoSpare(_TwoHeads):
        def __init__(self):
            super().__init__()
            del self.spare
    with _one_rank():
        torch.manual_seed(0)
        model = NoSpare()
        model.dropout.eval()                             # the dropout "skipped": it has no parameters anyway
        outcome = _steps(DDP(model, find_unused_parameters=False))
    return verdict(outcome != "ok")


@row("4.3", "`find_unused_parameters=True` may break gradient synchronisation after compiling",
     where="07 6. Parameters that get no gradient",
     source="torch/nn/parallel/distributed.py:1836 if self.find_unused_parameters and not self.static_graph:",
     fixed="false")
def find_unused_breaks_compiled_sync():
    raise NotApplicable("needs two ranks to see synchronisation (notebook 07 runs them: the weights stay identical)")


@row("4.3", "The article's DDP training template (`loss = compiled_ddp(x, y)`) runs", where="07 7. `torch.compile` with DDP",
     source="torch/nn/modules/module.py:1794 return forward_call(*args, **kwargs)")
def template_runs():
    class NeuralNetwork(nn.Module):                      # its forward(self, x) takes the images only
        def __init__(self):
            super().__init__()
            self.core = nn.Linear(784, 10)

        def forward(self, x):
            return self.core(x)
    try:
        NeuralNetwork()(torch.rand(4, 784), torch.randint(0, 10, (4,)))
    except TypeError:
        return "false"
    return "true"


@row("4.3", "Under torchrun, `init_process_group` takes rank and world size from the environment",
     where="07 8. The same training under `torchrun`", source='torch/distributed/distributed_c10d.py:2426 init_method = "env://"')
def env_init():
    import torch.distributed as dist

    needs(dist.is_available() and dist.is_gloo_available(), "this torch has no gloo backend")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {"RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        dist.init_process_group("gloo")
        found = (dist.get_rank(), dist.get_world_size())
        dist.destroy_process_group()
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return verdict(found == (0, 1))


@row("4.4", "`torch.cuda.memory_summary(device=None, abbreviated=False)`: the current device, in full",
     where="08 6. The CUDA tools", source="torch/cuda/memory.py:652 def memory_summary")
def memory_summary_defaults():
    params = inspect.signature(torch.cuda.memory_summary).parameters
    return verdict(params["device"].default is None and params["abbreviated"].default is False)


@row("4.4", "`torch.cuda.memory_summary(..., fully_detailed=True)` shows each tensor's allocation stack",
     where="08 6. The CUDA tools", source="torch/cuda/memory.py:652 def memory_summary")
def fully_detailed():
    return verdict("fully_detailed" in inspect.signature(torch.cuda.memory_summary).parameters)


@row("4.4", "`memory_summary` has rows `allocated/reserved/active/inactive bytes`", where="08 6. The CUDA tools",
     source='torch/cuda/memory.py:699 ("inactive_split_bytes", "Non-releasable memory", _format_size),')
def summary_rows():
    source = inspect.getsource(torch.cuda.memory_summary)
    keys = ("allocated_bytes", "reserved_bytes", "active_bytes", "inactive_split_bytes")
    # the statistics exist under those keys; the printed rows are named otherwise ("Non-releasable memory")
    if all(k in source for k in keys):
        return "partly true" if "Non-releasable memory" in source else "true"
    return "false"


@row("4.4", "\"Inactive\" bytes are cached but unreleased memory, a leak suspect", where="08 6. The CUDA tools",
     source='torch/cuda/memory.py:699 ("inactive_split_bytes", "Non-releasable memory", _format_size),')
def inactive_is_a_leak():
    # the statistic is the caching allocator's split blocks it cannot release (fragmentation), not a leak
    return verdict("Non-releasable memory" not in inspect.getsource(torch.cuda.memory_summary))


@row("4.4", "Reserved bytes are reserved by the CUDA driver", where="08 6. The CUDA tools",
     source="torch/cuda/memory.py:564 managed by the caching allocator")
def reserved_by_driver():
    return verdict("caching allocator" not in (torch.cuda.memory_reserved.__doc__ or ""))


@row("4.4", "GPU memory grew because `transforms.Resize` makes `torch.Size` objects that the compile cache holds",
     where="08 6. The CUDA tools", source="torch/_C/__init__.pyi:183 class Size(tuple[_int, ...]):")
def resize_sizes_leak():
    try:
        from torchvision import transforms
    except ImportError:
        raise NotApplicable("torchvision is not installed here") from None
    from torch._dynamo.utils import counters

    resize = transforms.Resize((14, 14), antialias=True)
    torch._dynamo.reset()
    counters.clear()
    compiled = torch.compile(lambda t: resize(t), backend="eager")
    for _ in range(20):
        compiled(torch.rand(1, 28, 28))
    once = counters["stats"]["unique_graphs"] == 1
    torch._dynamo.reset()
    return verdict(not (once and issubclass(torch.Size, tuple)))     # one graph; a Size is a host-side tuple


@row("4.4", "`lambda x: F.interpolate(x.unsqueeze(0), size=..., mode='bilinear')[0]` is equivalent to `Resize`",
     where="08 6. The CUDA tools", source="https://github.com/pytorch/vision/pull/7949",
     changed="torchvision 0.17 (with torch 2.2): Resize antialiases tensors by default "
             "(https://github.com/pytorch/vision/pull/7949)")
def lambda_equals_resize():
    try:
        from torchvision import transforms
    except ImportError:
        raise NotApplicable("torchvision is not installed here") from None
    image = torch.rand(1, 28, 28, generator=torch.Generator().manual_seed(0))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")              # torchvision 0.16's "the default value of antialias" warning
        by_resize = transforms.Resize((14, 14))(image)
    by_lambda = F.interpolate(image.unsqueeze(0), size=(14, 14), mode="bilinear")[0]
    return verdict(torch.allclose(by_resize, by_lambda))
