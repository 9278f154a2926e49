"""The rot sentinel: run every notebook on another installed torch and say, per myth-index row, whether
the claim still holds there.

Not part of the learners' API (hence the underscore); `make claims` calls it as
`python -m nbhelpers claims` from a separate environment (`.venv-claims`) with the other torch. Each
notebook runs on a temporary copy, with errors allowed, so one failing cell or notebook never stops the
run. A row's section is *held* when every code cell of it ran and printed what the committed notebook
stored (through the same sanitize rules as strict nbval), *changed* when a cell failed or printed
something else, and *could not run* when its notebook did not start or the section's cells only failed
because an earlier cell had (a NameError), or when the row names no notebook.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from nbhelpers._atomic import write_atomic
from nbhelpers._notebook_tools import REPO, sanitize_rules

__all__ = ["CellResult", "run_notebook", "row_outcomes", "render_report", "main"]

NOTEBOOKS = REPO / "notebooks"
_ROW = re.compile(r"^\| (?P<section>[\d.]+) \| (?P<claim>.+?) \| (?P<verdict>[^|]+?) \| "
                  r"(?P<where>[^|]+?) \| (?P<heading>.+) \|$")
_LINK = re.compile(r"^\[\d\d\]\((?P<file>\d\d_[a-z0-9_]+\.ipynb)\)$")
_CASCADE = {"NameError"}                       # a name an earlier failing cell never defined


@dataclass(frozen=True)
class CellResult:
    """One code cell run on the other torch, against what the committed notebook stored."""

    index: int                 # among the notebook's code cells
    section: str               # the '## ' heading above it, without '## '
    status: str                # "same", "differs", "failed", "cascade"
    detail: str = ""           # the first differing line, or the exception


@dataclass
class NotebookRun:
    name: str
    started: bool
    cells: list[CellResult] = field(default_factory=list)
    error: str = ""


def _clean(text: str, rules) -> str:
    for pattern, replacement in rules:
        text = pattern.sub(replacement, text)
    return text


def _shown(outputs, rules) -> list[str]:
    """What strict nbval compares: stream text, plain-text results, and error names and values."""
    shown = []
    for out in outputs:
        if out.get("output_type") == "stream":
            shown.append(f"{out['name']}: {out['text']}")
        elif out.get("output_type") == "error":
            shown.append(f"error: {out['ename']}: {out['evalue']}")
        elif "text/plain" in out.get("data", {}) and "application/vnd.jupyter.widget-view+json" not in out["data"]:
            shown.append(f"result: {out['data']['text/plain']}")
    return _clean("".join(shown), rules).splitlines()


def _compare(stored, ran, rules) -> tuple[str, str]:
    expected_error = "raises-exception" in stored.get("metadata", {}).get("tags", [])
    errors = [o for o in ran.get("outputs", []) if o.get("output_type") == "error"]
    if errors and not expected_error:
        status = "cascade" if errors[0]["ename"] in _CASCADE else "failed"
        return status, f"{errors[0]['ename']}: {(errors[0]['evalue'].splitlines() or [''])[0][:160]}"
    if "NBVAL_IGNORE_OUTPUT" in stored.source:
        return "same", ""
    old, new = _shown(stored.get("outputs", []), rules), _shown(ran.get("outputs", []), rules)
    if old == new:
        return "same", ""
    for a, b in zip(old + [""] * len(new), new + [""] * len(old)):
        if a != b:
            return "differs", f"stored {a.strip()[:100]!r}, got {b.strip()[:100]!r}"
    return "differs", ""


def run_notebook(path: Path, timeout_s: int = 600) -> NotebookRun:
    """Execute a temporary copy of `path` in this environment's kernel and compare every code cell."""
    import nbformat
    from nbclient import NotebookClient

    stored = nbformat.read(path, as_version=4)
    ran = nbformat.read(path, as_version=4)                # executed in memory; the file is not touched
    run = NotebookRun(path.name, started=False)
    try:
        NotebookClient(ran, timeout=timeout_s, kernel_name="python3", allow_errors=True,
                       resources={"metadata": {"path": str(path.parent)}}, record_timing=False,
                       skip_cells_with_tag="skip-execution").execute()
    except Exception as error:                             # kernel died, timed out, did not start
        run.error = f"{type(error).__name__}: {(str(error).splitlines() or [''])[0][:200]}"
    rules = sanitize_rules()
    section, index = "", 0
    for old, new in zip(stored.cells, ran.cells):
        if old.cell_type == "markdown":
            section = next((l[3:] for l in old.source.splitlines() if l.startswith("## ")), section)
            continue
        if old.cell_type != "code":
            continue
        if new.get("execution_count") is None and "skip-execution" not in old.metadata.get("tags", []):
            run.cells.append(CellResult(index, section, "cascade", run.error or "not executed"))
        else:
            run.started = True
            run.cells.append(CellResult(index, section, *_compare(old, new, rules)))
        index += 1
    return run


def _rows(index_text: str) -> list[dict]:
    return [m.groupdict() for m in map(_ROW.match, index_text.splitlines()) if m]


def row_outcomes(rows: list[dict], runs: dict[str, NotebookRun]) -> list[tuple[dict, str, str]]:
    """(row, outcome, detail) for every myth-index row: held, changed or could not run."""
    outcomes = []
    for row in rows:
        link = _LINK.match(row["where"])
        run = runs.get(link["file"]) if link else None
        if run is None:
            outcomes.append((row, "could not run", "no notebook settles it (history or other hardware)"))
            continue
        cells = [c for c in run.cells if c.section.startswith(row["heading"])]
        if not run.started or not cells:
            outcomes.append((row, "could not run", run.error or "the notebook did not start"))
        elif all(c.status == "same" for c in cells):
            outcomes.append((row, "held", ""))
        elif any(c.status in ("failed", "differs") for c in cells):
            first = next(c for c in cells if c.status in ("failed", "differs"))
            outcomes.append((row, "changed", f"code cell {first.index}: {first.detail}"))
        else:
            first = next(c for c in cells if c.status == "cascade")
            outcomes.append((row, "could not run", f"code cell {first.index}: {first.detail} (an earlier cell failed)"))
    return outcomes


def render_report(torch_version: str, runs: dict[str, NotebookRun], outcomes) -> str:
    counts = {k: sum(o == k for _, o, _ in outcomes) for k in ("held", "changed", "could not run")}
    lines = [f"# The myth index on torch {torch_version}", "",
             "Written by `make claims` (`nbhelpers/_claims.py`): every notebook run on this torch, each myth-index row's",
             "section compared with the committed outputs (2.14.1) through `tests/nbval_sanitize.cfg`.", "",
             f"{len(outcomes)} rows: {counts['held']} held, {counts['changed']} changed, "
             f"{counts['could not run']} could not run.", "", "## Notebooks", "",
             "| notebook | code cells | same | differ | failed | after a failure |", "|---|---|---|---|---|---|"]
    for name, run in sorted(runs.items()):
        tally = {s: sum(c.status == s for c in run.cells) for s in ("same", "differs", "failed", "cascade")}
        lines.append(f"| {name} | {len(run.cells)} | {tally['same']} | {tally['differs']} | {tally['failed']} | "
                     f"{tally['cascade']} |" + (f" {run.error}" if run.error else ""))
    lines += ["", "## Rows", "", "| § | claim | verdict on 2.14.1 | on " + torch_version + " | why |",
              "|---|---|---|---|---|"]
    for row, outcome, detail in outcomes:
        detail = detail.replace("|", "\\|").replace("\n", " ")
        lines.append(f"| {row['section']} | {row['claim']} | {row['verdict']} | {outcome} | {detail} |")
    return "\n".join(lines) + "\n"


def main(out: Path, notebooks: list[Path] | None = None) -> int:
    import torch

    notebooks = notebooks or sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))
    runs = {}
    for path in notebooks:
        print(f"running {path.name} on torch {torch.__version__} ...", flush=True)
        runs[path.name] = run_notebook(path)
    outcomes = row_outcomes(_rows((NOTEBOOKS / "README.md").read_text()), runs)
    write_atomic(out, render_report(torch.__version__.split("+")[0], runs, outcomes).encode())
    print(f"wrote {out}")
    return 0
