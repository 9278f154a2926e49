"""Benchmark (not a test): what a whole diagnosis costs, and what dominates it.

    python tests/benchmarks/diagnose_cost.py [--rounds 3]

Measured on torchvision's ResNet-18 at 64x64, batch 2, class targets, SGD (notebook 13's step), each a median of
--rounds in one process:
- diagnose.run, whole, and the time of each of its lenses (Diagnosis.seconds);
- the same lenses called one by one, as a learner would without diagnose: memory.track around the step,
  forward_graph.trace, against_memtracker, module_work.by_module and FlopCounterMode (step and forward),
  profiling.regime, compile_lens.capture with explain and capture_calls over four batch sizes, strict and
  non-strict torch.export; their sum is the baseline of the ratio;
- save_html (the page's size and time) and show() (the widget's state and still picture).
"""
import argparse
import statistics
import tempfile
import time
from pathlib import Path

import torch
import torchvision

from nbhelpers import autograd_graph, compile_lens, forward_graph, memory, memory_agreement, module_work, profiling
from nbhelpers.diagnosis import diagnose


def _model_and_step():
    torch.manual_seed(0)
    model = torchvision.models.resnet18(num_classes=10)
    x, y = torch.randn(2, 3, 64, 64), torch.tensor([3, 7])
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)

    def step(inputs=x, targets=y):
        optimizer.zero_grad(set_to_none=True)
        torch.nn.functional.cross_entropy(model(inputs), targets).backward()
        optimizer.step()
    return model, x, y, optimizer, step


def _one_by_one(model, x, y, optimizer, step) -> dict[str, float]:
    """The lenses diagnose runs, each called on its own; seconds each."""
    def tracked():
        with memory.track(lines=True):
            optimizer.zero_grad(set_to_none=True)
            loss = torch.nn.functional.cross_entropy(model(x), y)
            autograd_graph.trace(loss, model)
            loss.backward()
            optimizer.step()

    def flops():
        from torch.utils.flop_counter import FlopCounterMode
        module_work.by_module(step)
        with torch.no_grad():
            module_work.by_module(lambda: model(x))
        for fn in (step, lambda: model(x)):
            with FlopCounterMode(display=False):
                fn()

    def compiled():
        compile_lens.capture(model, x, kernels=False)
        torch._dynamo.explain(model)(x)
        compile_lens.capture_calls(model, [x[torch.arange(n) % 2] for n in (2, 3, 4, 5)])
        torch.compiler.reset()

    def exported():
        for strict in (True, False):
            torch.export.export(model, (x,), strict=strict)

    lenses = {"memory.track": tracked, "forward_graph.trace": lambda: forward_graph.trace(model, x),
              "against_memtracker": lambda: memory_agreement.against_memtracker(step, model, optimizer),
              "FLOPs both ways": flops,
              "regime": lambda: profiling.regime(lambda n: (lambda: step(x[torch.arange(n) % 2], y[torch.arange(n) % 2])),
                                                 (2, 4)),
              "compile lenses": compiled, "export": exported}
    seconds = {}
    for name, fn in lenses.items():
        start = time.perf_counter()
        fn()
        seconds[name] = time.perf_counter() - start
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    rounds = parser.parse_args().rounds
    model, x, y, optimizer, step = _model_and_step()
    step()                                                   # first-call costs (threads, kernels) out of the way
    whole, parts, apart, pages = [], [], [], []
    for _ in range(rounds):
        start = time.perf_counter()
        d = diagnose.run(model, x, target=y, optimizer=optimizer)
        whole.append(time.perf_counter() - start)
        parts.append(d.seconds)
        apart.append(sum(_one_by_one(model, x, y, optimizer, step).values()))
        with tempfile.TemporaryDirectory() as tmp:
            start = time.perf_counter()
            d.save_html(Path(tmp) / "report.html")
            pages.append((time.perf_counter() - start, (Path(tmp) / "report.html").stat().st_size))
    start = time.perf_counter()
    d.show()._repr_mimebundle_()
    shown = time.perf_counter() - start
    print(f"diagnose.run, ResNet-18 64x64 batch 2 + SGD: median {statistics.median(whole):.1f} s "
          f"(runs: {', '.join(f'{t:.1f}' for t in whole)})")
    for name in parts[0]:
        print(f"  {name:36} {statistics.median(p[name] for p in parts):6.2f} s")
    print(f"the same lenses one by one: median {statistics.median(apart):.1f} s; diagnose / one by one = "
          f"{statistics.median(w / a for w, a in zip(whole, apart)):.2f}x")
    print(f"save_html: {statistics.median(t for t, _ in pages):.2f} s, {pages[0][1]:,} bytes; show() with its "
          f"still picture: {shown:.2f} s")


if __name__ == "__main__":
    main()
