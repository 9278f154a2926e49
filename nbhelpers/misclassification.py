"""Where a classifier goes wrong: a confusion matrix and its most confidently wrong examples.

Example:
    result = training.evaluate(model, test_loader)
    matrix = misclassification.confusion_matrix(result.predictions, result.targets, num_classes=10)
    misclassification.plot_confusion_matrix(matrix)
    worst = misclassification.worst_examples(result.losses, k=8)   # indices into the test set
"""
from __future__ import annotations

import torch

__all__ = ["confusion_matrix", "plot_confusion_matrix", "worst_examples", "plot_examples"]


def confusion_matrix(predictions: torch.Tensor, targets: torch.Tensor, num_classes: int) -> torch.Tensor:
    """Counts (num_classes, num_classes), int64: row = true class, column = predicted class."""
    if predictions.shape != targets.shape or predictions.dim() != 1:
        raise ValueError(f"predictions and targets must be 1-D and of equal shape, got "
                         f"{tuple(predictions.shape)} and {tuple(targets.shape)}")
    for name, t in (("predictions", predictions), ("targets", targets)):
        if t.numel() and not 0 <= int(t.min()) <= int(t.max()) < num_classes:
            raise ValueError(f"{name} must lie in [0, {num_classes - 1}], got values from "
                             f"{int(t.min())} to {int(t.max())}; check num_classes")
    flat = targets.long() * num_classes + predictions.long()  # one bin per (true, predicted) pair
    return torch.bincount(flat.cpu(), minlength=num_classes**2).view(num_classes, num_classes)


def plot_confusion_matrix(matrix: torch.Tensor, ax=None):
    """The matrix as a heat map with every count written in its cell."""
    import matplotlib.pyplot as plt

    ax = ax if ax is not None else plt.figure(figsize=(5, 4.5)).gca()
    n = matrix.shape[0]
    ax.imshow(matrix.numpy(), cmap="Blues")
    for i in range(n):
        for j in range(n):
            value = int(matrix[i, j])
            colour = "white" if value > matrix.max() / 2 else "black"
            ax.text(j, i, str(value), ha="center", va="center", fontsize=7, color=colour)
    ax.set(xlabel="predicted", ylabel="true", xticks=range(n), yticks=range(n))
    return ax


def worst_examples(losses: torch.Tensor, k: int) -> torch.Tensor:
    """Indices of the `k` largest per-example losses, largest first (the most confidently wrong)."""
    if not 0 < k <= losses.numel():
        raise ValueError(f"k must be in [1, {losses.numel()}] (the number of examples), got {k}")
    return losses.topk(k).indices


def plot_examples(images: torch.Tensor, titles: list[str], columns: int = 8):
    """A grid of (N, 28, 28) or (N, 1, 28, 28) images with a title each; returns the Figure."""
    import matplotlib.pyplot as plt

    if len(images) != len(titles) or len(images) == 0:
        raise ValueError(f"need one title per image and at least one image, got {len(images)} images "
                         f"and {len(titles)} titles")
    rows = -(-len(images) // columns)
    fig, axes = plt.subplots(rows, columns, figsize=(1.4 * columns, 1.7 * rows), squeeze=False)
    for ax in axes.flat:
        ax.axis("off")
    for ax, image, title in zip(axes.flat, images, titles):
        ax.imshow(image.reshape(28, 28).cpu().numpy(), cmap="gray_r")
        ax.set_title(title, fontsize=8)
    return fig
