"""python -m nbhelpers diagnose MODULE:FACTORY [--input 2x3x64x64] --out report.html

Builds the model from an importable factory (a function of no arguments, or a class) that returns the model, or
`(model, batch)` with the batch as `diagnose.run` takes it (a tensor, a tuple of positional arguments, or a dict
of keywords such as a tokenizer's output with labels: `model(**batch)`). For a model alone, `--input` gives the
shapes of random positional inputs. Runs `diagnose.run`, prints the top findings and writes the page.
Exit status 0 when the step ran, 1 when it raised (the page still shows what was measured up to there), 2 for a
command line it cannot run, a model or batch diagnose cannot take, or a file it cannot write, with what to fix.
"""
from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path

__all__ = ["add_parser", "main", "CommandError"]


class CommandError(ValueError):
    """A command line that cannot be run, with what to do."""


def add_parser(sub) -> None:
    p = sub.add_parser("diagnose", help="run one step of your model through every lens; write an offline report",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("factory", help="MODULE:FACTORY, e.g. torchvision.models:resnet18 or mymodels:build; it returns "
                   "the model, or (model, batch)")
    p.add_argument("--input", action="append", metavar="SHAPE",
                   help="an input's shape, e.g. 2x3x64x64 (repeat for each input of forward); needed when the "
                   "factory returns the model alone")
    p.add_argument("--dtype", default="float32", help="the inputs' dtype (default float32; an integer dtype "
                   "gives random integers in [0, --high))")
    p.add_argument("--high", type=int, default=10, help="upper bound (exclusive) of integer inputs (default 10)")
    p.add_argument("--target", help="N: class indices in [0, N) (cross-entropy); or a shape such as 2x10 "
                   "(MSE). Without it, a model in train mode is stepped on the sum of its output")
    p.add_argument("--eval", action="store_true", help="put the model in eval mode first (diagnose inference)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--top", type=int, default=5, help="how many findings to print (default 5)")
    p.add_argument("--out", type=Path, default=Path("report.html"), help="the page to write (default report.html)")
    p.add_argument("--snapshot", type=Path, help="also write a memory_viz snapshot pickle here")


def shape(text: str, flag: str = "--input") -> tuple[int, ...]:
    parts = text.lower().split("x")
    if not all(p.isdigit() and int(p) > 0 for p in parts):
        raise CommandError(f"{flag} {text!r} is not a shape: write positive sizes joined by x, such as 2x3x64x64")
    return tuple(int(p) for p in parts)


def dtype(name: str):
    import torch

    found = getattr(torch, name.removeprefix("torch."), None)
    if not isinstance(found, torch.dtype):
        raise CommandError(f"--dtype {name!r} is not a torch dtype: use float32, bfloat16, float16, int64, ...")
    return found


def build(spec: str):
    """(model, batch) from what MODULE:FACTORY() returns (batch None for a model alone), or a CommandError that
    says what to fix."""
    import torch

    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise CommandError(f"{spec!r} is not MODULE:FACTORY: write the module to import and the function in it "
                           "that returns the model, such as torchvision.models:resnet18")
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise CommandError(f"cannot import {module_name!r} ({error}); run from the folder that holds it, or add that "
                           "folder to PYTHONPATH") from error
    factory = getattr(module, attr, None)
    if not callable(factory):
        raise CommandError(f"{module_name} has no function {attr!r}" + (" (it is not callable)" if hasattr(
            module, attr) else "") + "; name a function of no arguments that returns your model")
    try:
        made = factory()
    except Exception as error:  # noqa: BLE001 - the learner's factory: say what it raised
        raise CommandError(f"{spec}() raised {type(error).__name__}: {error}") from error
    model, batch = made if isinstance(made, tuple) and len(made) == 2 else (made, None)
    if not isinstance(model, torch.nn.Module):
        raise CommandError(f"{spec}() returned {type(made).__name__}, not a torch.nn.Module nor (model, batch); "
                           "return the model, or the model and a batch such as (model, {'input_ids': ids})")
    return model, batch


def _inputs(args, batch, spec: str):
    """The batch the factory returned, or random inputs of the --input shapes: exactly one of them."""
    import torch

    if batch is not None:
        if args.input:
            raise CommandError(f"{spec}() returned a batch with the model, and --input gave shapes too: drop --input "
                               "(or return the model alone)")
        return batch
    if not args.input:
        raise CommandError(f"{spec}() returned the model alone: give its inputs' shapes with --input, such as "
                           "--input 2x3x64x64, or return (model, batch) from the factory")
    kind = dtype(args.dtype)
    shapes = [shape(s) for s in args.input]
    if kind.is_floating_point:
        return tuple(torch.randn(s).to(kind) for s in shapes)
    return tuple(torch.randint(0, args.high, s, dtype=kind) for s in shapes)


def _target(args, batch: int):
    import torch

    if args.target is None:
        return None
    if args.target.isdigit():
        return torch.randint(0, int(args.target), (batch,))
    return torch.randn(shape(args.target, "--target"))


def _batch_size(inputs) -> int:
    """The first dimension of the batch's first tensor (1 when it has none), as diagnose takes the batch."""
    import torch
    from torch.utils._pytree import tree_flatten

    first = next((t for t in tree_flatten(inputs)[0] if isinstance(t, torch.Tensor)), None)
    return first.shape[0] if first is not None and first.dim() else 1


def main(args) -> int:
    import torch

    from nbhelpers.diagnosis import diagnose

    try:
        torch.manual_seed(args.seed)
        model, batch = build(args.factory)
        inputs = _inputs(args, batch, args.factory)
        target = _target(args, _batch_size(inputs))
    except CommandError as error:
        print(f"diagnose: {error}", file=sys.stderr)
        return 2
    if args.eval:
        model.eval()
    try:
        d = diagnose.run(model, inputs, target=target)
    except (TypeError, ValueError) as error:     # run's checks, before any step: the model or batch it cannot take
        print(f"diagnose: what {args.factory}() returned cannot be diagnosed: {error}", file=sys.stderr)
        return 2
    print(d.summary(args.top))
    try:
        d.save_html(args.out)
        print(f"wrote {args.out}")
        if args.snapshot and d.tracker is not None:
            d.save_snapshot(args.snapshot)
            print(f"wrote {args.snapshot} (python -m torch.cuda._memory_viz trace {args.snapshot} lists it)")
    except (ValueError, OSError) as error:
        print(f"diagnose: {error}", file=sys.stderr)
        return 2
    return 1 if d.error else 0
