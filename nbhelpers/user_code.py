"""Which line of the learner's own code is running: the innermost Python frame that is neither torch, nor the
standard library, nor this package's own machinery. An op called from a model's forward is placed at the
line that called it (`out = self.conv1(x)` in resnet.py, or a notebook cell's line), not inside torch.nn.

Example:
    frame = user_code.caller(sys._getframe(), stop=block_frame)
    frame.place, frame.text          # 'resnet.py:268', 'x = self.conv1(x)'
"""
from __future__ import annotations

import functools
import inspect
import linecache
import os
import re
import sysconfig
import traceback
from pathlib import Path
from typing import NamedTuple

import torch

__all__ = ["Frame", "caller", "place", "learners"]   # where_of, error_text, error_place, defined_at, assigned_in:
#                                                       the diagnosis's

_TORCH = str(Path(torch.__file__).parent) + os.sep
_STDLIB = str(Path(sysconfig.get_paths()["stdlib"]).resolve()) + os.sep
# outside a venv (pyenv, conda, python.org) site-packages sits inside the standard library's folder: a library
# model (torchvision, timm) is the learner's code, not the standard library's
_SITE = tuple({str(Path(sysconfig.get_paths()[k]).resolve()) + os.sep for k in ("purelib", "platlib")})
_PACKAGE = str(Path(__file__).parent) + os.sep
_MODEL_FILES = ("models.py", "planted_models.py")     # the series' own models are a learner's code


class Frame(NamedTuple):
    file: str          # the file's name, without its folder; "cell" for a notebook cell (its file is a temp path)
    lineno: int
    function: str
    text: str          # the source line, stripped

    @property
    def place(self) -> str:
        return f"{self.file}:{self.lineno}"


def place(filename: str) -> str:
    """The name a file is shown by: its base name, or "cell" for code typed in a notebook (IPython compiles a
    cell as a file in a temp folder named after the kernel's pid: nothing of that belongs in a report)."""
    return "cell" if "ipykernel_" in filename or filename.startswith("<ipython-input") else os.path.basename(filename)


def _machinery(filename: str) -> bool:
    if filename.startswith(_TORCH) or filename.startswith("<frozen"):
        return True
    if filename.startswith(_STDLIB) and not filename.startswith(_SITE):
        return True
    return filename.startswith(_PACKAGE) and not filename.endswith(_MODEL_FILES)


def learners(filename: str) -> bool:
    """Whether a file is the learner's code: neither torch, nor the standard library, nor this package's machinery
    (the series' own models are the learner's)."""
    return not _machinery(filename)


@functools.lru_cache(maxsize=65536)      # once per line: this runs for every op a tracked step makes
def _frame(code, lineno: int) -> Frame:
    return Frame(place(code.co_filename), lineno, code.co_name, linecache.getline(code.co_filename, lineno).strip())


def caller(frame, stop=None) -> Frame | None:
    """The innermost frame from `frame` outwards that is the learner's code, or None when there is none before
    `stop` (the frame that opened the block being watched; itself included when it is the learner's code)."""
    while frame is not None:
        code = frame.f_code
        if not _machinery(code.co_filename):
            return _frame(code, frame.f_lineno)
        if frame is stop:
            return None
        frame = frame.f_back
    return None


def where_of(frame: Frame | None) -> str:
    """A Frame as `file:line: text`, "" for None."""
    return f"{frame.place}: {frame.text}" if frame is not None else ""


def error_text(error: BaseException) -> str:
    """The exception's type and the first line of its message: "RuntimeError: mat1 and mat2 shapes ..."."""
    lines = str(error).strip().splitlines()
    return f"{type(error).__name__}: {lines[0] if lines else ''}".rstrip(": ")


def error_place(error: BaseException) -> str:
    """The learner's innermost line where `error` was raised, as `file:line: text`, or "". Dynamo's errors (strict
    export, fullgraph) carry the stack of the code they were tracing as `real_stack`: their traceback holds only
    torch's frames and the caller's, so that stack comes first."""
    for summary in reversed(getattr(error, "real_stack", None) or ()):
        if learners(summary.filename):
            return f"{place(summary.filename)}:{summary.lineno}: {(summary.line or '').strip()}"
    frames = [f for f, _ in traceback.walk_tb(error.__traceback__)]
    for frame in reversed(frames):
        found = caller(frame, stop=frame)
        if found is not None:
            return where_of(found)
    return ""


def defined_at(function) -> str:
    """`file:line: def name(...)` of a function (its wrappers unwrapped), when it is the learner's code; else ""."""
    function = inspect.unwrap(function)
    try:
        lines, first = inspect.getsourcelines(function)
        file = inspect.getsourcefile(function)
    except (TypeError, OSError):
        return ""
    return f"{place(file)}:{first}: {lines[0].strip()}" if file and learners(file) else ""


def assigned_in(cls: type, attr: str) -> str:
    """`file:line: text` of the learner's line that makes the attribute `attr` of instances of `cls`: an
    assignment to `self.attr`, or a register_buffer/register_parameter/add_module("attr", ...), in the class or a
    class it inherits from; "" when no line of the learner's code does (an attribute of a torch class)."""
    name = re.escape(attr)
    made = re.compile(rf"self\.{name}\s*(?:,[^=]*)?=(?!=)|\.(?:register_buffer|register_parameter|add_module)"
                      rf"\(\s*[\"']{name}[\"']")
    for owner in cls.__mro__:
        try:
            lines, first = inspect.getsourcelines(owner)
            file = inspect.getsourcefile(owner)
        except (TypeError, OSError):
            continue
        if not file or not learners(file):
            continue
        for k, line in enumerate(lines):
            if made.search(line.split("#", 1)[0]):
                return f"{place(file)}:{first + k}: {line.strip()}"
    return ""
