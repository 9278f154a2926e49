"""The exercises' registry and its mechanism: judges register with `@exercise`, `grade` runs one on an
answer and returns a `Verdict`; the rest is the kit a judge is written with.

A judge takes the learner's answer and returns what is wrong with it, or None. It calls the learner's code
through `call`, so that the learner's errors become FAIL lines (`AnswerRaised`, or `Unanswered` for the
notebook's stub) while a fault in the judge itself still raises; the exceptions are the judges that must see
the learner's own exception (10.1: a failed save must raise) or hand the answer to torch (11.1: opcheck
calls the registered fake). A judge of code draws at least `INPUTS` cases from generators seeded by the
judge (`inputs`, `draw`, or `INPUTS` seeds of its own); the judges of tables (06.1, 12.1) compare the table
whole. Expected values are computed by the installed torch on the judge's own inputs, never typed in.

For judges: exercise, INPUTS, call, inputs, draw, first_disagreement, wrong_keys, ops_run, is_stub,
first_line, Unanswered, AnswerRaised. For the package's front (`nbhelpers.exercises`): EXERCISES, Exercise,
grade, Verdict, NOT_ANSWERED.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch

__all__ = ["EXERCISES", "INPUTS", "NOT_ANSWERED", "AnswerRaised", "Exercise", "Unanswered", "Verdict", "call", "draw",
           "exercise", "first_disagreement", "first_line", "grade", "inputs", "is_stub", "ops_run", "wrong_keys"]

INPUTS = 25                               # every judge checks an answer on at least this many inputs
NOT_ANSWERED = "not answered yet: replace the `...` or the `raise NotImplementedError` with your answer"
STUB_MESSAGES = ("", "your code here")     # what the notebooks' stubs raise NotImplementedError with


@dataclass(frozen=True)
class Exercise:
    id: str
    title: str
    hint: str
    judge: Callable[[Any], str | None]   # returns what is wrong with the answer, or None


EXERCISES: dict[str, Exercise] = {}


def exercise(id: str, title: str, hint: str):
    """Register the decorated judge for exercise `id` ("03.1": notebook 03's first)."""
    def register(judge):
        known = EXERCISES.get(id)
        # the same judge again is a reload of its module (importlib.reload, %autoreload), not a clash
        if known and (known.judge.__module__, known.judge.__qualname__) != (judge.__module__, judge.__qualname__):
            raise ValueError(f"exercise {id} is registered twice ({EXERCISES[id].judge.__qualname__} and "
                             f"{judge.__qualname__}): give the new one the next free id")
        EXERCISES[id] = Exercise(id, title, hint, judge)
        return judge
    return register


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
    """Judge `answer` for `exercise` (an id such as "03.1") and return the verdict as data. Judging runs under
    a forked RNG and with grad enabled, so it neither changes the learner's random state nor depends on it."""
    if not isinstance(exercise, str) or exercise not in EXERCISES:
        raise (ValueError if isinstance(exercise, str) else TypeError)(
            f"exercises.check: `exercise` must be an exercise id such as \"03.1\"; got {exercise!r}; the exercises "
            f"are {', '.join(sorted(EXERCISES))}")
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


class AnswerRaised(Exception):
    """The learner's code raised; carries the original exception."""


class Unanswered(Exception):
    """The answer is still the notebook's stub."""


def is_stub(error) -> bool:
    """The stub's own NotImplementedError (also when torch re-raised it as the cause of another error),
    not one torch raises for an unsupported call."""
    while isinstance(error, BaseException):
        if isinstance(error, NotImplementedError) and str(error) in STUB_MESSAGES:
            return True
        error = error.__cause__ or error.__context__
    return False


def call(fn, *args, **kwargs):
    """Call the learner's code, telling its exceptions apart from a fault in the judge."""
    if not callable(fn):
        raise AnswerRaised(TypeError(f"expected a function, got {type(fn).__name__}"))
    try:
        return fn(*args, **kwargs)
    except (Unanswered, AnswerRaised):
        raise
    except Exception as e:  # noqa: BLE001 - any error in the learner's code becomes a FAIL line
        raise (Unanswered() if is_stub(e) else AnswerRaised(e)) from e


def first_disagreement(answer, cases, message: str) -> str | None:
    """`cases` are (label, args, truth); describe, with `message`, the first where answer(*args) != truth."""
    for label, args, truth in cases:
        said = call(answer, *args)
        if said != truth:
            return message.format(label=label, said=said, truth=truth)
    return None


def wrong_keys(answer, keys) -> str | None:
    if isinstance(answer, dict) and set(answer) == set(keys):
        return None
    return f"answer with a dict whose keys are exactly {list(keys)}"


def first_line(e: BaseException, limit: int = 160) -> str:
    text = (str(e).strip().splitlines() or [""])[0]
    return f"{type(e).__name__}: {text[:limit]}" if text else type(e).__name__


def draw(g: torch.Generator, low: int, high: int) -> int:
    """One integer from low to high, both included, from the judge's generator."""
    return int(torch.randint(low, high + 1, (1,), generator=g))


def inputs(make, n: int = INPUTS, seed: int = 0) -> list:
    """`n` inputs from the judge's own seeded generator, `make(generator, k)` each: the same on every machine
    and in every call, and independent of the learner's random state."""
    g = torch.Generator().manual_seed(seed)
    return [make(g, k) for k in range(n)]


def ops_run(fn, *args) -> list[str]:
    """The ATen ops `fn(*args)` runs (a dispatch mode records them): an answer told to use only metadata
    must run none."""
    from torch.utils._python_dispatch import TorchDispatchMode

    ran = []

    class Recorder(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            ran.append(str(func))
            return func(*args, **(kwargs or {}))

    with Recorder():
        call(fn, *args)
    return ran
