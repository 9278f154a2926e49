"""Pictures drawn from live objects: a float's bit fields, a model's parts, a DataLoader's processes and
queues (the torch.compile pipeline with one run's counts is `compile_picture`'s).

Data first, picture second: `float_bits`, `module_parts` and `loader_layout` read the
objects and return frozen dataclasses; `draw_*` turn those into a `picture_canvas.Picture` (an SVG a notebook
shows, light or dark, with labels at 10 px or more inside their boxes).

Example:
    bits = pictures.float_bits(0.1, torch.bfloat16)
    assert bits.decoded() == torch.tensor(0.1, dtype=torch.bfloat16).item()
    pictures.draw_float_bits([bits])
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from nbhelpers import arguments
from nbhelpers.picture_canvas import Canvas, Picture, width_of

__all__ = ["FloatBits", "float_bits", "draw_float_bits", "Part", "module_parts", "draw_parts", "LoaderLayout",
           "loader_layout", "draw_loader"]

_INT_OF = {8: torch.int8, 16: torch.int16, 32: torch.int32, 64: torch.int64}
_FIELD_FILL = {"sign": "break", "exponent": "op", "mantissa": "leaf"}


@dataclass(frozen=True)
class FloatBits:
    """One floating-point number as stored: its bits, most significant first, and its three field widths."""

    dtype: torch.dtype
    value: float                 # what the tensor holds: the given value rounded to `dtype`
    bits: str                    # "0011..." of length 1 + exponent_bits + mantissa_bits
    exponent_bits: int
    mantissa_bits: int

    @property
    def sign(self) -> int:
        return int(self.bits[0])

    @property
    def exponent(self) -> int:
        return int(self.bits[1:1 + self.exponent_bits], 2)

    @property
    def mantissa(self) -> int:
        return int(self.bits[1 + self.exponent_bits:], 2)

    @property
    def bias(self) -> int:
        return 2 ** (self.exponent_bits - 1) - 1

    def factors(self) -> tuple[int, int, float]:
        """(sign, power of two, significand) with value = sign * 2**power * significand; a zero exponent field
        is a subnormal (no implicit leading 1), an all-ones one is inf or nan (power and significand: inf, nan)."""
        sign = -1 if self.sign else 1
        if self.exponent == 2 ** self.exponent_bits - 1:
            return sign, 0, math.nan if self.mantissa else math.inf
        if self.exponent == 0:
            return sign, 1 - self.bias, self.mantissa / 2 ** self.mantissa_bits
        return sign, self.exponent - self.bias, 1 + self.mantissa / 2 ** self.mantissa_bits

    def decoded(self) -> float:
        """The value the three fields encode, computed from the bits alone."""
        sign, power, significand = self.factors()
        return sign * math.ldexp(significand, power) if math.isfinite(significand) else sign * significand


def float_bits(value: float, dtype: torch.dtype) -> FloatBits:
    """The bits of `value` stored as `dtype`, read from a real tensor through an integer view of its memory.

    Field widths come from torch.finfo: the mantissa from eps (eps = 2**-mantissa_bits), the exponent the rest.
    """
    arguments.require("pictures.float_bits", "value", value, (int, float), "a Python number, such as 0.1")
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point or dtype.itemsize not in (2, 4, 8):
        raise ValueError(f"pictures.float_bits: dtype must be a 16-, 32- or 64-bit floating dtype such as "
                         f"torch.bfloat16, got {dtype!r}")
    info = torch.finfo(dtype)
    mantissa_bits = round(-math.log2(info.eps))
    stored = torch.tensor([value], dtype=dtype)
    raw = stored.view(_INT_OF[info.bits]).item() & (2 ** info.bits - 1)   # two's complement -> unsigned
    return FloatBits(dtype, stored.item(), format(raw, f"0{info.bits}b"), info.bits - 1 - mantissa_bits,
                     mantissa_bits)


def draw_float_bits(rows: list[FloatBits] | tuple[FloatBits, ...], cell: int = 16) -> Picture:
    """One row per number: each bit in a cell coloured by its field (sign, exponent, mantissa), the fields'
    values under them and, above, how they make the number."""
    rows = tuple(rows)
    if not rows or not all(isinstance(r, FloatBits) for r in rows):
        raise TypeError("pictures.draw_float_bits: rows must be a non-empty list of FloatBits, such as "
                        "[pictures.float_bits(0.1, torch.float32)]")
    left, row_h = 96, 78
    width = left + max(len(r.bits) for r in rows) * cell + 16
    canvas = Canvas(width, 34 + row_h * len(rows))
    _legend(canvas, width)
    for i, r in enumerate(rows):
        _bit_row(canvas, r, 30 + i * row_h, left, cell, width)
    return canvas.picture()


def _legend(canvas: Canvas, width: float) -> None:
    x = 8.0
    for field, fill in _FIELD_FILL.items():
        canvas.box(x, 6, 14, 14, fill)
        label = canvas.area(x + 16, 4, 80, 18)
        canvas.text(field, label, size=11, x=x + 18, anchor="start")
        x += 100


def _bit_row(canvas: Canvas, r: FloatBits, top: float, left: float, cell: int, width: float) -> None:
    panel = canvas.box(4, top, width - 8, 72, "panel")
    sign, power, significand = r.factors()
    name = str(r.dtype).removeprefix("torch.")
    canvas.text(name, panel, size=12, x=10, y=top + 42, anchor="start")
    canvas.text(f"{'-' if sign < 0 else '+'}1 × 2^{power} × {significand:.10g} = {r.value!r}", panel, size=11,
                x=left, y=top + 14, anchor="start")
    spans = (("sign", 0, 1, "-1" if sign < 0 else "+1"), ("exponent", 1, 1 + r.exponent_bits,
             f"2^({r.exponent}-{r.bias})" if r.exponent else "0: subnormal"),
             ("mantissa", 1 + r.exponent_bits, len(r.bits), f"{significand:.6g}"))
    for field, start, stop, meaning in spans:
        for k in range(start, stop):
            bit = canvas.box(left + k * cell, top + 22, cell, 22, _FIELD_FILL[field])
            canvas.text(r.bits[k], bit, size=11)
        under = canvas.area(left + start * cell, top + 46, (stop - start) * cell, 22)
        canvas.text(meaning, under, size=10)


@dataclass(frozen=True)
class Part:
    """One child of a model, as the live module has it."""

    name: str                           # the attribute name: "core"
    kind: str                           # its class: "CoreBlock"
    parameters: int                     # parameters it owns, its children's included
    children: tuple[tuple[str, str, int], ...]   # (name, class, parameters) of its own children
    shape_in: tuple[int, ...] | None    # what it was called with in the example forward; None: not called
    shape_out: tuple[int, ...] | None


def module_parts(model: torch.nn.Module, example: torch.Tensor | None = None) -> tuple[Part, ...]:
    """The model's direct children in registration order, with the shapes each saw when `model(example)` ran
    (forward hooks, removed before returning; the model's train/eval mode is left as it was)."""
    arguments.require_module("pictures.module_parts", "model", model)
    seen: dict[str, tuple] = {}
    hooks = [child.register_forward_hook(_shape_hook(seen, name)) for name, child in model.named_children()]
    try:
        if example is not None:
            with torch.no_grad():
                model(example)
    finally:
        for hook in hooks:
            hook.remove()
    return tuple(Part(name, type(child).__name__, _count(child),
                      tuple((n, type(c).__name__, _count(c)) for n, c in child.named_children()),
                      *seen.get(name, (None, None)))
                 for name, child in model.named_children())


def _shape_hook(seen: dict, name: str):
    def hook(module, args, output):
        if args and isinstance(args[0], torch.Tensor) and isinstance(output, torch.Tensor):
            seen[name] = (tuple(args[0].shape), tuple(output.shape))
    return hook


def _count(module: torch.nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


def draw_parts(parts: tuple[Part, ...] | list[Part], title: str = "") -> Picture:
    """The parts left to right, each box with its name, class, parameter count and children; an arrow with the
    shape between parts that ran one after the other, and the parts forward did not call set apart."""
    parts = tuple(parts)
    if not parts or not all(isinstance(p, Part) for p in parts):
        raise TypeError("pictures.draw_parts: parts must be a non-empty list of Part, such as "
                        "pictures.module_parts(model, example)")
    lines = [_part_lines(p) for p in parts]
    widths = [max(width_of(text, size) for text, size in block) + 20 for block in lines]
    gap, top = 90, 34
    height = top + max(18 * len(block) for block in lines) + 16
    canvas = Canvas(16 + sum(widths) + gap * (len(parts) - 1), height + 10)
    if title:
        canvas.text(title, canvas.area(8, 4, canvas.width - 16, 20), size=12, x=8, anchor="start")
    x = 8.0
    for i, (part, block, w) in enumerate(zip(parts, lines, widths)):
        box = canvas.box(x, top, w, height - top, "op" if part.shape_in else "line")
        for k, (text, size) in enumerate(block):
            canvas.text(text, box, size=size, y=top + 18 + 18 * k)
        if part.shape_in and i + 1 < len(parts) and parts[i + 1].shape_in == part.shape_out:
            canvas.arrow((x + w + 4, top + 40), (x + w + gap - 4, top + 40))
            canvas.text(_shape(part.shape_out), canvas.area(x + w, top + 10, gap, 22), size=10)
        x += w + gap
    return canvas.picture()


def _part_lines(p: Part) -> list[tuple[str, int]]:
    head = [(p.name, 12), (p.kind, 11), (f"{p.parameters:,} parameters", 11),
            (f"in {_shape(p.shape_in)} out {_shape(p.shape_out)}" if p.shape_in else "not called by forward", 10)]
    return head + [(f"{n}: {kind}" + (f" {count:,}" if count else ""), 10) for n, kind, count in p.children]


def _shape(shape: tuple[int, ...] | None) -> str:
    return "(" + ", ".join(map(str, shape)) + ")" if shape is not None else "-"


@dataclass(frozen=True)
class LoaderLayout:
    """What a DataLoader iterator runs: read from its (private) attributes, the names torch's dataloader.py uses."""

    iterator: str                 # _MultiProcessingDataLoaderIter or _SingleProcessDataLoaderIter
    workers: int                  # len(_workers): processes, each with its own copy of the dataset
    alive: int                    # of those, running when read
    index_queues: int             # len(_index_queues): one per worker, the main process puts batch indices
    result_queue: bool            # _worker_result_queue: one queue every worker puts its batches on
    pin_memory_thread: bool       # _pin_memory_thread: copies each batch to pinned memory, then _data_queue
    prefetch_factor: int          # batches each worker may have in flight
    setup: str = ""                      # the timing's setup, LoaderSetup.label
    first_batch_s: float | None = None   # measured for that setup (loader_timing), epoch 1
    items_per_s: float | None = None     # and epoch 2


def loader_layout(iterator, timing=None) -> LoaderLayout:
    """The processes, queues and thread of `iter(loader)`; `timing` (a loader_timing.LoaderTiming of the same
    setup) adds what was measured."""
    name = type(iterator).__name__
    if not name.endswith("DataLoaderIter"):
        raise TypeError(f"pictures.loader_layout: iterator must be iter(a DataLoader), got {name}; "
                        "pass iter(loader) after taking one batch, so the workers are running")
    workers = tuple(getattr(iterator, "_workers", ()))
    return LoaderLayout(name, len(workers), sum(w.is_alive() for w in workers),
                        len(getattr(iterator, "_index_queues", ())),
                        getattr(iterator, "_worker_result_queue", None) is not None,
                        getattr(iterator, "_pin_memory_thread", None) is not None,
                        getattr(iterator, "_prefetch_factor", 0) or 0,
                        timing.setup.label if timing else "", timing.first_batch_s[0] if timing else None,
                        timing.items_per_s[-1] if timing else None)


def draw_loader(layout: LoaderLayout) -> Picture:
    """Main process, index queues, workers, the result queue (and the pin-memory thread), with the arrows a batch
    follows; measured numbers are marked so that nbval compares everything else."""
    if not isinstance(layout, LoaderLayout):
        raise TypeError("pictures.draw_loader: layout must be a LoaderLayout, such as pictures.loader_layout(it)")
    rows = max(layout.workers, 1)
    top, row_h = 30, 56
    bottom = top + rows * row_h
    canvas = Canvas(760, bottom + 90)
    canvas.text(f"{layout.iterator}: {layout.workers} worker processes, {layout.alive} alive",
                canvas.area(8, 4, 744, 20), size=12, x=8, anchor="start")
    main = canvas.box(8, top, 150, bottom - top - 8, "group")
    for k, text in enumerate(("main process", "sampler: indices", "next(): batch")):
        canvas.text(text, main, size=12 if k == 0 else 10, y=top + 18 + 16 * k)
    for i in range(layout.workers):
        y = top + i * row_h
        index_q = canvas.box(200, y, 140, row_h - 16, "line")
        canvas.text(f"index queue {i}", index_q, size=11)
        worker = canvas.box(380, y, 170, row_h - 16, "op")
        canvas.text(f"worker {i}: dataset[i]", worker, size=11, y=y + 16)
        canvas.text("collate_fn", worker, size=10, y=y + 32)
        canvas.arrow((158, y + 20), (200, y + 20))
        canvas.arrow((340, y + 20), (380, y + 20))
        if layout.result_queue:
            canvas.arrow((550, y + 20), (590, top + 20))
    if layout.result_queue:
        _result_path(canvas, layout, top, bottom)
    _measured(canvas, layout, bottom)
    return canvas.picture()


def _result_path(canvas: Canvas, layout: LoaderLayout, top: float, bottom: float) -> None:
    result = canvas.box(590, top, 160, 40, "kernel")
    canvas.text("result queue", result, size=11, y=top + 16)
    canvas.text(f"in flight: {layout.prefetch_factor}/worker", result, size=10, y=top + 32)
    last = result
    if layout.pin_memory_thread:
        pin = canvas.box(590, top + 56, 160, 32, "leaf")
        canvas.text("pin-memory thread", pin, size=11)
        canvas.arrow((670, top + 40), (670, top + 56))
        last = pin
    canvas.arrow((670, last.y + last.h), (670, bottom + 4), (83, bottom + 4), (83, bottom - 8))


def _measured(canvas: Canvas, layout: LoaderLayout, bottom: float) -> None:
    panel = canvas.box(8, bottom + 16, 744, 60, "panel")
    canvas.text(f"measured here, setup {layout.setup}:", panel, size=11, x=16, y=bottom + 36, anchor="start")
    if layout.first_batch_s is None:
        canvas.text("no timing given", panel, size=11, x=16, y=bottom + 56, anchor="start")
        return
    canvas.text("first batch (s):", panel, size=11, x=16, y=bottom + 56, anchor="start")
    canvas.text(f"{layout.first_batch_s:.2f}", panel, size=11, x=140, y=bottom + 56, anchor="start", measured=True)
    canvas.text("items/s, epoch 2:", panel, size=11, x=260, y=bottom + 56, anchor="start")
    canvas.text(f"{layout.items_per_s:,.0f}", panel, size=11, x=390, y=bottom + 56, anchor="start", measured=True)
