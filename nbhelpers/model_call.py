"""The call a model is diagnosed on, as people pass it: positional arguments, keywords (`model(**batch)`), `None`
and other non-tensor values among them; and what in its output a step's loss is made from.

Every lens of a diagnosis runs the model through one `Call`, so each sees the same arguments. A call is checked
once against the model's `forward` signature, so a wrong one is refused naming the argument, before any lens runs.

Example:
    call = model_call.of("diagnose.run", model, None, args=(), kwargs={"input_ids": ids, "labels": ids})
    output = call(model)                         # model(input_ids=ids, labels=ids)
    model_call.own_loss(output)                  # output.loss: the model's own, from the labels
"""
from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Mapping

import torch
from torch.utils._pytree import tree_flatten, tree_map

from nbhelpers import arguments, module_scope

__all__ = ["Call", "of", "own_loss", "loss_tensors"]


@dataclasses.dataclass(frozen=True)
class Call:
    """`model(*args, **kwargs)`. Its batch is the first dimension of its first tensor (positional, then keywords);
    re-batching (`at`) changes every tensor whose first dimension is that batch, and nothing else."""

    args: tuple
    kwargs: dict

    def __call__(self, model):
        return model(*self.args, **self.kwargs)

    def tensors(self) -> list[torch.Tensor]:
        return [t for t in tree_flatten((self.args, self.kwargs))[0] if isinstance(t, torch.Tensor)]

    @property
    def batch(self) -> int:
        first = self.tensors()[0]
        return first.shape[0] if first.dim() else 1

    def at(self, size: int) -> "Call":
        """The same call at another batch size, repeating the first rows as needed."""
        return self._map(lambda t: t[torch.arange(size) % t.shape[0]] if t.dim() and t.shape[0] == self.batch else t)

    def to(self, device: torch.device) -> "Call":
        return self._map(lambda t: t.to(device))

    def _map(self, fn) -> "Call":
        args, kwargs = tree_map(lambda v: fn(v) if isinstance(v, torch.Tensor) else v, (self.args, self.kwargs))
        return Call(tuple(args), dict(kwargs))

    def describe(self) -> tuple[str, ...]:
        """"[2, 3, 64, 64] float32" per positional argument, "input_ids: [2, 8] int64" per keyword."""
        return (*map(_describe, self.args), *(f"{k}: {_describe(v)}" for k, v in self.kwargs.items()))


def _describe(value) -> str:
    if isinstance(value, torch.Tensor):
        return f"[{', '.join(map(str, value.shape))}] {str(value.dtype).removeprefix('torch.')}"
    inside = module_scope.tensors_in(value)
    return f"{type(value).__name__} of {len(inside)} tensor(s)" if inside else arguments.given(value)


def of(function: str, model: torch.nn.Module, example_inputs, args=None, kwargs=None) -> Call:
    """The call `example_inputs` (a tensor, a tuple of positional arguments, or a dict batch) or `args`/`kwargs`
    stand for; a TypeError or ValueError naming the argument when it is not one the model's forward takes.

    A dict is the keywords when forward takes its keys (`model(**batch)`), else forward's one argument."""
    if example_inputs is not None and (args is not None or kwargs is not None):
        raise TypeError(f"{function}: pass the inputs once: `example_inputs` or `args`/`kwargs`, not both")
    if args is not None and not isinstance(args, tuple):
        raise TypeError(f"{function}: `args` must be a tuple of positional arguments, such as (x,); got "
                        f"{arguments.given(args)}")
    if kwargs is not None and not (isinstance(kwargs, Mapping) and all(isinstance(k, str) for k in kwargs)):
        raise TypeError(f"{function}: `kwargs` must be a dict of keyword arguments, such as {{'input_ids': ids}}; "
                        f"got {arguments.given(kwargs)}")
    name = "example_inputs" if example_inputs is not None else "args" if args else "kwargs"
    call = _from_example(function, model, example_inputs) if example_inputs is not None else \
        Call(args or (), dict(kwargs or {}))
    _require_tensor(function, name, call, {"example_inputs": example_inputs, "args": args, "kwargs": kwargs}[name])
    _require_fits(function, name, model, call)
    return call


def _from_example(function: str, model, example) -> Call:
    if isinstance(example, torch.Tensor):
        return Call((example,), {})
    if isinstance(example, tuple):
        return Call(example, {})
    if isinstance(example, Mapping) and all(isinstance(k, str) for k in example):
        as_keywords = Call((), dict(example))
        takes_one = _bind_error(model, (example,), {}) is None and _bind_error(model, (), as_keywords.kwargs)
        return Call((example,), {}) if takes_one else as_keywords
    text = isinstance(example, (str, bytes)) or (isinstance(example, list) and example
                                                  and all(isinstance(s, str) for s in example))
    hint = (" Text must be tokenized first: pass the tokenizer's tensors, such as "
            "tokenizer(text, return_tensors='pt') as the dict batch" if text else
            " For one argument that is a list, pass args=([...],)" if isinstance(example, list) else "")
    raise TypeError(f"{function}: `example_inputs` must be a tensor, a tuple of positional arguments or a dict "
                    f"batch (model(**batch)), such as torch.randn(2, 3, 64, 64); got "
                    f"{arguments.given(example)}.{hint}")


def _require_tensor(function: str, name: str, call: Call, given) -> None:
    if not call.tensors():
        raise TypeError(f"{function}: `{name}` holds no tensor, so there is no batch to run; got "
                        f"{arguments.given(given)}. Pass the model's inputs as tensors (text tokenized first, "
                        "such as input_ids=torch.randint(0, vocab, (2, 8)))")


def _require_fits(function: str, name: str, model, call: Call) -> None:
    """The call binds to forward's parameters: a wrong count or name is refused here, not deep in the step."""
    why = _bind_error(model, call.args, call.kwargs)
    if why is None:
        return
    signature = inspect.signature(model.forward)
    by_name = [p.name for p in signature.parameters.values() if p.kind is p.KEYWORD_ONLY]
    hint = (f"; {', '.join(by_name)} can only be given by name: pass args=(...) and kwargs={{"
            f"{', '.join(repr(n) + ': ...' for n in by_name)}}}" if by_name and call.args
            else "; pass positional arguments in args=(...) and the others by name in kwargs={...}")
    raise TypeError(f"{function}: `{name}` does not fit {type(model).__name__}.forward{signature}: {why}{hint}")


def _bind_error(model, args, kwargs) -> str | None:
    """Why forward's signature does not take these arguments; None when it does (or has no signature to read)."""
    try:
        signature = inspect.signature(model.forward)
    except (TypeError, ValueError):
        return None
    try:
        signature.bind(*args, **kwargs)
    except TypeError as error:
        return str(error)
    return None


def own_loss(output) -> torch.Tensor | None:
    """The loss a model computed itself (Hugging Face models do when the batch carries labels): `output.loss` or
    `output["loss"]`, when it is one floating number that needs a gradient; else None."""
    found = output.get("loss") if isinstance(output, Mapping) else getattr(output, "loss", None)
    if isinstance(found, torch.Tensor) and found.is_floating_point() and found.numel() == 1 and found.requires_grad:
        return found
    return None


def loss_tensors(output) -> list[torch.Tensor]:
    """The tensors a loss can be made from, in the output's order (a tuple's elements, a dict's or ModelOutput's
    keys, a dataclass's fields; its own `loss` left out): floating ones that need a gradient."""
    if isinstance(output, Mapping):
        output = {k: v for k, v in output.items() if k != "loss"}
    elif dataclasses.is_dataclass(output) and not isinstance(output, type):
        output = [getattr(output, f.name) for f in dataclasses.fields(output) if f.name != "loss"]
    return [t for t in module_scope.tensors_in(output) if t.is_floating_point() and t.requires_grad]
