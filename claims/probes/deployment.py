"""Article §5.1-§5.3: saving compiled models, custom operators, and profiling compilation."""
from __future__ import annotations

import ctypes
import glob
import io
import os
import pickletools
import warnings
import zipfile
from pathlib import Path

import torch
from torch import nn

from claims.probes import NotApplicable, needs, row, verdict

RELEASE_2_2 = "https://github.com/pytorch/pytorch/releases/tag/v2.2.0"


def _saved(obj) -> bytes | None:
    """torch.save's bytes, or None when saving fails (2.1 could not pickle a compiled module)."""
    buffer = io.BytesIO()
    try:
        torch.save(obj, buffer)
    except Exception:  # noqa: BLE001 - a failing save is the answer
        return None
    return buffer.getvalue()


@row("5.1", "Saving the compiled model object lets a load skip recompilation", where="10 2. What saving a compiled model",
     source="torch/_dynamo/eval_frame.py:624 return (self.__class__, (self._orig_mod, self.dynamo_ctx))")
def saved_compiled_skips_recompile():
    torch._dynamo.reset()
    compiled = torch.compile(nn.Linear(4, 2), backend="eager")
    compiled(torch.ones(1, 4))
    blob = _saved({"compiled_graph": compiled})
    torch._dynamo.reset()
    if blob is None:
        return "false"                                   # not even saved
    pickled = zipfile.ZipFile(io.BytesIO(blob)).read(next(n for n in zipfile.ZipFile(io.BytesIO(blob)).namelist()
                                                          if n.endswith("data.pkl")))
    globals_ = {str(arg) for op, arg, _ in pickletools.genops(pickled) if op.name in ("GLOBAL", "STACK_GLOBAL")}
    return verdict(any("GraphModule" in g or "CompiledFunction" in g for g in globals_))


@row("5.1", "Compiled artifacts live in `~/.cache/torch_inductor/`", where="05 6. Inside inductor",
     source="torch/_inductor/runtime/cache_dir_utils.py:24 def default_cache_dir")
def cache_in_home():
    try:
        from torch._inductor.runtime.cache_dir_utils import default_cache_dir
    except ImportError:                                  # older releases: the same rule in codecache
        from torch._inductor.codecache import cache_dir as default_cache_dir
    saved = os.environ.pop("TORCHINDUCTOR_CACHE_DIR", None)
    try:
        where = Path(default_cache_dir())
    finally:
        if saved is not None:
            os.environ["TORCHINDUCTOR_CACHE_DIR"] = saved
    return verdict(where == Path.home() / ".cache" / "torch_inductor")


@row("5.1", "Load the checkpoint holding the compiled model with `torch.load(path)`",
     where="10 2. What saving a compiled model",
     source="torch/serialization.py:1481 weights_only = _default_to_weights_only(pickle_module)")
def load_compiled_checkpoint():
    torch._dynamo.reset()
    compiled = torch.compile(nn.Linear(4, 2), backend="eager")
    blob = _saved({"model_state_dict": {}, "compiled_graph": compiled})
    torch._dynamo.reset()
    if blob is None:
        return "false"
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.load(io.BytesIO(blob))                 # the default: weights_only=True since 2.6
    except Exception:  # noqa: BLE001 - the weights-only unpickler refuses it
        return "false"
    return "true"


@row("5.1", "A `state_dict`-only load must compile again on first inference", where="10 2. What saving a compiled model",
     source="torch/_inductor/config.py:109 fx_graph_cache: bool = Config(", fixed="partly true")
def state_dict_recompiles():
    raise NotApplicable("needs a second process: a new process compiles again, from inductor's on-disk cache when warm")


@row("5.1", "After a driver upgrade the compiled cache raises \"CUDA driver version is insufficient\"; clear the cache",
     where="—", source='torch/_inductor/codecache.py:344 version_info["cuda"] = torch.version.cuda')
def driver_insufficient():
    root = Path(torch.__file__).parent.parent / "nvidia"
    libraries = sorted(glob.glob(str(root / "**" / "libcudart.so.*"), recursive=True))
    needs(bool(libraries), "no CUDA runtime library in this environment")
    cudart = ctypes.CDLL(libraries[0])
    driver, runtime, devices = ctypes.c_int(), ctypes.c_int(), ctypes.c_int()
    cudart.cudaDriverGetVersion(ctypes.byref(driver))          # 0 when no driver is installed
    cudart.cudaRuntimeGetVersion(ctypes.byref(runtime))
    error = cudart.cudaGetDeviceCount(ctypes.byref(devices))    # CUDA's own start-up: no compiled code, no cache
    needs(error == _INSUFFICIENT_DRIVER, f"this driver ({driver.value}) is not older than the runtime "
          f"({runtime.value}): the message cannot be produced here")
    return _driver_verdict(driver.value, runtime.value)


_INSUFFICIENT_DRIVER = 35        # cudaErrorInsufficientDriver: "CUDA driver version is insufficient for CUDA runtime"


def _driver_verdict(driver: int, runtime: int) -> str:
    """The message came from CUDA's start-up, which reads no compiled cache: clearing one cannot fix it. Its cause is
    a driver older than the runtime (a downgrade, or no driver), unless the driver is as new as the runtime."""
    return "partly true" if driver >= runtime else "false"


def _fresh_library(name: str):
    return torch.library.Library(name, "DEF")


@row("5.2", "`torch.library.impl_abstract` registers the op to autograd", where="11 1. An operator in three registrations",
     source="torch/library.py:984 return register_fake(qualname, func, lib=lib, _stacklevel=_stacklevel)")
def impl_abstract_is_autograd():
    needs(hasattr(torch.library, "impl_abstract"), "torch.library.impl_abstract arrived in 2.2")
    lib = _fresh_library("probe_fake_grad")
    lib.define("relu(Tensor x) -> Tensor")
    lib.impl("relu", lambda x: x.clamp_min(0), "CPU")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")                   # a FutureWarning since 2.4: renamed register_fake
        torch.library.impl_abstract("probe_fake_grad::relu", lambda x: torch.empty_like(x), lib=lib)
    formula = torch._C._dispatch_has_kernel_for_dispatch_key("probe_fake_grad::relu", "Autograd")
    return verdict(formula)


@row("5.2", "`torch.library` is recommended instead of `torch.utils.cpp_extension`", where="11 3. The kernel in C++",
     source="torch/utils/cpp_extension.py:2110 def load_inline", fixed="false")
def library_replaces_cpp_extension():
    raise NotApplicable("a statement about two tools' jobs: one builds C++, the other registers operators")


@row("5.2", "`torch.library.impl_abstract` is the API that registers the shape function",
     where="11 1. An operator in three registrations", source="torch/library.py:974 was renamed to",
     changed="2.2: torch.library.impl_abstract added; 2.4: deprecated, renamed register_fake "
             "(https://github.com/pytorch/pytorch/releases/tag/v2.4.0)")
def impl_abstract_exists():
    if not hasattr(torch.library, "impl_abstract"):
        return "false"                                  # not in this release (2.1)
    lib = _fresh_library("probe_abstract")
    lib.define("relu(Tensor x) -> Tensor")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.library.impl_abstract("probe_abstract::relu", lambda x: torch.empty_like(x), lib=lib)
    return verdict(not any(issubclass(w.category, FutureWarning) for w in caught))   # deprecated since 2.4


@row("5.2", "`@torch.library.impl('mylib::custom_relu', 'cuda')` registers the CUDA kernel, called as "
     "`torch.ops.mylib.custom_relu`", where="11 1. An operator in three registrations",
     source="torch/library.py:805 def impl(",
     changed=f"2.2: torch.library.impl takes a qualified name ({RELEASE_2_2})")
def impl_decorator_registers():
    lib = _fresh_library("probe_impl")
    lib.define("custom_relu(Tensor x) -> Tensor")
    try:
        torch.library.impl("probe_impl::custom_relu", "cuda")(lambda x: x.clamp_min(0))
    except (AttributeError, TypeError):                  # 2.1: impl(lib, name, dispatch_key)
        return "false"
    return verdict(torch._C._dispatch_has_kernel_for_dispatch_key("probe_impl::custom_relu", "CUDA")
                   and hasattr(torch.ops.probe_impl, "custom_relu"))


@row("5.2", "`Library('mylib', 'DEF')` and `lib.define(...)` declare an op called as `torch.ops.mylib.custom_relu`",
     where="11 1. An operator in three registrations", source="torch/library.py:212 class Library")
def library_define():
    lib = _fresh_library("probe_define")
    lib.define("custom_relu(Tensor x) -> Tensor")
    lib.impl("custom_relu", lambda x: x.clamp_min(0), "CPU")
    return verdict(torch.equal(torch.ops.probe_define.custom_relu(torch.tensor([-1.0, 2.0])), torch.tensor([0.0, 2.0])))


@row("5.2", "`torch.compile` merges `custom_relu` into the computation graph, while old extension operators stay black "
     "boxes", where="11 2. Inside `torch.compile`", source="torch/_inductor/graph.py:1427 elif config.implicit_fallbacks:")
def compile_merges_custom_op():
    needs(hasattr(torch.library, "custom_op"), "torch.library.custom_op arrived in 2.4")
    from torch._inductor.utils import run_and_get_code

    @torch.library.custom_op("probe_compile::scaled", mutates_args=())
    def scaled(x: torch.Tensor) -> torch.Tensor:
        return x.clamp_min(0) * 3

    scaled.register_fake(lambda x: torch.empty_like(x))
    fn = lambda x: torch.sin(scaled(x * 2)) + 1        # noqa: E731
    explained = torch._dynamo.explain(fn)(torch.randn(8))
    torch._dynamo.reset()
    _, codes = run_and_get_code(torch.compile(fn), torch.randn(8))
    torch._dynamo.reset()
    in_graph = explained.graph_count == 1 and explained.graph_break_count == 0
    extern = any("torch.ops.probe_compile.scaled.default(" in code for code in codes)   # called, not fused
    return "partly true" if in_graph and extern else verdict(in_graph)


@row("5.2", "A custom op made mel-spectrograms 5.2x faster", where="—", source=RELEASE_2_2, fixed="not checkable")
def mel_speedup():
    raise NotApplicable("a number from someone else's project")


def _profile(fn, **options):
    from torch.profiler import ProfilerActivity, profile

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with profile(activities=[ProfilerActivity.CPU], **options) as prof:
            fn()
    return prof


@row("5.3", "The profiler has a `ProfilerActivity.COMPILE`", where="09 1. What the profiler can record",
     source="torch/_C/_profiler.pyi:40 class ProfilerActivity(Enum):")
def activity_compile():
    return verdict(hasattr(torch.profiler.ProfilerActivity, "COMPILE"))


@row("5.3", "Watch the profiler's `compile_time` row: over 20% means the model is too dynamic",
     where="09 6. Compilation in a profile",
     source='torch/_dynamo/utils.py:804 compile_time_record_function(f"{key} (dynamo_timed)")')
def compile_time_row():
    torch._dynamo.reset()
    compiled = torch.compile(lambda t: t.sin() + 1, backend="eager")
    keys = {e.key for e in _profile(lambda: compiled(torch.ones(3))).key_averages()}
    torch._dynamo.reset()
    return verdict(any("compile_time" in k for k in keys))


@row("5.3", "`key_averages(group_by_stack_n=5)`, with `with_stack=True`, groups the ops by your call stacks",
     where="09 4. Where in *your* code", source="torch/autograd/profiler.py:715 for entry in kineto_event.stack()")
def group_by_stack():
    layer = nn.Linear(8, 8)
    prof = _profile(lambda: layer(torch.ones(2, 8)), with_stack=True)
    stacks = [e.stack for e in prof.events() if e.name == "aten::addmm"]
    return verdict(bool(stacks) and all(stacks))


@row("5.3", "`table(sort_by=\"self_cuda_time_total\")` sorts the profile", where="09 1. What the profiler can record",
     source='torch/autograd/profiler_util.py:1262 sort_by.replace("cuda", "device")')
def sort_by_cuda_time():
    prof = _profile(lambda: nn.Linear(8, 8)(torch.ones(2, 8)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        table = prof.key_averages().table(sort_by="self_cuda_time_total", row_limit=5)
    return verdict("aten::" in table)


@row("5.3", "Use `torch.compile(dynamic_shapes=True)`", where="05 5. Dynamic shapes",
     source="torch/fx/experimental/dynamic_spec.py:747 dynamic spec expects a dict, ShapesSpec, or ParamsSpec")
def dynamic_shapes_true():
    try:
        torch.compile(lambda t: t, dynamic_shapes=True, backend="eager")
    except (TypeError, ValueError):       # no such argument (before 2.14), or a spec and not a switch (2.14)
        return "false"
    return "true"


@row("5.3", "A new `src_mask` tensor on every forward makes compilation blow up", where="05 5. Dynamic shapes",
     source="torch/_dynamo/variables/builder.py:3110 guard_type = GuardBuilder.TENSOR_MATCH")
def new_mask_recompiles():
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    compiled = torch.compile(lambda x, mask: x + mask, backend="eager")
    for _ in range(5):
        compiled(torch.ones(4, 4), torch.triu(torch.full((4, 4), float("-inf")), diagonal=1))   # a new tensor each time
    graphs = counters["stats"]["unique_graphs"]
    torch._dynamo.reset()
    return verdict(graphs > 1)


@row("5.3", "`torch.triu(torch.full((n, n), -inf), diagonal=1)` is the causal mask", where="—",
     source="torch/nn/modules/transformer.py:302 def generate_square_subsequent_mask")
def causal_mask():
    n = 16
    ours = torch.triu(torch.full((n, n), float("-inf")), diagonal=1)
    return verdict(torch.equal(ours, nn.Transformer.generate_square_subsequent_mask(n)))


@row("5.3", "Compile time fell from 12 s to 0.8 s, first-response latency by 93%", where="—", source=RELEASE_2_2,
     fixed="not checkable")
def compile_time_fell():
    raise NotApplicable("numbers from someone else's model")


@row("5.3", "Keep the mask as a plain tensor attribute (`self.max_mask = ....cuda()`)", where="03 2. Registration",
     source="torch/nn/modules/module.py:2079 super().__setattr__(name, value)")
def mask_as_attribute():
    class Encoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = nn.Linear(4, 4)
            self.max_mask = torch.triu(torch.full((4, 4), float("-inf")), diagonal=1)
    model = Encoder().to("meta")
    # left behind by .to() and missing from state_dict: a register_buffer(persistent=False) is the fix
    return verdict(model.max_mask.is_meta and "max_mask" in model.state_dict())
