"""What to change, as code: the `fix` of each kind of finding, written from the learner's own line where there is
one (`if h.mean().item() > 0.5:` becomes `torch.cond(h.mean() > 0.5, ...)`), else the torch call that fixes the
kind. Every fix is Python that compiles (a test compiles each); a comment says what it replaces.

Example:
    fixes.branch("if h.mean().item() > 0.5:")
    # 'out = torch.cond(h.mean() > 0.5, true_fn, false_fn, operands)  # instead of the if: ...'
"""
from __future__ import annotations

import re

__all__: list[str] = []      # findings' helpers

_IF = re.compile(r"^(?:el)?if (.+):\s*(?:#.*)?$")
_ITEM = re.compile(r"\.item\(\)")


def code(where: str) -> str:
    """The source of a `file:line: text [path]` place, its comment and path dropped ("" for a module path)."""
    parts = re.sub(r" \[[^\]]*\]$", "", where).split(": ", 1)
    return parts[1].split("#", 1)[0].strip() if len(parts) == 2 and ":" in parts[0] else ""


def branch(line: str) -> str:
    """A branch on a value only the data decides, as torch.cond: both sides traced, chosen on the device."""
    found = _IF.match(line.strip())
    if not found:
        return ""
    condition = _ITEM.sub("", found.group(1)).strip()
    return (f"out = torch.cond({condition}, true_fn, false_fn, operands)  # instead of the if: true_fn(*operands) "
            "and false_fn(*operands) each return what their branch makes")


def graph_break(line: str, gb_type: str, hints: tuple[str, ...]) -> str:
    if "print" in line.split("(", 1)[0]:
        return "torch._dynamo.config.reorderable_logging_functions.add(print)  # or delete the print"
    if ".item()" in line or "branch" in gb_type.lower() or "data-dependent" in gb_type.lower():
        return branch(line) or "torch._dynamo.config.capture_scalar_outputs = True  # .item() stays in the graph"
    hint = hints[0].replace("\n", " ") if hints else "see torch._dynamo.explain(model)(*inputs).break_reasons"
    return f"torch._dynamo.explain(model)(*inputs).break_reasons  # Dynamo's hint: {hint}"


def recompile(line: str, failed: str) -> str:
    if "size mismatch" in failed and "range(" in line:
        return "torch.vmap(fn)(x)  # instead of a Python loop over range(x.shape[0]): one op over the batch"
    return "torch._dynamo.mark_dynamic(x, 0)  # before the first call: compile once for every batch size"


def export(strict_failed: bool, non_strict_failed: bool) -> str:
    if strict_failed and not non_strict_failed:
        return "torch.export.export(model, args, strict=False)  # traces the Python forward on fake tensors"
    return "torch.export.draft_export(model, args)  # lists every failure, each with its line"


def register(attr: str, where: str) -> str:
    """A tensor kept as a plain attribute, made a buffer: model.to(), .half() and state_dict() then see it."""
    line = code(where)
    value = line.split("=", 1)[1].strip() if line.startswith(f"self.{attr}") and "=" in line else attr
    return f'self.register_buffer("{attr}", {value})  # in __init__, instead of self.{attr} = ...'


def device(path: str, how: str, where: str, device_name: str) -> str:
    if how == "plain attribute":
        return register(path.rsplit(".", 1)[-1], where) + f"; then model.to({device_name!r})"
    return f"model.to({device_name!r})  # moves every parameter and buffer, {path} with them"


def precision(path: str, how: str, where: str, dtype: str) -> str:
    if how == "plain attribute":
        return register(path.rsplit(".", 1)[-1], where) + f"; then model.to(torch.{dtype})"
    return f"model.to(torch.{dtype})  # every parameter and buffer, {path} with them"


def autocast(device_type: str, dtype: str) -> str:
    return f"with torch.autocast({device_type!r}, dtype=torch.{dtype}):\n    output = model(*inputs)"


def detached(where: str) -> str:
    """The learner's accumulating line with `.detach()` on what it adds: `self.total = self.total + loss.detach()`."""
    line = code(where)
    if line.endswith(")") and ".append(" in line:
        return line[:-1] + ".detach())"
    if "+=" in line:
        return line if line.endswith(".detach()") else f"{line}.detach()"
    return f"{line}.detach()" if "=" in line else "total = total + loss.detach()"


def checkpoint(block: str) -> str:
    """Checkpointing the block at `block` ("ResNet.layer1.0": `self.layer1[0]`) in its model's forward."""
    parts = block.split(".")[1:]
    call = _access("self", parts) if parts else "model"
    return (f"h = torch.utils.checkpoint.checkpoint({call}, h, use_reentrant=False)  # in forward, instead of "
            f"{call}(h): its activations are recomputed in backward, not kept")


def _access(root: str, parts: list[str]) -> str:
    """Python that reaches a submodule: ["layer1", "0"] -> `root.layer1[0]` (a Sequential's child is an index)."""
    return root + "".join(f"[{p}]" if p.isdigit() else f".{p}" for p in parts)


def saved(where: str) -> str:
    line = code(where)
    target = line.split("=", 1)[0].strip() if "=" in line and "==" not in line.split("=", 1)[0] else "h"
    return (f"{target} = torch.utils.checkpoint.checkpoint(fn, *inputs, use_reentrant=False)  # fn: the lines from "
            "here to where the big tensor is used; backward makes it again instead of keeping it")


def regime(verdict: str, device_type: str) -> str:
    if verdict.startswith("overhead"):
        return 'model = torch.compile(model, mode="reduce-overhead")  # fewer Python and launch costs per op'
    if verdict.startswith("bandwidth"):
        return "model = torch.compile(model)  # fuses elementwise ops: fewer passes over memory"
    if verdict.startswith("compute"):
        return autocast(device_type, "bfloat16")
    return "loader = torch.utils.data.DataLoader(data, batch_size=2 * batch_size)  # a step too short to classify"


def mode(wanted: str, call: str) -> str:
    one = f"; or {_access('model', call.split('.'))}.{wanted}() for this one" if call else ""
    return f"model.{wanted}()  # sets every module" + one


def error(text: str, where: str) -> str:
    at = where.split(": ", 1)[0] if where else "the last line of yours in the traceback"
    if "device" in text:
        return f"model.to(inputs[0].device)  # {text.split(':', 1)[0]} at {at}: tensors on two devices"
    return f"model(*inputs)  # alone, it raises {text.split(':', 1)[0]} at {at}: change that line"


def carried(where: str) -> str:
    return detached(where) + "  # each step's graph ends with its step; no retain_graph=True"
