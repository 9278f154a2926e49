"""Judges for the exercises on failure: a save that survives one (10.1), and the exception each
famous mistake raises (12.1)."""
from __future__ import annotations

import pickle
import tempfile
from pathlib import Path
from unittest import mock

import torch
from torch import nn

from nbhelpers.exercises.registry import call, exercise, first_line, inputs, wrong_keys


# notebook 10 · a save that survives an error

class _Tripwire:
    """Fails to pickle, after looking at the folder and at the old checkpoint while the save is under way."""

    def __init__(self, path: Path, seen: list):
        self.path, self.seen = path, seen

    def __reduce__(self):
        beside = sorted(p.name for p in self.path.parent.iterdir() if p != self.path)
        try:
            old = torch.load(self.path, weights_only=True)["w"].clone()
        except Exception as e:  # noqa: BLE001 - unreadable mid-save is the finding
            old = e
        self.seen.append((beside, old))
        raise pickle.PicklingError("the judge's tripwire: this object cannot be pickled")


def _holds(path: Path, w: torch.Tensor, when: str, otherwise: str) -> str | None:
    """What is wrong with the checkpoint at `path`, which should hold the weights `w`."""
    try:
        loaded = torch.load(path, weights_only=True)["w"]
    except Exception as e:  # noqa: BLE001 - any failure to read back is the finding
        return f"{when} the checkpoint is unreadable ({first_line(e, 80)})"
    return None if torch.equal(loaded, w) else f"{when}, the checkpoint {otherwise}"


@exercise("10.1", "a save that never leaves a half-written file",
          hint="torch.save to a temporary file in the same directory, then os.replace(temp, path); on an "
               "error delete the temporary file and re-raise")
def _save_atomic(answer):
    with tempfile.TemporaryDirectory() as tmp, mock.patch("nbhelpers.atomic.write_atomic") as ours, \
            mock.patch("nbhelpers.saving.write_atomic") as ours_too:
        path = Path(tmp) / "checkpoint.pt"
        for w in inputs(lambda g, k: torch.randn(1 + k % 7, generator=g)):
            call(answer, {"w": w}, path)
            if ours.called or ours_too.called:
                return "your answer used nbhelpers' own atomic write: the task is to write your own"
            if problem := _holds(path, w, "a completed save left", "did not replace the old checkpoint with the new one"):
                return problem
            seen = []
            try:
                answer({"w": torch.ones(3), "tripwire": _Tripwire(path, seen)}, path)
            except Exception:  # noqa: BLE001 - pickle's error, or the caller's own: it must reach the caller
                pass
            else:
                return "saving an object that cannot be pickled did not raise: the error must reach the caller"
            if seen and isinstance(seen[0][1], Exception):
                return f"while the save was under way the old checkpoint was unreadable ({first_line(seen[0][1], 80)})"
            if seen and not seen[0][0]:
                return ("while the save was under way no temporary file was beside the checkpoint: write it in "
                        "the same directory, so that os.replace is a rename on one file system")
            if problem := _holds(path, w, "after the failed save", "no longer holds the old weights"):
                return problem
            leftovers = sorted(p.name for p in Path(tmp).iterdir() if p != path)
            if leftovers:
                return f"files were left behind: {leftovers}"
    return None


# notebook 12 · the exception each mistake raises

def _backward_twice():
    y = (torch.ones(2, requires_grad=True) * 2).sum()
    y.backward()
    y.backward()


def _load_unsafe():
    with tempfile.TemporaryDirectory() as tmp:
        torch.save({"w": torch.ones(1), "config": nn.Linear}, Path(tmp) / "f.pt")
        torch.load(Path(tmp) / "f.pt", weights_only=True)


_SNIPPETS = {
    "backward twice": _backward_twice,
    "view of a transpose": lambda: torch.ones(2, 3).t().view(6),
    "index 5 of a 3-element tensor": lambda: torch.ones(3)[5],
    "float64 input to a float32 layer": lambda: nn.Linear(3, 2)(torch.ones(1, 3, dtype=torch.float64)),
    "prefetch_factor without workers": lambda: torch.utils.data.DataLoader(range(4), prefetch_factor=2),
    "weights_only load of a class": _load_unsafe,
}


@exercise("12.1", "name the exception",
          hint="run each snippet inside try/except Exception as e and look at type(e): the casebook's "
               "errors are not all RuntimeError")
def _name_exceptions(answer):
    truth = {name: _raised_type(snippet) for name, snippet in _SNIPPETS.items()}
    if problem := wrong_keys(answer, truth):
        return problem
    wrong = [name for name in truth if answer[name] is not truth[name]]
    if not wrong:
        return None
    said = answer[wrong[0]]
    if isinstance(said, str):
        return f"{wrong[0]!r}: you gave the string {said!r}: give the exception class itself, such as RuntimeError"
    return f"{wrong[0]!r}: you said {getattr(said, '__name__', repr(said))}, it raises {truth[wrong[0]].__name__}"


def _raised_type(snippet) -> type:
    try:
        snippet()
    except Exception as e:  # noqa: BLE001 - the raised type is the answer
        return type(e)
    raise AssertionError(f"{snippet} no longer raises on this torch: the exercise needs a new snippet")
