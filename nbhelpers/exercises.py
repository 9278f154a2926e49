"""Checked exercises: each notebook ends with two or three, and `check` prints one PASS or FAIL line.

A judge runs the learner's answer on the installed torch, which is the oracle: expected values are
computed by torch on the judge's own inputs, never typed in. Judging runs under a forked RNG and with
grad enabled, so it neither changes the learner's random state nor depends on it, and on the CPU, so a
verdict is the same on every machine. The judges live in _judges_tensors (notebooks 00-04),
_judges_training (05-08) and _judges_tools (09-12). Reference solutions and wrong answers are in
tests/exercise_solutions.py; the tests prove each exercise can be passed and can be failed.

`check` also remembers the latest verdict of each exercise in this process, so that `progress()` can say,
for each notebook with a checked exercise, how many passed, failed and are still unanswered.

Example:
    exercises.check("01.1", shares_storage)   # prints 'PASS 01.1 · ...' or 'FAIL 01.1 · ...: why. Hint: ...'
    exercises.grade("01.1", shares_storage).passed
    exercises.progress()                      # 'notebook 01: 1 passed, 0 failed, 1 unanswered'
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

# importing the judges registers them
from nbhelpers import _judges_tensors, _judges_tools, _judges_training  # noqa: F401
from nbhelpers._judging import EXERCISES, NOT_ANSWERED, AnswerRaised, Unanswered, first_line

__all__ = ["Verdict", "grade", "check", "progress"]

_LATEST: dict[str, "Verdict"] = {}            # exercise id -> the last verdict `check` printed


@dataclass(frozen=True)
class Verdict:
    exercise: str
    title: str
    passed: bool
    problem: str      # what is wrong; '' when passed
    hint: str         # '' when passed or not answered yet

    def __str__(self) -> str:
        if self.passed:
            return f"PASS {self.exercise} · {self.title}"
        hint = f" Hint: {self.hint}" if self.hint else ""
        return f"FAIL {self.exercise} · {self.title}: {self.problem}.{hint}"


def grade(exercise: str, answer) -> Verdict:
    """Judge `answer` for `exercise` (an id such as "03.1") and return the verdict as data."""
    if exercise not in EXERCISES:
        raise ValueError(f"no exercise {exercise!r}; the exercises are {', '.join(sorted(EXERCISES))}")
    ex = EXERCISES[exercise]
    try:
        if answer is Ellipsis or (isinstance(answer, dict) and any(v is Ellipsis for v in answer.values())):
            raise Unanswered
        with torch.random.fork_rng(devices=[]), torch.enable_grad():
            torch.manual_seed(0)
            problem = ex.judge(answer)
    except Unanswered:
        problem = NOT_ANSWERED
    except AnswerRaised as e:
        problem = f"your code raised {first_line(e.args[0])}"
    # the hint comes after an attempt: printed under a blank exercise it would give the answer away
    hint = ex.hint if problem and problem != NOT_ANSWERED else ""
    return Verdict(ex.id, ex.title, problem is None, problem or "", hint)


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
