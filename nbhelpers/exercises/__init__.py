"""Checked exercises: each notebook ends with two or three, and `check` prints one PASS or FAIL line.

The public calls are `check`, `grade` and `progress`. A judge runs the learner's answer on the installed
torch, on the CPU and on inputs of its own (at least 25 for an answer that is code), so a verdict is the
same on every machine. `registry` holds the mechanism (registering a judge, grading, the kit judges are
written with); the judges are grouped by the idea they test, in tensors, autograd, modules, batches,
compiler, low_precision, profiler, failures and diagnosis, each module's docstring naming its exercises. Reference
solutions and wrong answers are in tests/exercise_solutions.py; the tests prove each exercise can be passed
and can be failed.

`check` also remembers the latest verdict of each exercise in this process, so that `progress()` can say,
for each notebook with a checked exercise, how many passed, failed and are still unanswered.

Example:
    exercises.check("01.1", shares_storage)   # prints 'PASS 01.1 · ...' or 'FAIL 01.1 · ...: why. Hint: ...'
    exercises.grade("01.1", shares_storage).passed
    exercises.progress()                      # 'notebook 01: 1 passed, 0 failed, 1 unanswered'
"""
from __future__ import annotations

# importing the judges registers them
from nbhelpers.exercises import (autograd, batches, compiler, diagnosis, failures, low_precision, modules,  # noqa: F401
                                 profiler, tensors)
from nbhelpers.exercises.registry import EXERCISES, NOT_ANSWERED, Verdict, grade

__all__ = ["Verdict", "grade", "check", "progress"]

_LATEST: dict[str, Verdict] = {}            # exercise id -> the last verdict `check` printed


def check(exercise: str, answer) -> None:
    """Judge `answer` and print the one-line verdict (PASS, or FAIL with what is wrong and a hint)."""
    verdict = grade(exercise, answer)
    _LATEST[verdict.exercise] = verdict
    print(verdict)


def progress() -> dict[str, dict[str, int]]:
    """Print and return, for each notebook with an exercise checked in this process, how many of its
    exercises passed, failed, and are unanswered (never checked, or checked blank)."""
    counts = {}
    for notebook in sorted({id.split(".")[0] for id in _LATEST}):
        ids = sorted(id for id in EXERCISES if id.startswith(notebook + "."))
        verdicts = [_LATEST.get(id) for id in ids]
        passed = sum(v is not None and v.passed for v in verdicts)
        blank = sum(v is None or v.problem == NOT_ANSWERED for v in verdicts)
        counts[notebook] = {"passed": passed, "failed": len(ids) - passed - blank, "unanswered": blank}
        print(f"notebook {notebook}: {passed} passed, {len(ids) - passed - blank} failed, {blank} unanswered")
    if not counts:
        print("no exercise checked yet in this kernel: run an exercise cell (exercises.check) first")
    return counts
