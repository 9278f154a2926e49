"""Instruments that work as dispatch modes see the eager program only, and say so when a compiled one ran.

While a TorchDispatchMode is active, Dynamo does not compile: `ConvertFrame.__call__` skips the frame with
"non-infra torch dispatch mode present, this is not supported today in torch.compile"
(torch/_dynamo/convert_frame.py), so a `torch.compile`d module or function called inside `memory.track`,
`profiling.work` or MemTracker runs eagerly, op by op, and the numbers describe that eager program, not the
compiled one (fused kernels, no intermediate buffers). The skip is not sticky: after the block the same
compiled code runs compiled again, with no `torch.compiler.reset()`.

`warn_if_compiled` collects Dynamo's skip reasons for the block (the list `torch._dynamo.eval_frame` keeps
per thread when asked) and warns, naming the skipped functions and what to measure the compiled program with.

Example:
    with eager_only.warn_if_compiled("memory.track", "torch.profiler.profile(profile_memory=True)"):
        compiled_model(x)            # UserWarning: memory.track saw the eager program ...
"""
from __future__ import annotations

import sysconfig
import threading
import warnings
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import torch

__all__ = ["CompiledRanEagerly", "warn_if_compiled", "skipped_for_dispatch_mode", "FOR_MEMORY", "FOR_WORK"]

# what to measure a compiled program with, for the warning
FOR_MEMORY = ("torch.profiler.profile(profile_memory=True) around the compiled call (the allocator's own events), "
              "or torch.cuda.max_memory_allocated() on a GPU")
FOR_WORK = ("torch.profiler around the compiled call for its kernels' times, and regime(..., counted=...) with "
            "the eager function's Work")
_REASON = "torch dispatch mode present"          # in convert_frame.py's skip reason
_collecting = threading.local()                   # Dynamo's skip reasons are per thread too
_NOT_COMPILED_BY_THE_LEARNER = (sysconfig.get_paths()["stdlib"], str(Path(__file__).parent),
                                str(Path(torch.__file__).parent))


class CompiledRanEagerly(UserWarning):
    """A compiled function ran eagerly because an instrument's dispatch mode was active."""


def skipped_for_dispatch_mode(reasons: list[str]) -> str | None:
    """What Dynamo skipped for an active dispatch mode, from its skip reasons ("name (file:line): reason"), or
    None. Dynamo's callback is set only while compiled code is called, and every frame evaluated under it is
    skipped, the compiled function's and those it calls: a module compiled with torch.compile is entered
    through a wrapper in torch/_dynamo; a compiled function is the first skipped frame outside torch, the
    standard library and this package (else: "compiled code")."""
    skipped = [reason.split(": ", 1)[0] for reason in reasons if _REASON in reason]
    if not skipped:
        return None
    if any("/torch/_dynamo/" in where for where in skipped):
        return "a compiled module"
    for where in skipped:
        name, _, place = where.partition(" (")
        file = place.rsplit(":", 1)[0]
        if not file.startswith(_NOT_COMPILED_BY_THE_LEARNER + ("<",)):      # "<string>": generated code
            return f"{name} ({Path(file).name}:{place.rsplit(':', 1)[-1].rstrip(')')})"
    return "compiled code"


@contextmanager
def warn_if_compiled(instrument: str, alternative: str, stacklevel: int = 4) -> Iterator[None]:
    """Warn (CompiledRanEagerly) when a compiled function ran eagerly in the block because of a dispatch mode;
    `stacklevel` counts from here to the learner's line (4: a function using this block, called by them)."""
    from torch._dynamo import eval_frame

    if getattr(_collecting, "on", False):            # inside another instrument's block: that one warns, once
        yield
        return
    before, _collecting.on = eval_frame.dynamo_tls.skip_reasons, True
    eval_frame.dynamo_tls.skip_reasons = []
    try:
        yield
        skipped = skipped_for_dispatch_mode(eval_frame.dynamo_tls.skip_reasons)
    finally:
        eval_frame.dynamo_tls.skip_reasons, _collecting.on = before, False
    if skipped:
        warnings.warn(f"{instrument} saw the eager program, not the compiled one: torch.compile does not compile "
                      f"while a dispatch mode is active, so {skipped} ran op by op. To measure the compiled "
                      f"program, use {alternative}.", CompiledRanEagerly, stacklevel=stacklevel)
