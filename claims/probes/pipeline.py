"""Article §3.1-§3.4: installing, the data pipeline, compiling the model, and mixed precision."""
from __future__ import annotations

import gzip
import inspect
import os
import platform
import sys
import warnings
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, Dataset

from claims.probes import NotApplicable, needs, row, verdict

RELEASE_2_1 = "https://github.com/pytorch/pytorch/releases/tag/v2.1.0"


def _about_2_1() -> None:
    needs(torch.__version__.startswith("2.1."), "the claim is about 2.1 itself; this is another release")


def _counting_backend():
    """A Dynamo backend that counts how often the graphs it compiled are run."""
    runs = []

    def backend(gm, example_inputs):
        def run(*args):
            runs.append(1)
            return gm.forward(*args)
        return run
    return backend, runs


@row("3.1", "`pip install torch==2.1.0` installs the CPU build", where="00 1. Which torch is this?",
     source="torch/version.py:6 cuda")
def pip_installs_cpu_build():
    # PyPI's wheel is a CUDA build on Linux x86-64 (this machine), a CPU build on Windows, macOS and Linux aarch64
    needs(sys.platform == "linux" and platform.machine() == "x86_64", "PyPI's build is checked on Linux x86-64 here")
    needs("+" not in torch.__version__ or "cu" in torch.__version__, f"a build from another index: {torch.__version__}")
    return "partly true" if torch.version.cuda else "true"


@row("3.1", "`print(torch.__version__)` shows the build after a `+` (`2.1.0+cu118`)", where="00 1. Which torch is this?",
     source="torch/version.py:4 __version__")
def version_shows_build():
    version = str(torch.__version__)
    needs("+" in version, f"this build reports {version}, without a local label")
    return verdict(version.split("+")[1].startswith(("cu", "cpu", "rocm", "xpu")))


@row("3.1", "2.1 ships several CUDA builds (cu118, cu121)", where="—", source=RELEASE_2_1, fixed="true")
def several_cuda_builds():
    raise NotApplicable("history: 2.1.0's release notes and its wheel index list cu118 and cu121 builds")


@row("3.1", "Install with `pip install torch==2.1.0+cu118 torchvision==0.16.0+cu118 torchaudio==2.1.0+cu118 -f "
     "https://download.pytorch.org/whl/torch_stable.html`", where="00 1. Which torch is this?",
     source=RELEASE_2_1, fixed="not checkable")
def install_command():
    raise NotApplicable("needs the network and PyTorch's own index")


@row("3.1", "torchvision 0.16.0 and torchaudio 2.1.0 are 2.1.0's matching companions", where="—",
     source="https://github.com/pytorch/vision/tree/v0.16.0#installation")
def companions():
    _about_2_1()
    try:
        import torchvision
    except ImportError:
        raise NotApplicable("torchvision is not installed here") from None
    boxes = torch.tensor([[0.0, 0.0, 1.0, 1.0], [0.0, 0.0, 1.0, 1.0]])
    kept = torchvision.ops.nms(boxes, torch.tensor([1.0, 0.5]), 0.5)          # its C++ ops load against this torch
    return verdict(torchvision.__version__.startswith("0.16") and kept.tolist() == [0])


@row("3.1", "`nvidia-smi | grep \"CUDA Version\"` verifies the CUDA version to install", where="—",
     source="torch/version.py:6 cuda", fixed="not checkable")
def nvidia_smi_version():
    raise NotApplicable("needs an NVIDIA driver (it prints the newest CUDA the driver supports, not an installed one)")


@row("3.1", "With the wrong build `torch.compile` silently falls back to interpretation",
     where="00 4. `torch.compile` on a CPU",
     source="torch/_dynamo/config.py:276 suppress_errors = bool(")
def wrong_build_falls_back():
    from torch._inductor.utils import run_and_get_code

    torch._dynamo.reset()
    compiled = torch.compile(lambda t: torch.sin(t) + torch.cos(t))
    out, codes = run_and_get_code(compiled, torch.randn(64))
    torch._dynamo.reset()
    generated = any("extern \"C\"" in code or "def call(" in code for code in codes)
    return verdict(not generated and not torch._dynamo.config.suppress_errors)


@row("3.1", "The first compiled call only compiles; the second runs the optimised code",
     where="00 4. `torch.compile` on a CPU", source="torch/_dynamo/eval_frame.py:1261 result = fn(*args, **kwargs)")
def first_call_only_compiles():
    backend, runs = _counting_backend()
    torch._dynamo.reset()
    torch.compile(lambda t: t.sin() + 1, backend=backend)(torch.ones(3))
    torch._dynamo.reset()
    return verdict(not runs)


@row("3.1", "`list_backends()` must contain `aot_eager`; an empty list means a CUDA driver problem",
     where="05 1. What this torch offers", source="torch/_dynamo/backends/registry.py:146 def list_backends")
def list_backends_has_aot_eager():
    return verdict("aot_eager" in torch._dynamo.list_backends())


@row("3.1", "With the CPU build `torch.compile` fell back to the inductor backend", where="00 4. `torch.compile` on a CPU",
     source='torch/_dynamo/backends/registry.py:84 _default_backend: str | CompilerFn = "inductor"')
def falls_back_to_inductor():
    default = inspect.signature(torch.compile).parameters["backend"].default
    if default is None:                                    # later releases: the registry names the default
        from torch._dynamo.backends.registry import get_default_backend
        default = get_default_backend()
    return verdict(default != "inductor")                  # inductor is the default everywhere, not a fallback


@row("3.1", "The wrong build runs 6x slower than expected", where="—", source=RELEASE_2_1, fixed="not checkable")
def six_times_slower():
    raise NotApplicable("a number from someone else's machine")


@row("3.1", "cu118 needs NVIDIA driver >= 525.60.13", where="—",
     source="https://docs.nvidia.com/cuda/cuda-toolkit-release-notes/index.html", fixed="not checkable")
def driver_version():
    raise NotApplicable("needs an NVIDIA driver and CUDA 11.8's tables")


class _Pids(Dataset):
    """Returns the pid of the process that reads it; records where `__len__` ran."""

    len_calls: list[int] = []

    def __len__(self):
        type(self).len_calls.append(os.getpid())
        return 4

    def __getitem__(self, i):
        return os.getpid()


@row("3.2", "2.1 made a major optimisation to `num_workers`: with `num_workers > 0`, `persistent_workers=True` is the "
     "default", where="04 3. Defaults", source="torch/utils/data/dataloader.py:272 persistent_workers: bool = False,")
def persistent_by_default():
    default = inspect.signature(DataLoader).parameters["persistent_workers"].default
    return verdict(default is True or DataLoader(range(4), num_workers=1).persistent_workers)


@row("3.2", "Persistent workers require each worker process to reuse its Dataset instance", where="04 4. Inside the workers",
     source="torch/utils/data/dataloader.py:272 persistent_workers: bool = False,")
def persistent_reuse():
    loader = DataLoader(_Pids(), batch_size=4, num_workers=1, persistent_workers=True, timeout=60)
    pids = [next(iter(loader)).tolist() for _ in range(2)]      # two epochs
    del loader
    kept = pids[0] == pids[1]                                   # the same worker, with its dataset copy, reused
    required = inspect.signature(DataLoader).parameters["persistent_workers"].default is True
    return "partly true" if kept and not required else verdict(kept and required)


class _CountsPickling(Dataset):
    pickled = 0

    def __len__(self):
        return 4

    def __getitem__(self, i):
        return i

    def __getstate__(self):
        type(self).pickled += 1
        return self.__dict__


@row("3.2", "A Dataset that loads large files in `__init__` makes memory explode when the workers start",
     where="04 4. Inside the workers",
     source="torch/utils/data/dataloader.py:1149 w = multiprocessing_context.Process(")
def workers_copy_the_dataset():
    # under spawn each worker gets a pickled copy (memory times the workers); under fork, Linux's default,
    # the workers share the parent's pages until written
    _CountsPickling.pickled = 0
    spawned = iter(DataLoader(_CountsPickling(), num_workers=2, multiprocessing_context="spawn", timeout=60))
    copies = _CountsPickling.pickled
    del spawned
    _CountsPickling.pickled = 0
    forked = iter(DataLoader(_CountsPickling(), num_workers=2, multiprocessing_context="fork", timeout=60))
    shared = _CountsPickling.pickled == 0
    del forked
    return "partly true" if copies == 2 and shared else verdict(copies == 2)


@row("3.2", "`DelayedMNIST` loads lazily, in each worker", where="04 2. Lazy loading",
     source="torch/utils/data/sampler.py:157 return len(self.data_source)")
def delayed_loads_in_workers():
    _Pids.len_calls = []
    loader = DataLoader(_Pids(), shuffle=True, num_workers=1, timeout=60)     # the sampler asks for the length
    in_main = os.getpid() in _Pids.len_calls
    del loader
    return verdict(not in_main)


@row("3.2", "`prefetch_factor=2` prefetches 2 batches", where="04 3. Defaults",
     source="torch/utils/data/dataloader.py:1277 self._prefetch_factor * self._num_workers")
def prefetch_counts_batches():
    source = inspect.getsource(torch.utils.data.dataloader._MultiProcessingDataLoaderIter)
    per_worker = "self._prefetch_factor * self._num_workers" in source
    return "partly true" if per_worker else "true"          # 2 per worker: 8 batches with 4 workers


@row("3.2", "`prefetch_factor` defaults to 2", where="04 3. Defaults",
     source="torch/utils/data/dataloader.py:271 prefetch_factor: int | None = None,")
def prefetch_default():
    default = inspect.signature(DataLoader).parameters["prefetch_factor"].default
    with_workers = DataLoader(range(4), num_workers=1).prefetch_factor
    return "partly true" if default is None and with_workers == 2 else verdict(default == 2)


@row("3.2", "`prefetch_factor` has no effect with `num_workers=0`; with `prefetch_factor=4` training hangs",
     where="04 3. Defaults", source="torch/utils/data/dataloader.py:289 prefetch_factor option could only be specified")
def prefetch_without_workers():
    try:
        DataLoader(range(4), num_workers=0, prefetch_factor=4)
    except ValueError:
        return "false"                                       # refused at once: neither ignored nor a hang
    return "true"


@row("3.2", "`pin_memory=True` speeds up GPU transfers", where="04 5. `pin_memory`",
     source="torch/utils/data/_utils/pin_memory.py:57 return data.pin_memory()", fixed="partly true")
def pin_memory_speeds_up():
    needs(torch.cuda.is_available(), "needs CUDA to time a host-to-device copy (without an accelerator nothing is pinned)")
    from torch.utils import benchmark

    host, pinned = torch.rand(512, 784), torch.rand(512, 784).pin_memory()
    times = [benchmark.Timer("t.to('cuda', non_blocking=True); torch.cuda.synchronize()",
                             globals={"t": t, "torch": torch}).blocked_autorange(min_run_time=0.3).median
             for t in (host, pinned)]
    return "partly true" if times[1] < times[0] else "false"     # faster, and only with non_blocking on a GPU


@row("3.2", "`MNIST(...).data.float() / 255.0` gives the images as floats in [0, 1]", where="04 2. Lazy loading",
     source="torch/_refs/__init__.py:1916 def true_divide(")
def mnist_float_scale():
    shipped = Path("data/t10k-images-idx3-ubyte.gz")
    needs(shipped.exists(), "run from the repository: it reads the shipped digits")
    raw = gzip.decompress(shipped.read_bytes())
    images = torch.frombuffer(bytearray(raw[16:]), dtype=torch.uint8)          # what MNIST.data holds: uint8
    scaled = images.float() / 255.0
    return verdict(scaled.dtype == torch.float32 and scaled.min() == 0 and scaled.max() == 1)


@row("3.3", "PyTorch 2.1 offers 5 compile backends", where="05 1. What this torch offers",
     source="torch/_dynamo/backends/registry.py:146 def list_backends")
def five_backends():
    _about_2_1()
    return verdict(len(torch._dynamo.list_backends()) == 5)


@row("3.3", "Inductor trains ResNet-18 2.3x faster and cudagraphs adds 1.8x", where="05 2. Three backends side by side",
     source=RELEASE_2_1, fixed="not checkable")
def resnet_speedups():
    raise NotApplicable("numbers from someone else's GPU")


@row("3.3", "Varying batch sizes need `dynamic=True`", where="05 5. Dynamic shapes",
     source="torch/_dynamo/config.py:188 automatic_dynamic_shapes = (")
def varying_batches_need_dynamic():
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    compiled = torch.compile(lambda t: t.sum(0), backend="eager")
    for batch in (64, 128, 37, 7, 64):
        compiled(torch.ones(batch, 3))
    graphs = counters["stats"]["unique_graphs"]
    torch._dynamo.reset()
    return verdict(graphs > 2)                               # the default: one recompile, then a symbolic batch


@row("3.3", "`reduce-overhead` and `max-autotune` speed a model up, as modes of inductor", where="05 3. Inductor modes",
     source="torch/_inductor/__init__.py:354 def list_mode_options")
def modes_speed_up():
    options = {mode: torch._inductor.list_mode_options(mode) for mode in ("reduce-overhead", "max-autotune")}
    cuda_graphs = options["reduce-overhead"].get("triton.cudagraphs") is True
    # named option sets of inductor (right); CUDA graphs need CUDA, and a speedup is the machine's to measure
    return "partly true" if cuda_graphs and options["max-autotune"].get("max_autotune") else "false"


@row("3.3", "`torch.compile(model, backend=..., mode=..., fullgraph=True, dynamic=True)`: these options exist, and "
     "`fullgraph=True` forces whole-graph compilation, avoiding dynamic branches", where="05 4. Graph breaks",
     source="torch/__init__.py:3282 nopython=fullgraph,")
def compile_options_exist():
    params = inspect.signature(torch.compile).parameters
    exist = {"backend", "mode", "fullgraph", "dynamic"} <= set(params)
    forced = not _compiles_whole(lambda t: (print("", end=""), t)[1])                 # a graph break is refused
    branch_avoided = _compiles_whole(lambda t: t * 2 if t.sum() > 0 else t - 1)      # a branch on the data
    return _options_verdict(exist, forced, branch_avoided)


def _compiles_whole(fn) -> bool:
    torch._dynamo.reset()
    try:
        torch.compile(fn, fullgraph=True, backend="eager")(torch.ones(2))
        return True
    except Exception:  # noqa: BLE001 - Dynamo's Unsupported or UserError, whatever its module in this release
        return False
    finally:
        torch._dynamo.reset()


def _options_verdict(exist: bool, forced: bool, branch_avoided: bool) -> str:
    """fullgraph=True turns a break into an error: a branch on the data is refused, not avoided."""
    if not (exist and forced):
        return "false"
    return "true" if branch_avoided else "partly true"


@row("3.3", "`dynamic=True` must be combined with `torch.compile`'s `dynamic_shapes`", where="05 5. Dynamic shapes",
     source="torch/_dynamo/eval_frame.py:918 cannot both be set")
def dynamic_needs_dynamic_shapes():
    try:
        torch.compile(lambda t: t, dynamic=True, dynamic_shapes={}, backend="eager")
    except (TypeError, ValueError):          # no such argument (before 2.14), or refused in combination (2.14)
        return "false"
    return "true"


@row("3.3", "`@torch.inference_mode()` as a decorator runs `infer_once` without recording autograd",
     where="01 9. `no_grad`", source="torch/autograd/grad_mode.py:213 class inference_mode(_DecoratorContextManager):")
def inference_mode_decorator():
    model = nn.Linear(4, 2)                              # its weights require grad

    @torch.inference_mode()
    def infer_once(model, x):
        return model(x)
    out = infer_once(model, torch.ones(3, 4))
    return verdict(out.is_inference() and out.grad_fn is None and not out.requires_grad and torch.is_grad_enabled())


@row("3.3", "CUDA graphs need a fixed input shape: a new shape records a new graph", where="05 7. \"Silent fallback\"",
     source="torch/_inductor/cudagraph_trees.py:457 fn = fn_cache.get(int_key)", fixed="true")
def cuda_graphs_fixed_shapes():
    raise NotApplicable("needs CUDA to record a graph")


@row("3.3", "So use `dynamic=True` to avoid re-capturing CUDA graphs", where="05 7. \"Silent fallback\"",
     source="torch/_inductor/cudagraph_trees.py:467 Recording cudagraph tree for symint key", fixed="false")
def dynamic_avoids_recapture():
    raise NotApplicable("needs CUDA to record graphs (reduce-overhead records one per distinct shape, dynamic or not)")


@row("3.3", "Capture the compiled model with `torch.cuda.graph`, without warm-up", where="05 7. \"Silent fallback\"",
     source="https://github.com/pytorch/pytorch/issues/131782", fixed="false")
def capture_without_warmup():
    raise NotApplicable("needs CUDA to capture")


@row("3.3", "`torch.cuda.CUDAGraph` and `torch.cuda.graph` record and replay CUDA work", where="05 7. \"Silent fallback\"",
     source="torch/cuda/graphs.py:691 def replay(self) -> None:", fixed="true")
def cuda_graph_api():
    needs(torch.cuda.is_available(), "needs CUDA to record and replay a graph")
    graph, static_in = torch.cuda.CUDAGraph(), torch.ones(4, device="cuda")
    warm = torch.cuda.Stream()
    warm.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(warm):
        static_in * 2                                    # warm-up on a side stream, as the documentation asks
    torch.cuda.current_stream().wait_stream(warm)
    with torch.cuda.graph(graph):
        static_out = static_in * 2                       # recorded, not run
    static_in.fill_(3.0)
    graph.replay()                                       # the recorded kernel reads the new input
    torch.cuda.synchronize()
    return verdict(torch.equal(static_out.cpu(), torch.full((4,), 6.0)))


@row("3.4", "The AMP API is `torch.cuda.amp.GradScaler()` and `torch.cuda.amp.autocast()`",
     where="06 3. Why float16 needs a gradient scaler", source="torch/cuda/amp/grad_scaler.py:18 @deprecated",
     changed="2.4: deprecated in favour of torch.amp (https://github.com/pytorch/pytorch/releases/tag/v2.4.0)")
def cuda_amp_api():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.amp.GradScaler(enabled=False)
        with torch.cuda.amp.autocast(enabled=False):
            pass
    return verdict(not any(issubclass(w.category, FutureWarning) for w in caught))


class _HalfAutocast(nn.Module):
    def __init__(self):
        super().__init__()
        self.first, self.second = nn.Linear(16, 16), nn.Linear(16, 16)

    def forward(self, x):
        h = torch.relu(self.first(x))
        with torch.autocast("cpu", enabled=False):
            return self.second(h.float())


@row("3.4", "Code generated by `torch.compile` may bypass autocast's type conversions",
     where="06 4. Autocast and `torch.compile`",
     source='torch/_functorch/config.py:343 backward_pass_autocast = "same_as_forward"')
def compile_bypasses_autocast():
    torch.manual_seed(0)
    model, x = _HalfAutocast(), torch.randn(8, 16)

    def run(net):
        for p in model.parameters():
            p.grad = None
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = net(x)
        out.float().square().sum().backward()
        return out.dtype, [p.grad.clone() for p in model.parameters()]
    eager_dtype, eager = run(model)
    torch._dynamo.reset()
    compiled_dtype, compiled = run(torch.compile(model, backend="aot_eager"))
    torch._dynamo.reset()
    forward_same = compiled_dtype == eager_dtype
    backward_same = all(torch.equal(a, b) for a, b in zip(eager, compiled))
    if forward_same and backward_same:
        return "false"
    return "partly true" if forward_same else "true"


@row("3.4", "Creating the `GradScaler` outside the compiled function is wrong", where="06 4. Autocast and `torch.compile`",
     source='torch/_dynamo/trace_rules.py:3645 "torch.amp",')
def scaler_outside_compile():
    needs("device" in inspect.signature(getattr(torch.amp, "GradScaler", object)).parameters,
          "needs torch.amp.GradScaler('cpu') (2.3+) to scale on a CPU")
    scaler = torch.amp.GradScaler("cpu")                  # made outside, as the article says not to
    loss = torch.tensor(2.0)
    torch._dynamo.reset()
    compiled = torch.compile(lambda value: scaler.scale(value) * 1, backend="eager")(loss)
    torch._dynamo.reset()
    return verdict(not torch.equal(compiled, scaler.scale(loss)))


@row("3.4", "`TrainingWrapper` runs `scaler.scale(loss).backward()` inside the compiled graph",
     where="06 4. Autocast and `torch.compile`",
     source='torch/_dynamo/variables/tensor.py:1494 gb_type="Unsupported Tensor.backward() call",')
def backward_inside_graph():
    w = torch.ones(3, requires_grad=True)
    explained = torch._dynamo.explain(lambda x: (x * w).sum().backward())(torch.ones(3))
    torch._dynamo.reset()
    return verdict(not explained.break_reasons)           # the backward() call ends the graph


@row("3.4", "Compiling the wrapper eliminates \"Found dtype Float but expected Half\", because autocast is now part "
     "of the graph", where="06 4. Autocast and `torch.compile`",
     source="torch/_decomp/decompositions.py:657 def binary_cross_entropy(")
def compile_fixes_dtype_error():
    probabilities, target = torch.rand(8).half(), torch.rand(8)

    def plain(p, t):                                     # the loss outside any autocast: float16 against float32
        return F.binary_cross_entropy(p, t)

    def wrapper(p, t):                                   # the article's wrapper: autocast inside forward
        with torch.autocast("cpu", dtype=torch.float16):
            return F.binary_cross_entropy(p, t)
    needs(_runs(_cpu_half_autocast),
          "CPU autocast in this release takes only bfloat16: the article's float16 wrapper needs CUDA here")
    try:
        plain(probabilities, target)
        raise NotApplicable("eager does not raise here: nothing to eliminate")
    except RuntimeError as e:
        needs("expected" in str(e).lower(), f"eager fails otherwise: {str(e)[:80]}")
    return _dtype_verdict(wrapper_compiled=_runs(torch.compile(wrapper), probabilities, target),
                          wrapper_eager=_runs(wrapper, probabilities, target),
                          plain_compiled=_runs(torch.compile(plain), probabilities, target))


def _cpu_half_autocast() -> None:
    with torch.autocast("cpu", dtype=torch.float16):       # 2.1 refuses float16 on the CPU
        pass


def _runs(fn, *args) -> bool:
    torch._dynamo.reset()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")             # 2.1's "CPU autocast supports only bfloat16"
            fn(*args)
        return True
    except Exception:  # noqa: BLE001 - the dtype error, raised or wrapped by Dynamo
        return False
    finally:
        torch._dynamo.reset()


def _dtype_verdict(wrapper_compiled: bool, wrapper_eager: bool, plain_compiled: bool) -> str:
    """True only when the compiled wrapper is what removes the error: not autocast alone, not compiling alone."""
    if not wrapper_compiled:
        return "false"
    return "partly true" if wrapper_eager or plain_compiled else "true"


@row("3.4", "The wrapper made AMP training 37% faster on an A100", where="06 4. Autocast and `torch.compile`",
     source=RELEASE_2_1, fixed="not checkable")
def wrapper_speedup():
    raise NotApplicable("a number from someone else's GPU")


@row("3.4", "A scaled step is `scaler.step(optimizer)` then `scaler.update()`",
     where="06 3. Why float16 needs a gradient scaler",
     source="torch/amp/grad_scaler.py:375 def step(")
def scaled_step():
    scaler = torch.cuda.amp.GradScaler(enabled=False) if not hasattr(torch.amp, "GradScaler") else \
        torch.amp.GradScaler("cpu") if "device" in inspect.signature(torch.amp.GradScaler).parameters else \
        torch.cuda.amp.GradScaler(enabled=False)
    w = torch.ones(2, requires_grad=True)
    optimizer = torch.optim.SGD([w], lr=0.1)
    scaler.scale((w * w).sum()).backward()
    scaler.step(optimizer)
    scaler.update()
    return verdict(not torch.equal(w.detach(), torch.ones(2)))
