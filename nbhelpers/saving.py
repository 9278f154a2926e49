"""Training state saved so that a crash never costs the previous checkpoint, a damaged file is never
loaded as a wrong model, and loading never runs code from the file.

File layout: an 8-byte magic, the 64-hex SHA-256 of the payload, then the payload, which is an
ordinary `torch.save` of a dict of tensors and plain data, read back with `weights_only=True`.

Example:
    saving.save("build/ckpt/last.pt", model, optimizer, epoch=3, config={"lr": 1e-3})
    state = saving.load("build/ckpt/last.pt", model, optimizer)      # epoch, config, rng state
"""
from __future__ import annotations

import hashlib
import io
import os
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from nbhelpers import arguments
from nbhelpers.atomic import write_atomic

__all__ = ["CheckpointError", "Checkpoint", "save", "load", "strip_compile_prefix"]

_MAGIC = b"NBHCKPT1"
_COMPILED_PREFIX = "_orig_mod."


class CheckpointError(ValueError):
    """The file is not a checkpoint written by `save`, or it is damaged."""


@dataclass(frozen=True)
class Checkpoint:
    """What `load` restored besides the weights and optimizer state."""

    epoch: int
    config: dict
    rng_state: torch.Tensor      # torch.get_rng_state() at save time; restore it to resume exactly


def strip_compile_prefix(state_dict: dict) -> dict:
    """Keys of a compiled module's state_dict without the `_orig_mod.` its wrapper adds."""
    return {k[len(_COMPILED_PREFIX):] if k.startswith(_COMPILED_PREFIX) else k: v for k, v in state_dict.items()}


def save(path: str | Path, model: nn.Module, optimizer: torch.optim.Optimizer | None = None, epoch: int = 0,
         config: dict | None = None) -> Path:
    """Write model (and optimizer) state, epoch, config and the CPU RNG state, atomically."""
    path = arguments.require_file("saving.save", "path", path, exists=False)
    arguments.require_module("saving.save", "model", model)
    arguments.require_optimizer("saving.save", "optimizer", optimizer, optional=True)
    arguments.require_positive("saving.save", "epoch", epoch, zero=True)
    if config is not None:
        arguments.require("saving.save", "config", config, dict, "a dict of settings to keep with the weights, or None")
    payload = {"model": strip_compile_prefix(model.state_dict()),
               "optimizer": optimizer.state_dict() if optimizer is not None else None,
               "epoch": int(epoch), "config": dict(config or {}), "rng_state": torch.get_rng_state()}
    buffer = io.BytesIO()
    torch.save(payload, buffer)
    blob = buffer.getvalue()
    path.parent.mkdir(parents=True, exist_ok=True)
    return write_atomic(path, _MAGIC + hashlib.sha256(blob).hexdigest().encode() + blob)


def load(path: str | Path, model: nn.Module, optimizer: torch.optim.Optimizer | None = None) -> Checkpoint:
    """Check the file, then restore the weights into `model` (compiled or not) and `optimizer`."""
    arguments.require("saving.load", "path", path, (str, os.PathLike), "a file path (a str or pathlib.Path)")
    path = Path(path)
    if path.is_dir():
        raise CheckpointError(f"saving.load: `path` is a directory, not a file: {path}; pass the checkpoint file "
                              "inside it")
    if not path.is_file():
        raise CheckpointError(f"saving.load: `path` {path} does not exist; save one with saving.save(...)")
    arguments.require_module("saving.load", "model", model)
    arguments.require_optimizer("saving.load", "optimizer", optimizer, optional=True)
    data = path.read_bytes()
    if not data.startswith(_MAGIC):
        raise CheckpointError(f"{path} was not written by saving.save; for a plain torch.save file use "
                              f"torch.load({str(path)!r}, weights_only=True)")
    digest, blob = data[len(_MAGIC):len(_MAGIC) + 64].decode(errors="replace"), data[len(_MAGIC) + 64:]
    if hashlib.sha256(blob).hexdigest() != digest:
        raise CheckpointError(f"{path} is truncated or corrupted: its SHA-256 does not match the one written "
                              f"with it; use an earlier checkpoint")
    payload = torch.load(io.BytesIO(blob), weights_only=True)
    target = model._orig_mod if hasattr(model, "_orig_mod") else model
    target.load_state_dict(payload["model"])
    if optimizer is not None:
        if payload["optimizer"] is None:
            raise CheckpointError(f"{path} holds no optimizer state; pass optimizer=None")
        optimizer.load_state_dict(payload["optimizer"])
    return Checkpoint(payload["epoch"], payload["config"], payload["rng_state"])
