"""What the learner's entry points check, once, at the boundary: a wrong call gets a TypeError or ValueError
that names the argument, says what it was given and what to pass, instead of an AttributeError from deep inside.

Only the functions a learner calls with objects of their own check (trace, show, memory.track, saving.load,
launch, fit, ...); code behind them trusts what those checks let through.

Example:
    arguments.require("autograd_graph.trace", "t", t, torch.Tensor, "a tensor, such as the loss")
    # TypeError: autograd_graph.trace: `t` must be a tensor, such as the loss; got NoneType (None)
"""
from __future__ import annotations

import os
from pathlib import Path

import torch

__all__ = ["require", "require_callable", "require_module", "require_optimizer", "require_file",
           "require_positive", "given"]


def given(value) -> str:
    """A short description of what was passed: its type, and its value when that is short."""
    text = repr(value)
    return f"{type(value).__name__} ({text})" if len(text) <= 40 else type(value).__name__


def _fail(function: str, name: str, value, expected: str, kind=TypeError):
    return kind(f"{function}: `{name}` must be {expected}; got {given(value)}")


def require(function: str, name: str, value, types, expected: str):
    """`value` if it is an instance of `types`, else a TypeError naming `name`. A bool is not an int here."""
    if not isinstance(value, types) or (isinstance(value, bool) and bool not in _as_tuple(types)):
        raise _fail(function, name, value, expected)
    return value


def _as_tuple(types) -> tuple:
    return types if isinstance(types, tuple) else (types,)


def require_callable(function: str, name: str, value, expected: str = "a function"):
    if not callable(value) or isinstance(value, type) and not issubclass(value, torch.nn.Module):
        raise _fail(function, name, value, expected)
    return value


def require_module(function: str, name: str, value):
    return require(function, name, value, torch.nn.Module, "a torch.nn.Module (your model)")


def require_optimizer(function: str, name: str, value, *, optional: bool = False):
    if optional and value is None:
        return None
    expected = "a torch.optim.Optimizer" + (", or None" if optional else "")
    return require(function, name, value, torch.optim.Optimizer, expected)


def require_file(function: str, name: str, path, *, exists: bool) -> Path:
    """`path` as a Path: a str or os.PathLike that is not a directory (and, with `exists`, is a file)."""
    require(function, name, path, (str, os.PathLike), "a file path (a str or pathlib.Path)")
    path = Path(path)
    if path.is_dir():
        raise ValueError(f"{function}: `{name}` is a directory, not a file: {path}; pass a file path inside it")
    if exists and not path.is_file():
        raise ValueError(f"{function}: `{name}` does not exist: {path}")
    return path


def require_writable_file(function: str, name: str, path) -> Path:
    """`path` as a Path to write: not a directory, in a folder that exists."""
    path = require_file(function, name, path, exists=False)
    if not path.parent.is_dir():
        raise ValueError(f"{function}: `{name}` is in a folder that does not exist: {path.parent}; create it first")
    return path


def require_positive(function: str, name: str, value, kind: type = int, *, zero: bool = False):
    """An int (or a float, with kind=float) above zero (or at least zero, with `zero`)."""
    types = (int, float) if kind is float else int
    bound = "zero or more" if zero else "above zero"
    require(function, name, value, types, f"{'a number' if kind is float else 'an integer'} {bound}")
    if value < 0 or (value == 0 and not zero):
        raise _fail(function, name, value, f"{'a number' if kind is float else 'an integer'} {bound}", ValueError)
    return value
