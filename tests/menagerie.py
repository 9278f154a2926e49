"""`make menagerie`: every instrument against PyTorch's own tool on real architectures (tests/menagerie_models.py).

    python -m tests.menagerie [--only NAME ...] [--jobs 2] [--timeout 900] [--again] [--out menagerie]

Per model, five lenses, each with the oracle that does not share its code:
- `trace`: autograd_graph.trace of the loss against a walk of `grad_fn.next_functions` written here (nodes,
  edges) and each node's `_saved_*` attributes read directly (bytes);
- `forward_graph`: forward_graph.trace's ops against a TorchDispatchMode that records each op's name and its
  outputs' shapes, dtypes and strides;
- `memory`: memory.track at the step's peak, category by category, against torch's MemTracker
  (memory_agreement.against_memtracker);
- `work`: profiling.work's FLOPs against FlopCounterMode's; where FlopCounterMode counts 0 (CPU attention, fused
  eval paths) profiling.work adds an analytic count, reported beside and not part of the comparison;
- `diagnose`: diagnose.run on the same call; agrees when every number in its `agreements` does, and names the
  lenses it lists in `unchecked`.

Each lens says `agrees`, `disagrees` (with the numbers), `cannot see` (the instrument's own refusal, with its
reason) or `fails` (any other exception: a bug of ours, with the error). Each model runs in a process of its own
with a timeout; results go to menagerie/report.json as they come (a rerun skips those there unless --again) and
the table to menagerie/README.md.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import traceback
import warnings
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

import torch
from torch.autograd.function import BackwardCFunction
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten
from torch.utils.flop_counter import FlopCounterMode

from nbhelpers import autograd_graph, forward_graph, memory_agreement, profiling
from nbhelpers.diagnosis import diagnose
from tests.menagerie_report import LENSES

REPO = Path(__file__).resolve().parents[1]

# An instrument's own refusals: what it says it cannot see (the README's instrument table lists them).
CANNOT_SEE = ("MemTracker cannot follow sparse tensors", "MemTracker cannot track a parameter that does not require grad")


# --- one model, in this process ------------------------------------------------------------------------------------

def measure(entry, lenses: tuple[str, ...] = LENSES) -> dict:
    """The lenses (default: every one) on one model; a dict for the report."""
    start = time.perf_counter()
    try:
        built = entry.build()
    except Exception as error:  # noqa: BLE001 - a model that does not build here is reported, not counted
        return {"name": entry.name, "family": entry.family, "builds": False, "error": _short(error)}
    row = {"name": entry.name, "family": entry.family, "builds": True, "input": built.input,
           "parameters": sum(p.numel() for p in built.model.parameters()),
           "build_s": round(time.perf_counter() - start, 2), "lenses": {}}
    for lens in lenses:
        begun = time.perf_counter()
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                fresh = (entry.build(), entry.build()) if lens == "forward_graph" else (entry.build(),)
                status, detail = globals()[f"_{lens}"](*fresh)    # each lens on a fresh model
        except Exception as error:  # noqa: BLE001 - reported per lens: a refusal it documents, or a bug
            said = _short(error)
            status, detail = ("cannot see", said) if any(c in said for c in CANNOT_SEE) else ("fails", said)
        row["lenses"][lens] = {"status": status, "detail": detail, "s": round(time.perf_counter() - begun, 2)}
    row["s"] = round(time.perf_counter() - start, 2)
    return row


def _short(error: BaseException) -> str:
    text = f"{type(error).__name__}: {error}".strip().splitlines()[0]
    where = traceback.extract_tb(error.__traceback__)
    return (text[:300] + (f" (at {Path(where[-1].filename).name}:{where[-1].lineno})" if where else ""))


def _trace(built) -> tuple[str, str]:
    loss = built.loss(built.output())
    graph = autograd_graph.trace(loss, module=built.model)
    nodes, edges = independent_walk(loss.grad_fn)
    ours = (len(graph.nodes), len(graph.edges))
    theirs = (len(nodes), edges)
    packed = {s.packed for n in graph.nodes for s in n.saved} - {None, ""}
    traced_bytes = sum(s.nbytes for n in graph.nodes for s in n.saved)
    read_bytes = sum(saved_bytes_read_directly(fn) for fn in nodes)
    detail = f"{ours[0]} nodes, {ours[1]} edges, {traced_bytes:,} saved bytes"
    if ours != theirs:
        return "disagrees", f"nodes, edges: trace {ours}, walk {theirs}"
    if traced_bytes != read_bytes and not packed:
        return "disagrees", f"saved bytes: trace {traced_bytes:,}, read directly {read_bytes:,}"
    if traced_bytes != read_bytes:
        return "agrees", detail + f" (bytes not compared: saves packed by {sorted(packed)})"
    return "agrees", detail


def independent_walk(root) -> tuple[set, int]:
    nodes, edges, stack = set(), 0, [root]
    while stack:
        fn = stack.pop()
        if fn in nodes:
            continue
        nodes.add(fn)
        for nxt, _ in fn.next_functions:
            if nxt is not None:
                edges += 1
                stack.append(nxt)
    return nodes, edges


def saved_bytes_read_directly(fn) -> int:
    total = 0
    for attr in dir(fn):
        if attr.startswith("_saved_") or (attr == "saved_tensors" and isinstance(fn, BackwardCFunction)):
            try:
                value = getattr(fn, attr)
            except RuntimeError:              # freed or packed by hooks: nothing to read
                continue
            for v in value if isinstance(value, (tuple, list)) else [value]:
                if isinstance(v, torch.Tensor):
                    total += v.numel() * v.element_size()
    wrapped = getattr(fn, "_wrapped_node", None)
    return total + (saved_bytes_read_directly(wrapped) if wrapped is not None else 0)


def _forward_graph(built, twin) -> tuple[str, str]:
    """The oracle on one model, the trace on its twin (built alike): a forward that caches on its first call
    (timm's ConViT keeps its relative indices) runs the same ops in both."""
    torch.manual_seed(0)                # the same random draws in both runs (detection's box sampling, dropout)
    with DispatchOutputs() as seen:
        built.output()
    torch.manual_seed(0)
    fg = forward_graph.trace(twin.model, *twin.args, **twin.kwargs)
    if fg.error is not None:
        return "fails", f"forward raised under the trace: {_short(fg.error)}"
    ours = [(op.op, [(o.shape, o.dtype, o.stride) for o in op.outputs]) for op in fg.ops]
    if ours != seen.ops:
        first = next((i for i, (a, b) in enumerate(zip(ours, seen.ops)) if a != b), min(len(ours), len(seen.ops)))
        return "disagrees", (f"ops: trace {len(ours)}, dispatch {len(seen.ops)}; first difference at op {first}: "
                             f"{ours[first][0] if first < len(ours) else '-'} vs "
                             f"{seen.ops[first][0] if first < len(seen.ops) else '-'}")
    return "agrees", f"{len(ours)} ops, each op's outputs' shapes, dtypes and strides"


class DispatchOutputs(TorchDispatchMode):
    """The oracle of forward_graph: each op's name and its outputs' shape, dtype and stride."""

    def __init__(self):
        super().__init__()
        self.ops = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        tensors = [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)]
        self.ops.append((str(func), [(tuple(t.shape), str(t.dtype).removeprefix("torch."),
                                      tuple(t.stride()) if t.layout == torch.strided else ()) for t in tensors]))
        return out


def _memory(built) -> tuple[str, str]:
    optimizer = torch.optim.SGD(built.model.parameters(), lr=0.01)

    def step():
        built.loss(built.output()).backward()
        optimizer.step()

    rows = memory_agreement.against_memtracker(step, built.model, optimizer)
    wrong = [r for r in rows if not r.agrees]
    if wrong:
        return "disagrees", "; ".join(f"{r.category}: MemTracker {r.memtracker:,}, ours {r.ours:,} + "
                                      f"{r.accounted:,} ({r.accounted_for})" for r in wrong)
    peak = sum(r.memtracker for r in rows)
    return "agrees", f"{len(rows)} categories at the peak, {peak:,} bytes"


def _work(built) -> tuple[str, str]:
    official = FlopCounterMode(display=False)
    torch.manual_seed(0)
    with official:
        built.loss(built.output()).backward()
    torch.manual_seed(0)
    counted = profiling.work(lambda: built.loss(built.output()).backward())
    theirs, ours = official.get_total_flops(), counted.flops - counted.added_flops
    if ours != theirs:
        return "disagrees", f"FLOPs: ours {ours:,}, FlopCounterMode {theirs:,}"
    added = f"; plus {counted.added_flops:,} counted analytically where FlopCounterMode counts 0" \
        if counted.added_flops else ""
    return "agrees", f"{theirs:,} FLOPs{added}"


def _diagnose(built) -> tuple[str, str]:
    d = diagnose.run(built.model, args=built.args, kwargs=built.kwargs, target=built.target, loss_fn=built.loss_fn)
    wrong = [a for a in d.agreements if not a.agrees]
    calls = sum(d.forward_calls.values())
    top = d.findings[0].title if d.findings else "no finding"
    slowest = sorted(d.seconds.items(), key=lambda kv: -kv[1])[:3]
    said = (f"{len(d.agreements)} agreements ({sum(a.independent for a in d.agreements)} measured apart), "
            f"{calls} forward calls; slowest lenses: "
            + ", ".join(f"{name} {s:.1f} s" for name, s in slowest) + f"; top finding: {top}")
    if d.unchecked:
        said += "; cannot see: " + "; ".join(d.unchecked)
    if wrong:
        return "disagrees", "; ".join(f"{a.name}: ours {a.ours:,}, {a.tool} {a.theirs:,}" for a in wrong) + \
            " | " + said
    if d.unchecked:
        return "cannot see", said
    return "agrees", said


# --- many models, one process each -----------------------------------------------------------------------------

def _child(name: str, lenses: tuple[str, ...]) -> None:
    from tests import menagerie_models
    print(json.dumps(measure(menagerie_models.by_name()[name], lenses)))


_CHILDREN: set[subprocess.Popen] = set()       # running now: killed with the run (_stop)


def _run_one(name: str, timeout: float, threads: int, lenses: tuple[str, ...]) -> dict:
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "PYTHONWARNINGS": "ignore"}
    start = time.perf_counter()
    with subprocess.Popen([sys.executable, "-m", "tests.menagerie", "--child", name, "--lenses", *lenses],
                          cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as child:
        _CHILDREN.add(child)
        try:
            out, err = child.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            child.kill()
            child.communicate()
            return {"name": name, "builds": True, "timed_out": True, "s": round(time.perf_counter() - start, 1),
                    "error": f"no result in {timeout:.0f} s (killed)"}
        finally:
            _CHILDREN.discard(child)
    lines = [line for line in out.splitlines() if line.startswith("{")]
    if child.returncode != 0 or not lines:
        tail = (err.strip().splitlines() or ["(no output)"])[-1][:300]
        return {"name": name, "builds": True, "crashed": True, "error": f"exit {child.returncode}: {tail}"}
    return json.loads(lines[-1])


def _missing(row: dict | None, lenses: tuple[str, ...]) -> bool:
    """Whether a model still needs a run for `lenses`: not in the report, or a lens of them not run on it."""
    return row is None or (row.get("builds") and not row.get("timed_out") and not row.get("crashed")
                           and any(lens not in row["lenses"] for lens in lenses))


def _merged(old: dict | None, new: dict, lenses: tuple[str, ...]) -> dict:
    """A run of some lenses (--lenses) on a model already in the report: its other lenses' results are kept, and
    a run that timed out or crashed is that lens's failure, not the model's; the time is the sum of its parts."""
    if old is None or not old.get("builds") or old.get("timed_out") or old.get("crashed") or set(lenses) >= set(LENSES):
        return new
    row = {**old, "lenses": dict(old["lenses"])}
    if new.get("timed_out") or new.get("crashed"):
        row["lenses"].update({lens: {"status": "fails", "detail": new["error"], "s": new.get("s", 0.0)}
                              for lens in lenses})
    elif new.get("builds"):
        row["lenses"].update(new["lenses"])
    row["s"] = round(row["build_s"] + sum(lens["s"] for lens in row["lenses"].values()), 2)
    return row


def _stop(signum, frame) -> None:
    """Ctrl-C or a kill: no model process outlives the run; the report already holds every finished model."""
    for child in list(_CHILDREN):
        child.kill()
    print(f"menagerie: stopped by signal {signum}; the report holds every model finished so far", file=sys.stderr)
    os._exit(128 + signum)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.menagerie", description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="*", help="these models (names as in the report)")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per model")
    parser.add_argument("--again", action="store_true", help="rerun models already in the report")
    parser.add_argument("--out", type=Path, default=REPO / "menagerie")
    parser.add_argument("--lenses", nargs="+", choices=LENSES, default=list(LENSES),
                        help="these lenses only (the report says 'not run' for the others)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        _child(args.child, tuple(args.lenses))
        return 0
    from tests import menagerie_models, menagerie_report
    if not menagerie_models.extras_installed():
        print("menagerie: timm and transformers are missing; install the extra: "
              ".venv/bin/pip install -e '.[models]' (make menagerie does)", file=sys.stderr)
        return 2
    names = [e.name for e in menagerie_models.entries()]
    unknown = sorted(set(args.only or ()) - set(names))
    if unknown:
        print(f"menagerie: no model named {unknown}; names look like {names[0]!r}, {names[-1]!r}", file=sys.stderr)
        return 2
    report = menagerie_report.load(args.out)
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, _stop)
    lenses = tuple(args.lenses)
    todo = [n for n in (args.only or names) if args.again or _missing(report.get(n), lenses)]
    threads = max(1, (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 2) // args.jobs)
    print(f"menagerie: {len(todo)} models to run ({len(report)} in the report), {args.jobs} at a time", flush=True)
    with ThreadPoolExecutor(args.jobs) as pool:
        running = [pool.submit(_run_one, name, args.timeout, threads, lenses) for name in todo]
        for i, done in enumerate(as_completed(running), 1):
            row = done.result()
            report[row["name"]] = _merged(report.get(row["name"]), row, lenses)
            menagerie_report.save(report, args.out, names)
            print(f"[{i}/{len(todo)}] {menagerie_report.one_line(row)}", flush=True)
    return 0


if __name__ == "__main__":
    with contextlib.suppress(BrokenPipeError):
        sys.exit(main())
