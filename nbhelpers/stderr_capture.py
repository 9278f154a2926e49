"""Capture what C++ code and child processes write to file descriptor 2, which sys.stderr never sees.

A Jupyter kernel forwards fd 2 into the cell's output, so a DataLoader worker's dying traceback or a
library's log line lands in the notebook with its pid and paths. Capturing it lets a cell assert on it.

Example:
    with stderr_capture.without_kineto_lines(), torch.profiler.profile() as prof: ...
    with stderr_capture.capture_stderr() as captured:
        os.system("echo from a child >&2")
    assert captured.text == "from a child\\n"
"""
from __future__ import annotations

import os
import re
import sys
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator

__all__ = ["CapturedText", "capture_stderr", "without_kineto_lines"]

# the profiler engine's own start/stop lines, e.g. "USDT:2026-11-30 21:37:00 6282:6282 File.cpp:39] ..."
_KINETO_LINE = re.compile(r"^(USDT|STAGE|ERROR|WARNING|INFO):\d{4}-\d\d-\d\d [\d:]+ \d+:\d+ \S+\] ")


# colour codes: a Jupyter kernel sets FORCE_COLOR=1 for its children (ipykernel's zmqshell.init_environment),
# and from Python 3.13 on a child's traceback then comes in colour
_ANSI_CODES = re.compile(r"\x1b\[[0-9;]*m")


@dataclass
class CapturedText:
    """Filled when the `capture_stderr` block exits (also when it raises), without colour codes: the
    same text whichever Python wrote it."""

    text: str = ""


@contextmanager
def capture_stderr() -> Iterator[CapturedText]:
    """Redirect fd 2, inherited by child processes started inside the block, into `.text`."""
    captured = CapturedText()
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as sink:
        os.dup2(sink.fileno(), 2)
        try:
            yield captured
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            sink.seek(0)
            captured.text = _ANSI_CODES.sub("", sink.read().decode(errors="replace"))


@contextmanager
def without_kineto_lines() -> Iterator[None]:
    """Drop the lines kineto (torch.profiler's engine) writes to fd 2 when a profile starts and stops,
    which carry a timestamp and a pid; anything else written to fd 2 in the block is passed on."""
    try:
        with capture_stderr() as captured:
            yield
    finally:
        other = [line for line in captured.text.splitlines(True) if not _KINETO_LINE.match(line)]
        if other:
            sys.stderr.write("".join(other))
