"""One step of a model as every lens of a diagnosis runs it: the model's forward on its call (`model_call.Call`:
the same positional and keyword arguments for every lens), a loss (given, the model's own `output.loss`, from the
target, or the sum of the output), backward and the optimizer's step; runnable again at another batch size (the
regime and the recompile lens need that), and once under memory.track with its backward graph traced (`tracked`).

Example:
    step = Step(model, model_call.of("diagnose.run", model, x), None, None, None, lenses.Lenses())
    step.describe, step.tracked(frozenset()).tracker.peak_bytes
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from nbhelpers import arguments, autograd_graph, memory, model_call, module_scope, node_times, user_code
from nbhelpers.diagnosis.measured import Measured

if TYPE_CHECKING:
    from nbhelpers.diagnosis.lenses import Lenses

__all__: list[str] = []   # Step: the lenses'


class Step:
    """One step of the model, runnable again at another batch size."""

    def __init__(self, model, call: model_call.Call, target, loss_fn, optimizer, lens: Lenses):
        self.model, self.call, self.target, self.loss_fn, self.optimizer = model, call, target, loss_fn, optimizer
        self.lens = lens
        given = target is not None or loss_fn is not None or call.kwargs.get("labels") is not None
        self.training = given or (model.training and any(p.requires_grad for p in model.parameters()))
        self.own_loss = False       # the loss was the output's own (output.loss), known once the model has run

    @property
    def describe(self) -> str:
        if not self.training:
            return ("inference (no target, loss or labels were given, and the model is in eval mode or no parameter "
                    "needs a gradient)")
        return f"training step: {self._loss_text()}, backward" + (
            f", {type(self.optimizer).__name__}.step()" if self.optimizer is not None else "")

    def _loss_text(self) -> str:
        if self.loss_fn is not None:
            return f"loss = {getattr(self.loss_fn, '__name__', type(self.loss_fn).__name__)}(output, target)"
        if self.own_loss:
            return "loss = output.loss (the model's own, from the labels in its inputs)"
        if self.target is not None:
            return "loss = " + ("cross_entropy" if not self.target.is_floating_point() else "mse_loss") + \
                "(output, target)"
        return "loss = output.sum() (no target given: the backward graph is the model's, whatever loss follows)"

    def forward(self, call: model_call.Call | None = None):
        self.lens.ran()
        return (call or self.call)(self.model)

    def loss(self, output) -> torch.Tensor:
        """loss_fn(output, target) when given; else the model's own `output.loss` when there is no target; else,
        of model_call.loss_tensors(output)[0] (the first floating output that needs a gradient, `loss` left out),
        cross-entropy or MSE against the target, or its sum."""
        if self.loss_fn is not None:
            return self.loss_fn(output, self.target)
        own = model_call.own_loss(output) if self.target is None else None
        if own is not None:
            self.own_loss = True
            return own
        found = model_call.loss_tensors(output)
        if not found:
            raise ValueError(f"diagnose.run: the model returned {arguments.given(output)}, with no floating tensor "
                             "that needs a gradient, so no loss can be formed from it; pass loss_fn(output, target) "
                             "that makes one, or put the model in eval mode to diagnose inference")
        first = found[0]
        if self.target is not None:
            f = torch.nn.functional
            return (f.mse_loss(first, self.target) if self.target.is_floating_point()
                    else f.cross_entropy(first, self.target))
        return first.float().sum()

    def at(self, size: int) -> "Step":
        """The same step at another batch size: its call and target (their first dimension) re-batched."""
        target = None if self.target is None else model_call.Call((self.target,), {}).at(size).args[0]
        return Step(self.model, self.call.at(size), target, self.loss_fn, self.optimizer, self.lens)

    def __call__(self, retain_graph: bool = False) -> None:
        if not self.training:
            with torch.no_grad():
                self.forward()
            return
        if self.optimizer is not None:
            self.optimizer.zero_grad(set_to_none=True)
        self.loss(self.forward()).backward(retain_graph=retain_graph)
        if self.optimizer is not None:
            self.optimizer.step()

    def tracked(self, held: frozenset[int]) -> Measured:
        """The step under memory.track(lines=True), with the backward graph traced between forward and backward;
        `held`: the storages saving costs nothing new for (the model's tensors, the inputs)."""
        graph, nodes, at, error, where = None, {}, -1, "", ""
        with memory.track(lines=True) as tracker:
            try:
                output = self.forward() if self.training else self.no_grad()
                if self.training:
                    loss = self.loss(output)
                    at = len(tracker.events)
                    graph = autograd_graph.trace(loss, self.model)
                    nodes = {id(fn): k for k, fn in enumerate(autograd_graph.functions(loss))}
                    loss.backward()
                    if self.optimizer is not None:
                        self.optimizer.step()
            except Exception as raised:  # noqa: BLE001 - the report keeps what was measured up to here
                error, where = user_code.error_text(raised), user_code.error_place(raised)
        return Measured(self.describe, tracker, graph, nodes, at, error, where, self._categories(), held)

    def timed_backward(self) -> tuple[autograd_graph.Graph, node_times.BackwardTimes]:
        """The step's backward once more, under the CPU profiler: its graph and each node's time
        (node_times.backward). The gradients start from none, as after zero_grad(set_to_none=True); the optimizer
        does not step. CPU only: on CUDA a node's range does not hold its kernels' time, so this refuses."""
        if any(t.is_cuda for t in (*self.model.parameters(), *self.call.tensors())):
            raise ValueError("the CPU profiler times a node by its range, and on CUDA the engine runs the kernels "
                             "after it: profile the step with ProfilerActivity.CUDA instead (09)")
        for p in self.model.parameters():
            p.grad = None
        with module_scope.record():                     # names the nodes by module, as memory.track does
            loss = self.loss(self.forward())
        return node_times.backward(loss, module=self.model)

    def no_grad(self):
        with torch.no_grad():
            return self.forward()

    def unmeasured(self, why: str, held: frozenset[int]) -> Measured:
        """What `tracked` returns when the lens itself failed (not the model): nothing measured, and why."""
        return Measured(self.describe, error=f"not measured: {why}", held=held)

    def _categories(self) -> dict[int, str]:
        owner = {}
        for p in self.model.parameters():
            for part in memory.dense_parts(p.grad) if p.grad is not None else ():
                owner[memory.storage_key(part)] = "gradients"
        if self.optimizer is not None:
            for state in self.optimizer.state.values():
                for v in state.values():
                    if isinstance(v, torch.Tensor) and v.numel() > 1:
                        owner[memory.storage_key(v)] = "optimizer state"
        return owner
