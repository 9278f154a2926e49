"""What inductor's on-disk cache saves: where it lives, and the first call of one compile in two fresh
processes that share one new cache directory, the first finding it empty (cold) and the second reusing
what the first wrote (warm). Each process is a subprocess with a timeout, so nothing is left running;
while they compile, a notebook shows one line saying which (nbhelpers.progress).

Example:
    timing = compile_cache.time_cold_and_warm()
    timing.cold_s / timing.warm_s, timing.warm_counters     # inductor's counters say what was reused
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from nbhelpers import progress

__all__ = ["cache_dir", "CacheTiming", "time_cold_and_warm"]


def cache_dir() -> Path:
    """Where inductor keeps its on-disk caches here: $TORCHINDUCTOR_CACHE_DIR, else
    <tempdir>/torchinductor_<user>. Inductor's own function, with its side effects: it creates the
    directory and exports its choice as $TORCHINDUCTOR_CACHE_DIR (torch/_inductor/runtime/cache_dir_utils.py)."""
    from torch._inductor.runtime.cache_dir_utils import cache_dir as inductor_cache_dir

    return Path(inductor_cache_dir())


@dataclass(frozen=True)
class CacheTiming:
    """First-call seconds of the same compile in two fresh processes sharing one new cache dir."""

    cold_s: float
    warm_s: float
    cold_counters: dict
    warm_counters: dict


def time_cold_and_warm(timeout_s: float = 300.0) -> CacheTiming:
    """Compile a 784-128-10 MLP's forward with inductor in a fresh process, twice, with one new empty
    cache directory: the first process finds nothing (cold), the second reuses what the first wrote."""
    with tempfile.TemporaryDirectory(prefix="inductor-cache-") as tmp:
        env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=tmp)
        runs = [_run_probe(env, timeout_s, f"compile_cache: a fresh process compiles, {which}")
                for which in ("cold cache (1/2)", "warm cache (2/2)")]
    return CacheTiming(runs[0]["first_call_s"], runs[1]["first_call_s"], runs[0]["inductor"],
                       runs[1]["inductor"])


def _run_probe(env: dict, timeout_s: float, label: str) -> dict:
    """The probe in a fresh process, with a progress line named `label` while it runs."""
    command = [sys.executable, "-c", "from nbhelpers.compile_cache import _cache_probe; _cache_probe()"]
    try:
        done = progress.run(command, label, timeout_s, env=env)
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"the cache probe took over {timeout_s} s; raise timeout_s on a slow machine") from None
    if done.returncode != 0:
        raise RuntimeError(f"the cache probe failed (exit {done.returncode}):\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _cache_probe() -> None:
    torch.manual_seed(0)                 # a model of its own: an instrument imports no lesson module
    compiled = torch.compile(torch.nn.Sequential(torch.nn.Linear(784, 128), torch.nn.ReLU(),
                                                 torch.nn.Linear(128, 10)).eval())
    x = torch.rand(64, 784)
    start = time.perf_counter()
    with torch.no_grad():
        compiled(x)
    seconds = time.perf_counter() - start
    from torch._dynamo.utils import counters

    print(json.dumps({"first_call_s": seconds, "inductor": dict(counters["inductor"])}))
