"""What torch.compile and torch.export make of the diagnosed model, as findings: each graph break (costing the
share of the forward's ops it cuts off), a function compiled again for each batch size or for a value, and each
export that fails. Each is placed at the learner's line Dynamo names, with the fix as code.

Example:
    found = compile_findings.compiled(report, tracker, budget)
    [(f.kind, f.where) for f in found]       # [('graph-break', 'model.py:12: if h.mean().item() > 0.5:'), ...]
"""
from __future__ import annotations

import re
from collections import Counter

from nbhelpers.diagnosis import fixes
from nbhelpers.diagnosis.rank import Budget, Cost, Finding

__all__: list[str] = []      # compiled, exported: findings'


def _placed(places: dict[str, str], text: str) -> str:
    """A line of source as `file:line: text` when the step ran it (Dynamo's reports keep the text only)."""
    return f"{places[text]}: {text}" if text in places else text


def compiled(report, tracker, budget: Budget) -> list[Finding]:
    """The graph breaks of a compile_lens report, and its recompiles on a size (more than the one that makes the
    size dynamic) or on a value."""
    if report is None:
        return []
    places = {e.frame.text: e.frame.place for e in (tracker.events if tracker else ()) if e.frame}
    found = [_graph_break(b, tracker, budget) for b in report.breaks]
    by_function: dict[str, list] = {}
    for e in report.entries:
        by_function.setdefault(e.function, []).append(e)
    for function, entries in by_function.items():
        # each recompile's first failed guard is the newest entry's: a size, or a value Python tested
        recompiles = [e for e in entries[1:] if e.failed]
        on_size = [e for e in recompiles if "size mismatch" in e.failed[0]]
        on_value = [e for e in recompiles if "size mismatch" not in e.failed[0]]
        if len(on_size) > 1:           # the first recompile makes the changed size dynamic; more is a problem
            last = on_size[-1]
            where = _placed(places, _growing_line(report, entries[entries.index(last) - 1].id, last.id))
            found.append(Finding("recompile", f"{function} compiled {len(on_size) + 1} times for 4 batch sizes",
                                 _recompile_evidence(last.failed[0]) + _compile_time(last, budget), where,
                                 fixes.recompile(where, last.failed[0]), _compile_cost(last, budget)))
        if on_value:
            found.append(_value_recompile(function, on_value[-1], report.breaks, budget))
    return found


def _value_recompile(function: str, entry, breaks, budget: Budget) -> Finding:
    """A recompile on a value, not a size. In the code after a graph break (Dynamo's resume function, named for the
    break's line) `___stackN` is what the break handed back to Python, an `.item()` result: the branch on it compiles
    that code again when it goes the other way. The break is the cause, so the finding sits at the break's line."""
    at = re.fullmatch(r"torch_dynamo_resume_in_\w+_at_(\d+)", function)
    cause = next((b for b in breaks if at and b.place.endswith(f":{at.group(1)}")), None)
    where = f"{cause.place}: {cause.line}" if cause else ""
    said = (f"the code after the graph break at {cause.place} was compiled again: a guard on the value the break "
            f"handed back to Python failed ({entry.failed[0]}), not a guard on a size" if cause else
            f"{function} was compiled again: a guard on a value failed ({entry.failed[0]}), not a guard on a size")
    fix = fixes.graph_break(cause.line, cause.gb_type, cause.hints) if cause else \
        "torch.compile(model, dynamic=True)  # or pass the value as a tensor: Dynamo guards a Python number it tests"
    return Finding("recompile", f"{function} compiled again for a value", said + _compile_time(entry, budget), where,
                   fix, _compile_cost(entry, budget))


def _compile_time(entry, budget: Budget) -> str:
    return (f"; the last recompile took {entry.seconds:.2g} s (Dynamo with a backend that compiles nothing: "
            "inductor takes longer)") if budget.seconds and entry.seconds else ""


def _compile_cost(entry, budget: Budget) -> Cost | None:
    return Cost(entry.seconds, "s", budget.seconds, "the step's time") if budget.seconds and entry.seconds else None


def _graph_break(b, tracker, budget: Budget) -> Finding:
    """A graph break, costing the smaller of the two parts of the forward it splits (in ops: the compile lens runs
    no compiled kernels, so it has no compiled time to split): what can no longer fuse with the rest."""
    where = f"{b.place}: {b.line}" if b.place else b.line
    forward = [e for e in tracker.events if e.phase == "forward"] if tracker else []
    at = [k for k, e in enumerate(forward) if e.frame and e.frame.place == b.place] if b.place else []
    before = at[0] + sum(1 for _ in _run(at)) if at else 0
    cost = Cost(min(before, len(forward) - before), "ops", len(forward), "the forward's ops") if at else None
    split = f"; it splits the forward's {len(forward)} ops into {before} before it and {len(forward) - before} after" \
        if at else ""
    return Finding("graph-break", f"graph break {b.code or '(no code)'}: {b.gb_type}",
                   f"{b.explanation} (met {b.count} time(s) while compiling for 4 calls)"
                   + (f"; inside torch at {b.where}" if b.where else "") + split, where,
                   fixes.graph_break(b.line, b.gb_type, b.hints), cost)


def _run(indices: list[int]):
    """The first run of consecutive indices: the ops of one pass over a line."""
    for k, index in enumerate(indices):
        if index != indices[0] + k:
            return
        yield index


def _recompile_evidence(failed: str) -> str:
    said = f"each new batch size failed a guard: {failed}"
    if "size mismatch" not in failed:
        return said
    # torch/_dynamo/config.py automatic_dynamic_shapes: a size that changed is compiled as dynamic the next time
    return (said + "; the first recompile should have made the size dynamic, but a Python int taken from it "
            "(range(x.shape[0]), a list of that length) fixes it again")


def _growing_line(report, before: str, after: str) -> str:
    """The line whose traced ops changed in number between two compiles of one function: a Python loop over
    a size unrolls one more time at each size (Dynamo traces Python, and keeps only the tensor ops)."""
    counts = [Counter(n.line for g in report.graphs if g.entry == entry for n in g.nodes if n.line)
              for entry in (before, after)]
    changed = [line for line in counts[1] if counts[1][line] != counts[0].get(line, 0)]
    return changed[0] if changed else ""


# strict export traces with Dynamo (torch/export/_trace.py: torch._dynamo.export), which errors on every graph
# break (torch/_dynamo/eval_frame.py: "Used for fullgraph=True and export") and captures .item() as a symbol
# (capture_scalar_outputs=True, export/_trace.py); non-strict export runs the Python forward on fake tensors
_EXPORT_WHY = {True: "strict export traces the forward with Dynamo into one graph: a graph break, or a branch on "
                     "a value only the data decides, fails it",
               False: "non-strict export runs the forward on fake tensors, which carry shapes, not values: a "
                      "branch on a value fails it, as does an input or output of a type it does not know"}


def exported(results) -> list[Finding]:
    """One finding per failing export (strict, non-strict), each saying why that kind of export fails."""
    failed = {r.strict for r in results if not r.ok}
    return [Finding("export", f"torch.export ({'strict' if r.strict else 'non-strict'}) fails: {r.error}",
                    _EXPORT_WHY[r.strict], r.where, fixes.export(True in failed, False in failed))
            for r in results if not r.ok]
