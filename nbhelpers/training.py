"""A short, readable training loop: `fit` returns a History, `evaluate` an Evaluation, nothing prints.

Example:
    history = training.fit(model, train_loader, val_loader, optimizer, epochs=5, device=device)
    result = training.evaluate(model, val_loader, device=device)
    training.plot_history(history)
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader
from tqdm.auto import tqdm

from nbhelpers import arguments, devices
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

    `device` defaults to the device of the model's parameters. The progress bar (tqdm.auto: a widget
    in Jupyter, text elsewhere) shows one step per epoch; pass progress=False for silence.
    """
    check_training("training.fit", model, train_loader, val_loader, epochs)
    arguments.require_optimizer("training.fit", "optimizer", optimizer)
    arguments.require_callable("training.fit", "loss_fn", loss_fn, "a function loss_fn(outputs, targets), such as "
                               "torch.nn.functional.cross_entropy")
    device = _model_device(model, device)
    done = []
    bar = _epoch_bar(epochs, progress)
    for number in bar:
        start = time.perf_counter()
        train_loss = _train_one_epoch(model, train_loader, optimizer, device, loss_fn)
        result = evaluate(model, val_loader, device, loss_fn)
        done.append(Epoch(number, train_loss, result.loss, result.accuracy, time.perf_counter() - start))
        bar.set_postfix(loss=f"{train_loss:.3f}", val_acc=f"{result.accuracy:.4f}")
    bar.close()
    return History(tuple(done))


def _epoch_bar(epochs: int, enabled: bool):
    """tqdm.auto's bar over the epochs; in Jupyter, its widget is shown with a text that stays true.

    A widget's text/plain is captured once, when it is displayed, so GitHub or nbconvert without
    widget state would show "fit: 0%" for ever; the text says what the bar counts instead.
    """
    in_jupyter = any(c.__module__ == "tqdm.notebook" for c in tqdm.__mro__)
    if not (enabled and in_jupyter):
        return tqdm(range(1, epochs + 1), desc="fit", unit="epoch", disable=not enabled)
    from IPython.display import display

    bar = tqdm(range(1, epochs + 1), desc="fit", unit="epoch", display=False)
    display(_WidgetWithText(bar.container, f"fit: {epochs} epochs (a live progress bar in Jupyter)"))
    return bar


class _WidgetWithText:
    """Displays `widget`, with `text` as the plain-text form that viewers without widgets show."""

    def __init__(self, widget, text: str):
        self.widget, self.text = widget, text

    def _repr_mimebundle_(self, include=None, exclude=None):
        return {**self.widget._repr_mimebundle_(), "text/plain": self.text}


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


def _train_one_epoch(model, loader, optimizer, device, loss_fn) -> float:
    model.train()
    total, count = 0.0, 0
    for x, y in loader:
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
