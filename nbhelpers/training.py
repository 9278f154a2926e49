"""A short, readable training loop: `fit` returns a History, `evaluate` an Evaluation, nothing prints.

Example:
    history = training.fit(model, train_loader, val_loader, optimizer, epochs=5, device=device)
    result = training.evaluate(model, val_loader, device=device)
    training.plot_history(history)
"""
from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader

from nbhelpers import arguments, devices
from nbhelpers.progress import Line, line
from nbhelpers.models import eval_inference

__all__ = ["Epoch", "History", "Evaluation", "fit", "evaluate", "plot_history"]

LossFn = Callable[..., torch.Tensor]  # (logits, targets, reduction=...) -> loss, like F.cross_entropy


@dataclass(frozen=True)
class Epoch:
    """One epoch of `fit`: mean training loss, validation loss and accuracy, and wall time."""

    number: int
    train_loss: float
    val_loss: float
    val_accuracy: float
    seconds: float


@dataclass(frozen=True)
class History:
    """Everything `fit` measured, one Epoch per epoch."""

    epochs: tuple[Epoch, ...]

    @property
    def final_accuracy(self) -> float:
        return self.epochs[-1].val_accuracy

    @property
    def seconds(self) -> float:
        return sum(e.seconds for e in self.epochs)


@dataclass(frozen=True)
class Evaluation:
    """Per-example results of a model on a loader, in the loader's order (all on CPU)."""

    loss: float            # mean of `losses`
    accuracy: float
    losses: torch.Tensor       # (N,) per-example loss: the "worst" examples are its largest entries
    predictions: torch.Tensor  # (N,) int64
    targets: torch.Tensor      # (N,) int64


def fit(model: nn.Module, train_loader: DataLoader, val_loader: DataLoader,
        optimizer: torch.optim.Optimizer, epochs: int, device: torch.device | str | None = None,
        loss_fn: LossFn = F.cross_entropy, progress: bool = True) -> History:
    """Train `model` for `epochs` epochs, evaluating on `val_loader` after each.

    `device` defaults to the device of the model's parameters. In Jupyter one line (nbhelpers.progress) says
    which epoch and batch it is at and the last epoch's losses, and leaves nothing in the stored outputs;
    progress=False draws none.
    """
    check_training("training.fit", model, train_loader, val_loader, epochs)
    arguments.require_optimizer("training.fit", "optimizer", optimizer)
    arguments.require_callable("training.fit", "loss_fn", loss_fn, "a function loss_fn(outputs, targets), such as "
                               "torch.nn.functional.cross_entropy")
    device = _model_device(model, device)
    done: list[Epoch] = []
    with line("fit") if progress else contextlib.nullcontext(Line("fit")) as shown:
        for number in range(1, epochs + 1):
            start = time.perf_counter()
            train_loss = _train_one_epoch(model, train_loader, optimizer, device, loss_fn,
                                          _reporter(shown, number, epochs, train_loader, done))
            result = evaluate(model, val_loader, device, loss_fn)
            done.append(Epoch(number, train_loss, result.loss, result.accuracy, time.perf_counter() - start))
    return History(tuple(done))


def _reporter(shown: Line, number: int, epochs: int, loader, done: list[Epoch]):
    """batch -> the line redrawn as "fit: epoch 2/8, batch 40/125; epoch 1: loss 0.412, val_acc 0.8835 (9 s)";
    an epoch's first batch always, the others at most every progress.MIN_INTERVAL_S."""
    try:
        of = f"/{len(loader)}"
    except TypeError:           # an IterableDataset without __len__
        of = ""
    last = f"; epoch {done[-1].number}: loss {done[-1].train_loss:.3f}, val_acc {done[-1].val_accuracy:.4f}" \
        if done else ""
    return lambda batch: shown.update(f"epoch {number}/{epochs}, batch {batch}{of}{last}", force=batch == 1)


def evaluate(model: nn.Module, loader: DataLoader, device: torch.device | str | None = None,
             loss_fn: LossFn = F.cross_entropy) -> Evaluation:
    """Run `model` in eval mode under inference_mode over `loader`; the model's modes are restored."""
    arguments.require_module("training.evaluate", "model", model)
    _check_loader("training.evaluate", loader, "loader")
    device = _model_device(model, device)
    losses, predictions, targets = [], [], []
    with eval_inference(model):
        for x, y in loader:
            x, y = x.to(device), y.to(device)
            logits = model(x)
            losses.append(loss_fn(logits, y, reduction="none").cpu())
            predictions.append(logits.argmax(dim=1).cpu())
            targets.append(y.cpu())
    if not losses:
        raise ValueError("loader yielded no batches; give it data")
    losses, predictions, targets = torch.cat(losses), torch.cat(predictions), torch.cat(targets)
    accuracy = (predictions == targets).sum().item() / len(targets)  # exact, not a float32 mean
    return Evaluation(losses.mean().item(), accuracy, losses, predictions, targets)


def plot_history(history: History, ax=None):
    """Training and validation loss per epoch (left axis), validation accuracy (right axis)."""
    import matplotlib.pyplot as plt

    ax = ax if ax is not None else plt.figure(figsize=(6, 3.5)).gca()
    x = [e.number for e in history.epochs]
    ax.plot(x, [e.train_loss for e in history.epochs], "o-", label="train loss")
    ax.plot(x, [e.val_loss for e in history.epochs], "s-", label="validation loss")
    ax.set(xlabel="epoch", ylabel="cross-entropy", xticks=x)
    acc = ax.twinx()
    acc.plot(x, [100 * e.val_accuracy for e in history.epochs], "^--", color="tab:green",
             label="validation accuracy")
    acc.set_ylabel("accuracy (%)")
    lines = ax.get_lines() + acc.get_lines()
    ax.legend(lines, [line.get_label() for line in lines], loc="center right")
    return ax


def _train_one_epoch(model, loader, optimizer, device, loss_fn, on_batch=lambda batch: None) -> float:
    model.train()
    total, count = 0.0, 0
    for batch, (x, y) in enumerate(loader, start=1):
        on_batch(batch)
        x, y = x.to(device), y.to(device)
        loss = loss_fn(model(x), y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        total += loss.item() * len(y)
        count += len(y)
    if count == 0:
        raise ValueError("train_loader yielded no batches; check its dataset and drop_last")
    return total / count


def check_training(function: str, model, train_loader, val_loader, epochs) -> None:
    """The arguments every training entry point shares: a module, two loaders with batches, epochs >= 1."""
    arguments.require_module(function, "model", model)
    _check_loader(function, train_loader, "train_loader")
    _check_loader(function, val_loader, "val_loader")
    arguments.require_positive(function, "epochs", epochs)


def _check_loader(function: str, loader, name: str) -> None:
    expected = "a DataLoader (or any iterable of (inputs, targets) batches)"
    if loader is None or not hasattr(loader, "__iter__") or isinstance(loader, (str, bytes, torch.Tensor)):
        raise TypeError(f"{function}: `{name}` must be {expected}; got {arguments.given(loader)}")
    try:
        n = len(loader)
    except TypeError:  # an IterableDataset without __len__: caught when it yields nothing
        return
    if n == 0:
        raise ValueError(f"{function}: `{name}` yields no batches: its dataset is empty, or drop_last=True with "
                         "fewer samples than batch_size; give it data or lower batch_size")


def _model_device(model: nn.Module, device) -> torch.device:
    return devices.resolve(device, model)
