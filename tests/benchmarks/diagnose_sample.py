"""Benchmark (not a test): diagnose.run's time on the menagerie's sample, lens by lens, against one plain step.

    python -m tests.benchmarks.diagnose_sample [--only NAME ...]

For each model of tests/menagerie_models.SAMPLE (the twelve make test runs), in one process, one after another:
- one plain step, as the learner's loop runs it: the model's forward, the loss, backward (the median of 5 calls
  after 2 warm-up calls, torch.utils.benchmark);
- diagnose.run on the same call, once, whole, and each lens's seconds (Diagnosis.seconds) and forward calls.
Prints a markdown table (the README quotes it) and the median and slowest model against issue 38's budget for an
idle 2-core machine: median at most 10 s, slowest at most 40 s. Run it with nothing else running.
"""
import argparse
import statistics
import time
import warnings

import torch

from nbhelpers import profiling
from nbhelpers.diagnosis import diagnose
from tests import menagerie_models

BUDGET_MEDIAN_S, BUDGET_SLOWEST_S = 10.0, 40.0


def _plain_step(built) -> float:
    def step():
        built.model.zero_grad(set_to_none=True)
        built.loss(built.output()).backward()
    return profiling.median_seconds(step, calls=5)


def _one(name: str) -> dict:
    built = menagerie_models.by_name()[name].build()
    step_s = _plain_step(built)
    built = menagerie_models.by_name()[name].build()       # diagnose gets a model no step has changed
    start = time.perf_counter()
    d = diagnose.run(built.model, args=built.args, kwargs=built.kwargs, target=built.target, loss_fn=built.loss_fn)
    whole = time.perf_counter() - start
    return {"name": name, "step_s": step_s, "s": whole, "lenses": dict(d.seconds),
            "forward_calls": sum(d.forward_calls.values())}


def _table(rows: list[dict]) -> str:
    lenses = list(rows[0]["lenses"])
    head = ["model", "one step", "diagnose", "x step", "forward calls", *lenses]
    lines = ["| " + " | ".join(head) + " |", "|---" + "|---:" * (len(head) - 1) + "|"]
    for r in rows:
        cells = [f"`{r['name']}`", f"{r['step_s'] * 1e3:.0f} ms", f"{r['s']:.1f} s", f"{r['s'] / r['step_s']:.0f}",
                 str(r["forward_calls"]), *(f"{r['lenses'].get(k, 0.0):.1f}" for k in lenses)]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", default=list(menagerie_models.SAMPLE))
    names = parser.parse_args().only
    rows = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name in names:
            rows.append(_one(name))
            print(f"{name}: {rows[-1]['s']:.1f} s", flush=True)
    print(_table(rows))
    seconds = [r["s"] for r in rows]
    slowest = max(rows, key=lambda r: r["s"])
    print(f"\n{len(rows)} models, torch {torch.__version__}, {torch.get_num_threads()} threads: median "
          f"{statistics.median(seconds):.1f} s (budget {BUDGET_MEDIAN_S:.0f} s), slowest {slowest['name']} "
          f"{slowest['s']:.1f} s (budget {BUDGET_SLOWEST_S:.0f} s); diagnose / one step: median "
          f"{statistics.median(r['s'] / r['step_s'] for r in rows):.0f}x")


if __name__ == "__main__":
    main()
