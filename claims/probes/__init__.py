"""Probes: every claim of the myth index, checked by running it on the torch that is installed.

The notebooks prove each fact on the pinned torch (2.14.1) with every detail; a probe carries the verdict
across releases. It is the smallest code that decides the article's claim (the article's own line where it
has one), it imports nothing but torch and the standard library, and it runs on any torch from 2.1 on. It
returns the claim's verdict on this torch, "true", "false" or "partly true", or raises NotApplicable with
the reason it cannot decide here (it needs CUDA, an API this torch does not have yet, or it is history).

Each row also names where the series proves it (a notebook section), the source that decides it
(`torch/...py:LINE symbol`, or a `.pyi` stub's line for what is written in C++, checked against the installed
torch by the tests; `absent "text"`, a message no Python file of torch holds; or a pinned PyTorch URL), and,
when its verdict differs between releases, the release and the PR or release note that changed it.

    python -m claims.probes --out claims/torch-2.14.1.md     # run every probe here (make claims does it)
    python -m claims.probes --index notebooks/README.md      # write the myth index from the rows and reports
"""
from __future__ import annotations

import functools
import importlib
import re
import signal
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch

__all__ = ["VERSIONS", "NotApplicable", "Row", "ROWS", "row", "verdict", "parts", "needs", "in_torch", "run_row", "run_all",
           "SECTIONS"]

# The releases the index shows: the article's 2.1, the series' pin, the two before it and the next one.
VERSIONS = ("2.1.2", "2.12.1", "2.13.0", "2.14.1", "2.15.0")
VERDICTS = ("true", "false", "partly true")
SECTIONS = ("overview", "model", "pipeline", "training", "deployment", "pitfalls")   # modules, in article order
CLAIMS = Path(__file__).resolve().parent.parent


class NotApplicable(Exception):
    """This torch or this machine cannot decide the claim; the message says why."""


@dataclass(frozen=True)
class Row:
    section: str               # the article's section, "2.3"
    claim: str                 # what the article says, in one line
    where: str                 # "05 4. Graph breaks": notebook number and the heading that settles it; or "—"
    source: str                # "torch/__init__.py:2580 fullgraph" or a pinned https://github.com/pytorch/... URL
    probe: Callable[[], str]
    changed: str = ""          # "2.4: ... (https://github.com/pytorch/pytorch/pull/N)", when releases differ
    fixed: str = ""            # a verdict no code can decide here (history, other hardware): "false", "not checkable"


ROWS: list[Row] = []


def row(section: str, claim: str, where: str, source: str, changed: str = "", fixed: str = ""):
    """Register the decorated function as the probe of one myth-index row (rows keep definition order)."""
    def register(probe: Callable[[], str]) -> Callable[[], str]:
        ROWS.append(Row(section, claim, where, source, probe, changed, fixed))
        return probe
    return register


def verdict(holds: bool) -> str:
    """The claim's verdict from one decisive check."""
    return "true" if holds else "false"


def parts(*holds: bool) -> str:
    """The verdict of a claim made of several parts, from whether each holds: all, some or none."""
    return "true" if all(holds) else "partly true" if any(holds) else "false"


def needs(condition: bool, reason: str) -> None:
    """Raise NotApplicable(reason) unless `condition`: the probe cannot decide on this torch or machine."""
    if not condition:
        raise NotApplicable(reason)


@functools.cache
def _texts(libraries: bool) -> tuple[str, ...]:
    root = Path(torch.__file__).parent
    if libraries:                        # the C++ messages: strings in torch's own shared libraries
        names = ("libtorch_cpu.so", "libtorch_python.so", "libc10.so")   # not the GPU kernels' libraries
        return tuple((root / "lib" / n).read_bytes().decode("latin-1") for n in names if (root / "lib" / n).exists())
    testing = root / "testing"                      # test expectations quote messages torch itself never raises
    return tuple(p.read_text(errors="ignore") for p in root.rglob("*.py") if testing not in p.parents)


def in_torch(text: str, libraries: bool = False, whole_word: bool = False) -> bool:
    """Whether `text` appears in the installed torch's Python sources, torch/testing's expectations apart (or,
    libraries=True, in the strings of its main C++ libraries)."""
    pattern = re.compile(r"\b" + re.escape(text) + r"\b") if whole_word else None
    return any((pattern.search(t) if pattern else text in t) for t in _texts(libraries))


def _load() -> list[Row]:
    if not ROWS:
        for name in SECTIONS:
            importlib.import_module(f"{__name__}.{name}")
    return ROWS


def _alarm(signum, frame):
    raise TimeoutError("the probe ran for over 120 s")


def run_row(r: Row) -> tuple[str, str]:
    """(result, detail): a verdict, "n/a" with the reason, or "error" with the exception (a defect to fix)."""
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(120)
    try:
        result = r.probe()
        if result not in VERDICTS:
            return "error", f"the probe returned {result!r}"
        return result, ""
    except NotApplicable as why:
        return "n/a", str(why)
    except Exception as e:  # noqa: BLE001 - a crashing probe is reported, and the others still run
        where = traceback.extract_tb(e.__traceback__)[-1]
        return "error", f"{type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''} (line {where.lineno})"
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def run_all() -> list[tuple[Row, str, str]]:
    return [(r, *run_row(r)) for r in _load()]


def number(r: Row) -> int:
    return _load().index(r) + 1


def one_line(text: str) -> str:
    return re.sub(r"\s+", " ", text).replace("|", "\\|").strip()
