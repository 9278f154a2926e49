"""What each finding costs, measured on the diagnosed step, and the order that follows from it: what is wrong
first, then what costs the most, then what no lens could put a number on; and one finding per cause.

The rule, in three tiers:

1. **Wrong**: what stops the model or changes what it computes or keeps (an error, a device mismatch, a layer in
   the wrong mode, a leak, a dtype it was not meant to run in, a tensor state_dict skips), in `ORDER`'s order. A
   leak has a cost too (bytes per step), but it grows with every step, so no share of one step bounds it.
2. **Costly**: each finding with a measured `Cost`, the largest share first. A share is of the whole its unit
   belongs to: bytes of the step's memory at its peak, seconds of the step's time, ops of the forward's ops.
   Shares of different wholes compare as equals (30 % of the forward's ops cut off by a graph break ranks with
   30 % of the peak's bytes), and a share may pass 1 (a recompile that takes longer than the step).
3. **Unmeasured**: what no lens puts a number on (an export failure alone, a module in eval mode in a training
   model, which is often meant, the step's regime), in `ORDER`'s order.

One finding per cause: findings placed at the same line of the learner's code are one finding. The first of them
by `ORDER` (the most specific name of the cause: a graph break before the export failures it causes, a saved
tensor before the peak it makes) heads it; the others are its `consequences`; it ranks in the best tier of any of
them, and costs what the costliest of them costs.

Example:
    ranked = rank.ranked(found)
    ranked[0].cost.share, [c.kind for c in ranked[0].consequences]      # 0.99, ['memory']
"""
from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass

__all__: list[str] = []      # Finding, Cost, ranked, ORDER: findings' (findings re-exports Finding and ORDER)

LESSONS = {"error": "12 · error casebook", "device": "00 · environment", "mode": "03 · the sandwich model",
           "leak": "08 · memory diagnosis",
           "precision": "06 · mixed precision", "state": "10 · save and export", "recompile": "05 · torch.compile",
           "graph-break": "05 · torch.compile", "export": "10 · save and export",
           "saved-for-backward": "02 · autograd graph", "memory": "08 · memory diagnosis",
           "checkpoint": "08 · memory diagnosis", "regime": "09 · profiling"}
# The notebook file of each lesson, by its number: the report page links to it.
NOTEBOOKS = {"00": "00_environment.ipynb", "02": "02_autograd_graph.ipynb", "03": "03_sandwich_model.ipynb",
             "05": "05_compile_backends.ipynb", "06": "06_mixed_precision.ipynb", "08": "08_memory_diagnosis.ipynb",
             "09": "09_profiling.ipynb", "10": "10_save_and_export.ipynb", "12": "12_error_casebook.ipynb"}
# The kinds, most urgent first: the order within the wrong and the unmeasured tiers, and among findings of one cause
ORDER = ("error", "device", "mode", "leak", "precision", "graph-break", "recompile", "state", "saved-for-backward",
         "export", "memory", "checkpoint", "regime")
WRONG = frozenset({"error", "device", "mode", "leak", "precision", "state"})
_PLACE = re.compile(r"^([^\s:]+:\d+)(?::|$)")       # "model.py:12: x = ..." -> "model.py:12"


@dataclass(frozen=True)
class Cost:
    """What a finding costs on this step, as a share of the whole it is part of."""

    amount: float              # in `unit`
    unit: str                  # "B", "s" or "ops"
    whole: float               # the whole, in the same unit
    of: str                    # what the whole is: "the step's memory at its peak", "the step's time", ...
    parameters: int = 0        # bytes: the model's parameters, for "N x the parameters" (0: not said)

    @property
    def share(self) -> float:
        return self.amount / self.whole if self.whole else 0.0

    def __str__(self) -> str:
        share = f"{self.share:.0%} of" if self.share <= 1 else f"{self.share:,.0f}x"
        said = f"{self._text(self.amount)}, {share} {self.of} ({self._text(self.whole)})"
        if self.parameters:
            said += f", {self.amount / self.parameters:,.3g}x the parameters' {self.parameters:,} B"
        return said

    def _text(self, amount: float) -> str:
        if self.unit == "s":
            return f"{amount:.3g} s" if amount >= 1 else f"{amount * 1e3:.3g} ms"
        return f"{int(amount):,} {self.unit}"


@dataclass(frozen=True)
class Budget:
    """The wholes a cost is a share of, measured on the step."""

    bytes: int                 # the step's memory at its peak: the storages of the model's tensors and of the
    #                            inputs, plus the most the tensors the step made ever reached together
    parameters: int            # the parameters' bytes
    seconds: float = 0.0       # the step's time (the regime lens's median at the first size); 0: not measured

    def in_bytes(self, amount: int) -> Cost:
        return Cost(amount, "B", self.bytes, "the step's memory at its peak", self.parameters)


@dataclass(frozen=True)
class Finding:
    kind: str
    title: str
    evidence: str
    where: str = ""            # the learner's line, "resnet.py:268: x = self.conv1(x)"; a module path when no line
    #                            of the learner's code makes it (an attribute of a torch class), "" when none
    fix: str = ""              # what to change, as Python code (fixes)
    cost: Cost | None = None   # measured on the step; None when no lens puts a number on it
    consequences: tuple[Finding, ...] = ()     # the other findings of the same cause (its line), by ORDER
    maybe_meant: bool = False  # often meant (a frozen BatchNorm in training): ranked after what is measured

    @property
    def lesson(self) -> str:
        return LESSONS[self.kind]

    @property
    def notebook(self) -> str:
        """The file name of the notebook that teaches it ("05_compile_backends.ipynb")."""
        return NOTEBOOKS[self.lesson[:2]]


def place(where: str) -> str:
    """The `file:line` a finding's `where` starts with, or "" (a module path, or nothing)."""
    found = _PLACE.match(where)
    return found.group(1) if found else ""


def tier(f) -> int:
    """0 wrong, 1 costly, 2 unmeasured (the module docstring's rule)."""
    if f.kind in WRONG and not f.maybe_meant:
        return 0
    return 1 if f.cost is not None else 2


def _key(f) -> tuple:
    return tier(f), -(f.cost.share if f.cost is not None and tier(f) == 1 else 0.0), ORDER.index(f.kind)


def _grouped(members: list):
    """One finding for the findings of one cause: headed by the first by ORDER, costing what the costliest does."""
    members = sorted(members, key=lambda f: ORDER.index(f.kind))
    head, others = members[0], members[1:]
    costs = [m.cost for m in members if m.cost is not None and m.kind not in WRONG]
    cost = max(costs, key=lambda c: c.share) if costs and head.kind not in WRONG else head.cost
    best = min(members, key=_key)
    return dataclasses.replace(head, cost=cost, consequences=tuple(others),
                               maybe_meant=head.maybe_meant and best.maybe_meant)


def ranked(found: list) -> tuple:
    """`found` grouped by cause (its learner's line) and ordered by the rule above; a group ranks as its most
    pressing member."""
    groups: dict[str, list] = {}
    for k, f in enumerate(found):
        groups.setdefault(place(f.where) or f"#{k}", []).append(f)
    heads = [(min(map(_key, members)), _grouped(members)) for members in groups.values()]
    return tuple(head for _, head in sorted(heads, key=lambda pair: pair[0]))
