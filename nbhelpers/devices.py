"""Which device to use, and what this machine can run: the one place that decides CUDA vs CPU.

One rule for every helper's `device` argument, applied by `resolve`: a device you pass is used; `None`
means the device of the inputs (tensors or modules) the helper was given, and with none, torch's default
device (the CPU, unless you chose another with `torch.set_default_device` or `with torch.device(...)`).
Only `pick_device()` ever chooses CUDA by itself.

Example:
    device = devices.pick_device()
    print(devices.banner(device))
    print(devices.render_capabilities(devices.capabilities()))
"""
from __future__ import annotations

import itertools
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import torch

__all__ = ["Capability", "pick_device", "resolve", "has_cuda", "banner", "synchronize", "capabilities",
           "render_capabilities"]

_OPENMP_PROBE = "#include <omp.h>\nint main() { return omp_get_max_threads() > 0 ? 0 : 1; }\n"


@dataclass(frozen=True)
class Capability:
    """One line of the capability report: can this machine do `name`, why, and which notebooks care."""

    name: str
    available: bool
    why: str
    needed_for: str


def has_cuda() -> bool:
    """True when this torch build has CUDA *and* a usable GPU; either alone is not enough."""
    return torch.cuda.is_available()


def pick_device() -> torch.device:
    """cuda:0 when a GPU is usable, else cpu. Notebooks call this once and pass `device` down."""
    return torch.device("cuda", 0) if has_cuda() else torch.device("cpu")


def resolve(device: torch.device | str | None = None, *inputs) -> torch.device:
    """The device a helper works on: `device` if given, else the first input's (a tensor's, or a module's
    first parameter or buffer), else torch's default device. It never picks CUDA on its own."""
    if device is not None:
        return _parse(device)
    for item in inputs:
        if isinstance(item, torch.Tensor):
            return item.device
        if isinstance(item, torch.nn.Module):
            first = next(itertools.chain(item.parameters(), item.buffers()), None)
            if first is not None:
                return first.device
    return torch.get_default_device()


def _parse(device) -> torch.device:
    """A device the caller named, checked: one torch knows, and CUDA only where this machine has it."""
    if isinstance(device, bool) or not isinstance(device, (str, torch.device, int)):
        raise TypeError(f"`device` must be a torch.device or a string such as 'cpu' or 'cuda:0'; got "
                        f"{type(device).__name__} ({device!r})")
    try:
        parsed = torch.device(device)
    except RuntimeError as error:
        raise ValueError(f"`device` {device!r} is not a device torch knows ({str(error).splitlines()[0]}); "
                         "pass 'cpu', or 'cuda' on a machine with a GPU") from None
    if parsed.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"`device` is {str(parsed)!r}, but this machine has no CUDA (torch.cuda.is_available() "
                         "is False); pass 'cpu'")
    return parsed


def banner(device: torch.device | str) -> str:
    """One line naming the torch build and the device in use. It leaves the Python version out: the
    series runs on Python 3.10-3.13, and a stored output that names one would fail on the others."""
    device = torch.device(device)
    where = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"
    return f"torch {torch.__version__} | device {device} ({where})"


def synchronize(device: torch.device | str | None = None) -> None:
    """Wait for queued GPU work on `device`; a no-op on CPU, whose ops finish before they return.

    Time GPU code only after this: CUDA kernels run asynchronously, so a timer stopped without it
    measures the launch, not the work.
    """
    device = resolve(device)
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def capabilities() -> tuple[Capability, ...]:
    """What this machine can run, each answer with its reason. Takes about a second (it compiles
    a 2-line C++ program and imports TorchDynamo)."""
    return (_cuda(), _bf16(), _dynamo(), _cxx_compiler(), _triton(), _gloo(), _nccl())


def render_capabilities(caps: tuple[Capability, ...]) -> str:
    """A plain-text table of `capabilities()` for a notebook or a terminal."""
    width = max(len(c.name) for c in caps)
    rows = [f"{'capability':<{width}}  ok   why  [needed for]"]
    for c in caps:
        rows.append(f"{c.name:<{width}}  {'yes' if c.available else 'no ':<3}  {c.why}  [{c.needed_for}]")
    return "\n".join(rows)


def _cuda() -> Capability:
    built = torch.version.cuda
    if has_cuda():
        why = f"{torch.cuda.get_device_name(0)}, {torch.cuda.device_count()} GPU(s), CUDA {built}"
    elif built:
        why = f"this torch is built with CUDA {built} but no GPU or driver is usable here"
    else:
        why = "this torch is a CPU-only build"
    return Capability("CUDA GPU", has_cuda(), why, "every CUDA cell (skipped otherwise)")


def _bf16() -> Capability:
    if has_cuda():
        ok = torch.cuda.is_bf16_supported()
        return Capability("bfloat16", ok, f"{torch.cuda.get_device_name(0)} "
                          f"{'supports' if ok else 'lacks'} bf16", "06 mixed precision")
    # ATen decides from the CPU's instruction sets (mkldnn_bf16_device_check); the criterion has changed
    # between releases, so ask it rather than restate it
    onednn = torch.ops.mkldnn._is_mkldnn_bf16_supported()
    why = (f"CPU {torch.backends.cpu.get_cpu_capability()}: bf16 runs; "
           + ("oneDNN's bf16 kernels are enabled for this CPU" if onednn
              else "oneDNN's bf16 kernels are not enabled for this CPU, so expect bf16 to be slower than fp32"))
    return Capability("bfloat16", True, why, "06 mixed precision")


def _dynamo() -> Capability:
    from torch._dynamo.eval_frame import check_if_dynamo_supported

    try:
        check_if_dynamo_supported()
    except RuntimeError as e:
        return Capability("TorchDynamo", False, str(e), "05 compile, 06, 07, 10, 11")
    # eval_frame.check_if_dynamo_supported refuses Python 3.15+ and free-threaded builds before 3.13.3
    return Capability("TorchDynamo", True, "this Python is supported (Dynamo refuses 3.15+ and free-threaded "
                      "builds before 3.13.3)", "05 compile, 06, 07, 10, 11")


def _cxx_compiler() -> Capability:
    """Inductor turns CPU graphs into C++ with OpenMP, so a compiler must build exactly that."""
    from torch._inductor.cpp_builder import get_cpp_compiler

    try:
        cxx = get_cpp_compiler()
    except Exception as e:  # noqa: BLE001 - it raises its own types when no compiler is found
        return Capability("C++ compiler (inductor)", False, f"none found: {e}", "torch.compile on CPU")
    ok, why = _compiles_openmp(cxx)
    return Capability("C++ compiler (inductor)", ok, why, "torch.compile on CPU")


def _openmp_flags(cxx: str) -> list[str]:
    """The OpenMP flags inductor itself passes (torch/_inductor/cpp_builder.py, _get_openmp_args): -fopenmp
    and libgomp on Linux; -Xclang -fopenmp and libomp's paths on macOS, whose clang refuses a bare -fopenmp."""
    from torch._inductor.cpp_builder import _get_openmp_args

    cflags, ldflags, includes, lib_dirs, libs, _ = _get_openmp_args(cxx)
    return ([f"-{f}" for f in cflags] + [f"-I{d}" for d in includes] + [f"-L{d}" for d in lib_dirs]
            + [f"-{f}" for f in ldflags] + [f"-l{lib}" for lib in libs])


def _compiles_openmp(cxx: str) -> tuple[bool, str]:
    if shutil.which(cxx) is None:
        return False, f"{cxx} is not on PATH; install g++ (Linux) or Xcode's clang (macOS)"
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp, "probe.cpp")
        src.write_text(_OPENMP_PROBE)
        try:
            run = subprocess.run([cxx, str(src), *_openmp_flags(cxx), "-o", str(Path(tmp, "probe"))],
                                 capture_output=True, text=True, timeout=60)
        except subprocess.TimeoutExpired:
            return False, f"{cxx} did not finish compiling a 2-line program within 60 s"
    if run.returncode != 0:
        return False, f"{cxx} cannot build with OpenMP: {run.stderr.strip().splitlines()[-1:]}"
    return True, f"{cxx} builds C++ with OpenMP"


def _triton() -> Capability:
    try:
        import triton  # noqa: F401  (only its presence matters)
    except ImportError:
        return Capability("Triton", False, "not installed", "torch.compile on CUDA")
    ok = has_cuda()
    why = "installed; inductor uses it for CUDA kernels" + ("" if ok else ", but there is no GPU")
    return Capability("Triton", ok, why, "torch.compile on CUDA")


def _gloo() -> Capability:
    ok = torch.distributed.is_available() and torch.distributed.is_gloo_available()
    why = "CPU collectives between processes" if ok else "this torch build has no gloo backend"
    return Capability("gloo backend", ok, why, "07 DDP on CPU")


def _nccl() -> Capability:
    built = torch.distributed.is_available() and torch.distributed.is_nccl_available()
    ok = built and has_cuda() and sys.platform == "linux"
    why = ("built in; usable with a GPU per rank" if ok else
           "built in, but needs a GPU per rank" if built else "not in this build (Linux CUDA builds only)")
    return Capability("NCCL backend", ok, why, "07 DDP on GPUs")
