"""The sandwich model: an input adapter that only normalises, a pure core, an output adapter.

Each layer owns one kind of mistake, so a bad batch fails where it enters, with a message that says
what was expected, instead of as a shape mismatch deep inside the core or at the loss.

Example:
    model = models.mlp(device=device)          # InputAdapter -> CoreBlock -> OutputAdapter
    logits = model(images)                     # (B, 10), differentiable
    labels = model.predict(images)             # (B,), under inference_mode, in eval mode
"""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator

import torch
import torch.nn.functional as F
from torch import nn

from nbhelpers import devices

__all__ = ["CoreConfig", "ConvConfig", "InputAdapter", "CoreBlock", "ConvCore", "OutputAdapter",
           "NeuralNetwork", "eval_inference", "mlp", "cnn"]

IMAGE_SHAPE = (1, 28, 28)
_ACCEPTED = ((1, 28, 28), (28, 28), (784,))


@dataclass(frozen=True)
class CoreConfig:
    """Sizes of the MLP core: Linear(input_dim, hidden_dim) -> ReLU -> Dropout -> Linear(.., output_dim)."""

    input_dim: int = 784
    hidden_dim: int = 128
    output_dim: int = 10
    dropout: float = 0.2

    def __post_init__(self):
        _check_sizes(self, ("input_dim", "hidden_dim", "output_dim"), self.dropout)


@dataclass(frozen=True)
class ConvConfig:
    """Sizes of the CNN core: two 3x3 conv + 2x2 max-pool stages, then an MLP head on 28x28 inputs."""

    channels: tuple[int, int] = (16, 32)
    hidden_dim: int = 128
    output_dim: int = 10
    dropout: float = 0.25

    def __post_init__(self):
        if len(self.channels) != 2:
            raise ValueError(f"channels must name 2 conv stages, e.g. (16, 32); got {self.channels!r}")
        _check_sizes(self, ("hidden_dim", "output_dim"), self.dropout)
        for c in self.channels:
            _check_positive_int("channels", c)


class InputAdapter(nn.Module):
    """Brings a batch of 28x28 digits to the core's layout, dtype and device; computes nothing else.

    Accepts (B, 1, 28, 28), (B, 28, 28) or (B, 784), as float pixels in [0, 1] or uint8 in [0, 255].
    Anything else raises an error naming what was expected and what to change.
    """

    def __init__(self, flatten: bool = True):
        super().__init__()
        self.flatten = flatten
        # non-persistent: follows .to(device/dtype), stays out of state_dict, tells forward the target
        self.register_buffer("anchor", torch.empty(0), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _check_batch(x)
        if x.dtype == torch.uint8:
            x = x.to(torch.float32) / 255  # the same scaling as torchvision's ToTensor
        x = x.to(device=self.anchor.device, dtype=self.anchor.dtype)
        batch = x.shape[0]  # explicit, so an empty batch keeps its shape
        return x.reshape(batch, 784) if self.flatten else x.reshape(batch, *IMAGE_SHAPE)


class CoreBlock(nn.Module):
    """Pure computation: Linear -> ReLU -> Dropout -> Linear, with PyTorch's default initialisation."""

    def __init__(self, config: CoreConfig | None = None):
        super().__init__()
        self.config = config = config if config is not None else CoreConfig()
        self.fc1 = nn.Linear(config.input_dim, config.hidden_dim)
        self.act = nn.ReLU()
        self.dropout = nn.Dropout(config.dropout)
        self.fc2 = nn.Linear(config.hidden_dim, config.output_dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.dropout(self.act(self.fc1(x)))  # (B, hidden_dim)
        return self.fc2(x)  # (B, output_dim) logits


class ConvCore(nn.Module):
    """Pure computation for (B, 1, 28, 28) images: two conv stages, then a small MLP head."""

    def __init__(self, config: ConvConfig | None = None):
        super().__init__()
        self.config = config = config if config is not None else ConvConfig()
        c1, c2 = config.channels
        self.features = nn.Sequential(
            nn.Conv2d(1, c1, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),   # (B, c1, 14, 14)
            nn.Conv2d(c1, c2, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),  # (B, c2, 7, 7)
        )
        self.head = nn.Sequential(
            nn.Flatten(), nn.Dropout(config.dropout),
            nn.Linear(c2 * 7 * 7, config.hidden_dim), nn.ReLU(),
            nn.Linear(config.hidden_dim, config.output_dim),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x))  # (B, output_dim) logits


class OutputAdapter(nn.Module):
    """Turns logits into a loss, predicted labels or probabilities, checking targets on the way."""

    def __init__(self, num_classes: int = 10):
        super().__init__()
        _check_positive_int("num_classes", num_classes)
        self.num_classes = num_classes

    def loss(self, logits: torch.Tensor, targets: torch.Tensor, reduction: str = "mean") -> torch.Tensor:
        """Cross-entropy, after checking that `targets` holds one class index per row of `logits`."""
        self._check_logits(logits)
        if targets.dtype != torch.int64 or targets.shape != logits.shape[:1]:
            raise ValueError(f"targets must be int64 class indices of shape ({logits.shape[0]},), got "
                             f"{targets.dtype} of shape {tuple(targets.shape)}; use the labels the "
                             f"DataLoader yields, or `targets.long()`")
        # checked here because on CUDA an out-of-range class is a device-side assert, not an error
        if targets.numel() and not 0 <= int(targets.min()) <= int(targets.max()) < self.num_classes:
            raise ValueError(f"targets must lie in [0, {self.num_classes - 1}], got values from "
                             f"{int(targets.min())} to {int(targets.max())}")
        return F.cross_entropy(logits, targets, reduction=reduction)

    def decode(self, logits: torch.Tensor) -> torch.Tensor:
        """The predicted class of each row: (B, C) -> (B,) int64."""
        self._check_logits(logits)
        return logits.argmax(dim=1)

    def probabilities(self, logits: torch.Tensor) -> torch.Tensor:
        """Softmax over classes: (B, C) -> (B, C), each row summing to 1."""
        self._check_logits(logits)
        return logits.softmax(dim=1)

    def _check_logits(self, logits: torch.Tensor) -> None:
        if logits.dim() != 2 or logits.shape[1] != self.num_classes:
            raise ValueError(f"logits must have shape (B, {self.num_classes}), got "
                             f"{tuple(logits.shape)}; check the core's output_dim")


class NeuralNetwork(nn.Module):
    """The sandwich: `forward` returns logits for training; `predict` and `predict_proba` are for use."""

    def __init__(self, input_adapter: InputAdapter, core: nn.Module, output_adapter: OutputAdapter):
        super().__init__()
        self.input_adapter = input_adapter
        self.core = core
        self.output_adapter = output_adapter

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.core(self.input_adapter(x))  # (B, num_classes) logits

    def predict(self, x: torch.Tensor) -> torch.Tensor:
        """Predicted labels (B,), computed in eval mode under inference_mode; modes are restored."""
        with eval_inference(self):
            return self.output_adapter.decode(self(x))

    def predict_proba(self, x: torch.Tensor) -> torch.Tensor:
        """Class probabilities (B, C), computed like `predict`."""
        with eval_inference(self):
            return self.output_adapter.probabilities(self(x))


@contextmanager
def eval_inference(model: nn.Module) -> Iterator[nn.Module]:
    """Both inference switches at once: eval mode (dropout off) and inference_mode (no autograd).

    They are independent (neither implies the other). On exit each submodule gets back its own
    training flag, so a submodule the caller froze in eval mode stays frozen.

    Example:
        with models.eval_inference(model):
            logits = model(x)
    """
    modes = {m: m.training for m in model.modules()}
    model.eval()
    try:
        with torch.inference_mode():
            yield model
    finally:
        for m, training in modes.items():
            m.training = training


def mlp(config: CoreConfig | None = None, device: torch.device | str | None = None) -> NeuralNetwork:
    """The MLP sandwich, every parameter created directly on `device` (None: torch's default device, as
    devices.resolve says, so `with torch.device("meta"): models.mlp()` builds a skeleton without memory)."""
    with _on(device):
        core = CoreBlock(config)
        return NeuralNetwork(InputAdapter(flatten=True), core, OutputAdapter(core.config.output_dim))


def cnn(config: ConvConfig | None = None, device: torch.device | str | None = None) -> NeuralNetwork:
    """The CNN sandwich: the same adapters around a ConvCore, created directly on `device` like `mlp`."""
    with _on(device):
        core = ConvCore(config)
        return NeuralNetwork(InputAdapter(flatten=False), core, OutputAdapter(core.config.output_dim))


def _on(device):
    return devices.resolve(device)          # a torch.device is also a context: new tensors are made there


def _check_batch(x) -> None:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"InputAdapter takes a torch.Tensor batch, got {type(x).__name__}; "
                        f"convert with torch.as_tensor(...)")
    if x.dtype != torch.uint8 and not x.is_floating_point():
        raise TypeError(f"InputAdapter takes float pixels in [0, 1] or uint8 pixels in [0, 255], got "
                        f"{x.dtype}; convert with x.float() / 255 or x.to(torch.uint8)")
    if x.dim() < 2 or tuple(x.shape[1:]) not in _ACCEPTED:
        hint = ("a single image needs a batch dimension: x.unsqueeze(0)" if tuple(x.shape) in _ACCEPTED
                else "images must be 1x28x28 grayscale (convert RGB with x.mean(dim=1, keepdim=True))")
        raise ValueError(f"InputAdapter expected a batch of shape (B, 1, 28, 28), (B, 28, 28) or (B, 784), "
                         f"got {tuple(x.shape)}; {hint}")


def _check_sizes(config, names: tuple[str, ...], dropout: float) -> None:
    for name in names:
        _check_positive_int(name, getattr(config, name))
    if not (isinstance(dropout, (int, float)) and 0 <= dropout < 1):
        raise ValueError(f"dropout must be a probability in [0, 1), got {dropout!r}")


def _check_positive_int(name: str, value) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"{name} must be a positive int, got {value!r}")
