"""The machinery behind `exercises`: a registry of judges, and calling the learner's code so that its
errors become FAIL lines while a fault in a judge still raises."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch

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
    def register(judge):
        EXERCISES[id] = Exercise(id, title, hint, judge)
        return judge
    return register


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
