"""Mixed precision, measured: what autocast does op by op, why float16 gradients need loss scaling,
and what autocast costs or saves in a training run.

Example:
    rows = mixed_precision.autocast_dtype_table("cpu", torch.bfloat16)
    print(mixed_precision.render_dtype_table(rows))
    result = mixed_precision.gradient_underflow("cpu", torch.float16)    # zeros without a scaler
"""
from __future__ import annotations

import time
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

from nbhelpers import arguments, devices, memory, training

__all__ = ["OPS", "OpDtypes", "autocast_dtype_table", "render_dtype_table", "Underflow", "gradient_underflow",
           "Autocast", "PrecisionRun", "train_with_precision", "step_peak_bytes", "plot_runs"]


def _inputs(dtype: torch.dtype, device: torch.device) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    make = lambda *shape: torch.randn(*shape, generator=g).to(device=device, dtype=dtype)  # noqa: E731
    return {"x": make(8, 16), "w": make(4, 16), "image": make(2, 3, 8, 8), "kernel": make(4, 3, 3, 3),
            "fp32": torch.ones(8, 4, device=device), "target": torch.randint(0, 4, (8,), generator=g).to(device)}


# each op takes the inputs of one dtype; "logits" ops act on a (8, 4) tensor of that dtype
OPS: dict[str, Callable[[dict], torch.Tensor]] = {
    "matmul": lambda t: t["x"] @ t["w"].T,
    "linear": lambda t: F.linear(t["x"], t["w"]),
    "conv2d": lambda t: F.conv2d(t["image"], t["kernel"]),
    "bmm": lambda t: torch.bmm(t["x"][None], t["w"].T[None]),
    "relu": lambda t: F.relu(t["x"]),
    "gelu": lambda t: F.gelu(t["x"]),
    "exp": lambda t: t["x"].exp(),
    "softmax": lambda t: F.softmax(t["x"], dim=1),
    "log_softmax": lambda t: F.log_softmax(t["x"], dim=1),
    "layer_norm": lambda t: F.layer_norm(t["x"], (16,)),
    "batch_norm": lambda t: F.batch_norm(t["image"], None, None, training=True),
    "cross_entropy": lambda t: F.cross_entropy(t["x"][:, :4], t["target"]),
    "mse_loss": lambda t: F.mse_loss(t["x"], torch.zeros_like(t["x"])),
    "sum": lambda t: t["x"].sum(),
    "mean": lambda t: t["x"].mean(),
    "add fp32 tensor": lambda t: t["x"][:, :4] + t["fp32"],
    "cat with fp32": lambda t: torch.cat([t["x"][:, :4], t["fp32"]]),
}


@dataclass(frozen=True)
class OpDtypes:
    """Output dtypes of one op under autocast: from float32 inputs, and from inputs already in `low`."""

    op: str
    from_fp32: torch.dtype
    from_low: torch.dtype
    low: torch.dtype

    @property
    def policy(self) -> str:
        """What the output dtypes show: cast down, float32 from either input, or the input's dtype. Why an op
        ends in float32 (autocast's float32 list, or ordinary type promotion with a float32 operand) is not
        visible in dtypes; `torch._C._dispatch_has_kernel_for_dispatch_key(op, "AutocastCPU")` tells."""
        if self.from_fp32 == self.from_low == self.low:
            return f"cast down to {_short(self.low)}"
        if self.from_fp32 == self.from_low == torch.float32:
            return "fp32 either way"
        return "follows its input"


def autocast_dtype_table(device_type: str, dtype: torch.dtype, ops: dict | None = None) -> tuple[OpDtypes, ...]:
    """Run each op in `ops` (default: OPS) under torch.autocast(device_type, dtype) twice: once with
    float32 inputs, once with inputs already in `dtype`, and record the output dtypes."""
    if not torch.amp.is_autocast_available(device_type):
        raise ValueError(f"autocast is not available for device type {device_type!r}")
    device = torch.device(device_type)
    fp32, low = _inputs(torch.float32, device), _inputs(dtype, device)
    rows = []
    with torch.autocast(device_type, dtype=dtype):
        for name, op in (ops or OPS).items():
            rows.append(OpDtypes(name, op(fp32).dtype, op(low).dtype, dtype))
    return tuple(rows)


def render_dtype_table(rows: tuple[OpDtypes, ...]) -> str:
    """A plain-text table: op, output dtype from fp32 inputs and from low-precision inputs, what that shows."""
    low = _short(rows[0].low)
    lines = [f"{'op':<18}{'fp32 in':>9}{low + ' in':>9}   output"]
    lines += [f"{r.op:<18}{_short(r.from_fp32):>9}{_short(r.from_low):>9}   {r.policy}" for r in rows]
    return "\n".join(lines)


@dataclass(frozen=True)
class Underflow:
    """Weight gradients of one tiny-loss step: float32 reference, low precision without and with scaling."""

    reference: torch.Tensor
    unscaled: torch.Tensor
    scaled: torch.Tensor
    scale: float

    @staticmethod
    def zero_fraction(grad: torch.Tensor) -> float:
        return (grad == 0).float().mean().item()

    def relative_error(self, grad: torch.Tensor) -> float:
        """||grad - reference|| / ||reference||: 1.0 for all-zero gradients, ~1e-3 for float16 rounding."""
        return ((grad - self.reference).norm() / self.reference.norm()).item()


def gradient_underflow(device_type: str = "cpu", dtype: torch.dtype = torch.float16,
                       loss_factor: float = 1e-5, seed: int = 0) -> Underflow:
    """One backward of `loss_factor * mean(out**2)` through Linear(64, 64) under autocast(`dtype`).

    The gradient reaching the layer's output is at most about 3e-8, under half of float16's smallest
    subnormal (6e-8), so every element rounds to zero; torch.amp.GradScaler multiplies the loss by
    2**16 first and divides the float32 weight gradients afterwards.
    """
    torch.manual_seed(seed)
    with torch.device(device_type):
        layer, x = nn.Linear(64, 64), torch.randn(32, 64)
    reference = _weight_grad(layer, x, loss_factor, device_type, None)
    unscaled = _weight_grad(layer, x, loss_factor, device_type, dtype)
    scaler = torch.amp.GradScaler(device_type)
    scaled = _weight_grad(layer, x, loss_factor, device_type, dtype, scaler)
    return Underflow(reference, unscaled, scaled, scaler.get_scale())


def _weight_grad(layer, x, loss_factor, device_type, dtype, scaler=None) -> torch.Tensor:
    layer.zero_grad(set_to_none=True)
    with torch.autocast(device_type, dtype=dtype) if dtype is not None else nullcontext():
        out = layer(x)
    loss = loss_factor * out.float().pow(2).mean()
    if scaler is None:
        loss.backward()
    else:
        scaler.scale(loss).backward()
        optimizer = torch.optim.SGD(layer.parameters(), lr=0.0)   # unscale_ works per optimizer
        scaler.unscale_(optimizer)
    return layer.weight.grad.detach().clone()


class Autocast(nn.Module):
    """Runs `model` under torch.autocast and returns float32 logits, so the loss is computed in fp32."""

    def __init__(self, model: nn.Module, device_type: str, dtype: torch.dtype):
        super().__init__()
        self.model, self.device_type, self.dtype = model, device_type, dtype

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with torch.autocast(self.device_type, dtype=self.dtype):
            return self.model(x).float()


@dataclass(frozen=True)
class PrecisionRun:
    """One training run: its history (losses, accuracy), wall seconds and one step's peak memory."""

    label: str
    history: training.History
    seconds: float
    step_peak_bytes: int


def train_with_precision(model: nn.Module, dtype: torch.dtype | None, train_loader, val_loader,
                         epochs: int, lr: float = 2e-3, device: torch.device | str | None = None) -> PrecisionRun:
    """Train `model` with Adam, in float32 (dtype None) or under autocast(dtype); time it and measure
    the peak tensor bytes of one extra training step (`step_peak_bytes`). `device` defaults to the model's."""
    where = "mixed_precision.train_with_precision"
    training.check_training(where, model, train_loader, val_loader, epochs)
    if dtype is not None:
        arguments.require(where, "dtype", dtype, torch.dtype, "None (float32) or a torch.dtype such as torch.bfloat16")
    arguments.require_positive(where, "lr", lr, float)
    device = devices.resolve(device, model)
    net = model if dtype is None else Autocast(model, device.type, dtype)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    start = time.perf_counter()
    history = training.fit(net, train_loader, val_loader, optimizer, epochs, device, progress=False)
    seconds = time.perf_counter() - start
    x, y = next(iter(train_loader))
    peak = step_peak_bytes(net, optimizer, x.to(device), y.to(device))
    return PrecisionRun("fp32" if dtype is None else f"autocast {_short(dtype)}", history, seconds, peak)


def step_peak_bytes(model: nn.Module, optimizer, x: torch.Tensor, y: torch.Tensor) -> int:
    """Most tensor bytes held at once by one forward+backward+step (`memory.track`), gradients
    included: they are set to None first, so the step allocates them."""
    optimizer.zero_grad(set_to_none=True)
    with memory.track(x.device) as tracker:
        F.cross_entropy(model(x), y).backward()
        optimizer.step()
    return tracker.peak_bytes


def plot_runs(runs: list[PrecisionRun], ax=None):
    """Validation accuracy per epoch for each run."""
    import matplotlib.pyplot as plt

    ax = ax if ax is not None else plt.figure(figsize=(6, 3.5)).gca()
    for run in runs:
        epochs = run.history.epochs
        ax.plot([e.number for e in epochs], [100 * e.val_accuracy for e in epochs], "o-", label=run.label)
    ax.set(xlabel="epoch", ylabel="validation accuracy (%)")
    ax.legend()
    return ax


def _short(dtype: torch.dtype) -> str:
    return {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}.get(dtype, str(dtype))
