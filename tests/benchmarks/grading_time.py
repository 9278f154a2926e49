"""Benchmark (not a test): grade every exercise's reference solution and every wrong answer in one process.

    python tests/benchmarks/grading_time.py

Issue 19's budget is 10 s on 2 cores for all of them (first grading in a fresh process, imports excluded).
"""
from __future__ import annotations

import contextlib
import io
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from nbhelpers import exercises  # noqa: E402
from tests.exercise_solutions import CASES, MORE_WRONG  # noqa: E402


def main() -> None:
    answers = [(ex, solution) for ex, (solution, _, _) in CASES.items()]
    answers += [(ex, wrong) for ex, (_, wrong, _) in CASES.items()]
    answers += [(ex, wrong) for ex, more in MORE_WRONG.items() for wrong, _ in more]
    start, slowest = time.perf_counter(), []
    with contextlib.redirect_stderr(io.StringIO()):
        for ex, answer in answers:
            t = time.perf_counter()
            exercises.grade(ex, answer)
            slowest.append((time.perf_counter() - t, ex))
    total = time.perf_counter() - start
    top = ", ".join(f"{ex} {s:.2f} s" for s, ex in sorted(slowest, reverse=True)[:5])
    print(f"{len(answers)} answers of {len(CASES)} exercises graded in {total:.2f} s (slowest: {top})")


if __name__ == "__main__":
    main()
