"""The rot sentinel: run every notebook on another installed torch and say, per myth-index row, whether
the claim still holds there.

Not part of the learners' API (hence the underscore); `make claims` calls it as
`python -m nbhelpers claims` from a separate environment (`.venv-claims`) with the other torch. Each
notebook runs on a temporary copy, with errors allowed, so one failing cell or notebook never stops the
run. Claims are assertions, so a row's section is *held* when every code cell of it ran without an
unexpected exception (a printed line that differs from the committed output, through the same sanitize
rules as strict nbval, is reported beside it), *changed* when a cell of it failed, and *could not run*
when its notebook did not start, its cells only failed because an earlier cell had (a NameError), or the
row names no notebook. The executed copies are kept under build/claims/ for reading.
"""
from __future__ import annotations

import copy
import re
from dataclasses import dataclass, field
from pathlib import Path

from nbhelpers._atomic import write_atomic
from nbhelpers._notebook_tools import REPO, apply_rules, sanitize_rules

__all__ = ["CellResult", "ROW", "LINK", "index_rows", "run_notebook", "row_outcomes", "render_report", "main"]

NOTEBOOKS = REPO / "notebooks"
ROW = re.compile(r"^\| (?P<section>[\d.]+) \| (?P<claim>.+?) \| (?P<verdict>[^|]+?) \| "
                  r"(?P<where>[^|]+?) \| (?P<heading>.+) \|$")
LINK = re.compile(r"^\[\d\d\]\((?P<file>\d\d_[a-z0-9_]+\.ipynb)\)$")
COMMITTED_TORCH = re.search(r'"torch==([^"]+)"', (REPO / "pyproject.toml").read_text())[1]  # what outputs are from
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
    return apply_rules("".join(shown), rules).splitlines()


_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _failing_line(error: dict) -> str:
    """The line the traceback's arrow points at, in the cell (IPython marks it '---->')."""
    lines = [_ANSI.sub("", text) for text in error.get("traceback", [])]
    arrows = [text.split("---->", 1)[1].strip() for t in lines for text in t.splitlines() if "---->" in text]
    return arrows[0].split(" ", 1)[-1].strip() if arrows else ""


def _first_difference(old: str, new: str) -> str:
    at = next((k for k, (a, b) in enumerate(zip(old, new)) if a != b), min(len(old), len(new)))
    start = max(0, at - 30)
    return f"stored {old[start:at + 50].strip()!r}, got {new[start:at + 50].strip()!r}"


def _compare(stored, ran, rules) -> tuple[str, str]:
    expected_error = "raises-exception" in stored.get("metadata", {}).get("tags", [])
    errors = [o for o in ran.get("outputs", []) if o.get("output_type") == "error"]
    if errors and not expected_error:
        status = "cascade" if errors[0]["ename"] in _CASCADE else "failed"
        value = (errors[0]["evalue"].splitlines() or [""])[0][:160]
        where = _failing_line(errors[0])
        return status, f"{errors[0]['ename']}: {value}" + (f" at `{where[:120]}`" if where else "")
    if "NBVAL_IGNORE_OUTPUT" in stored.source:
        return "same", ""
    old, new = _shown(stored.get("outputs", []), rules), _shown(ran.get("outputs", []), rules)
    if old == new:
        return "same", ""
    return "differs", _first_difference("\n".join(old), "\n".join(new))


def run_notebook(path: Path, executed: Path, timeout_s: int = 600, reuse: bool = False) -> NotebookRun:
    """Execute a copy of `path` in this environment's kernel (kept at `executed`) and compare every code
    cell with the committed one; reuse=True compares an earlier run's copy instead."""
    import nbformat
    from nbclient import NotebookClient

    stored = nbformat.read(path, as_version=4)
    run = NotebookRun(path.name, started=False)
    if reuse and executed.exists():
        ran = nbformat.read(executed, as_version=4)
    else:
        ran = copy.deepcopy(stored)                        # the committed file is never written
        try:
            NotebookClient(ran, timeout=timeout_s, kernel_name="python3", allow_errors=True,
                           resources={"metadata": {"path": str(path.parent)}}, record_timing=False,
                           skip_cells_with_tag="skip-execution").execute()
        except Exception as error:  # noqa: BLE001 - the kernel died, timed out or did not start: reported
            run.error = f"{type(error).__name__}: {(str(error).splitlines() or [''])[0][:200]}"
        executed.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(executed, nbformat.writes(ran).encode())
    rules = sanitize_rules()
    section, index = "", 0
    for old, new in zip(stored.cells, ran.cells):
        if old.cell_type == "markdown":
            section = next((text[3:] for text in old.source.splitlines() if text.startswith("## ")), section)
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


def index_rows(index_text: str) -> list[dict]:
    """The myth index's table rows (notebooks/README.md), as dicts of the named groups of ROW."""
    return [m.groupdict() for m in map(ROW.match, index_text.splitlines()) if m]


def row_outcomes(rows: list[dict], runs: dict[str, NotebookRun]) -> list[tuple[dict, str, str]]:
    """(row, outcome, detail) for every myth-index row: held, changed or could not run."""
    outcomes = []
    for row in rows:
        link = LINK.match(row["where"])
        run = runs.get(link["file"]) if link else None
        if run is None:
            outcomes.append((row, "could not run", "no notebook settles it (history or other hardware)"))
            continue
        cells = [c for c in run.cells if c.section.startswith(row["heading"])]
        failed = [c for c in cells if c.status == "failed"]
        cascade = [c for c in cells if c.status == "cascade"]
        differs = [c for c in cells if c.status == "differs"]
        if not run.started or not cells:
            outcomes.append((row, "could not run", run.error or "the notebook did not start"))
        elif failed:
            outcomes.append((row, "changed", f"code cell {failed[0].index}: {failed[0].detail}"))
        elif cascade:
            outcomes.append((row, "could not run",
                             f"code cell {cascade[0].index}: {cascade[0].detail} (an earlier cell failed)"))
        else:
            outcomes.append((row, "held", f"asserts pass; code cell {differs[0].index} printed otherwise: "
                                          f"{differs[0].detail}" if differs else ""))
    return outcomes


def render_report(torch_version: str, runs: dict[str, NotebookRun], outcomes) -> str:
    counts = {k: sum(o == k for _, o, _ in outcomes) for k in ("held", "changed", "could not run")}
    lines = [f"# The myth index on torch {torch_version}", "",
             "Written by `make claims` (`nbhelpers/_claims.py`): every notebook run on this torch, each myth-index row's",
             f"section compared with the committed outputs ({COMMITTED_TORCH}) through `tests/nbval_sanitize.cfg`.", "",
             f"{len(outcomes)} rows: {counts['held']} held, {counts['changed']} changed, "
             f"{counts['could not run']} could not run.", "", "## Notebooks", "",
             "| notebook | code cells | same | differ | failed | after a failure |", "|---|---|---|---|---|---|"]
    for name, run in sorted(runs.items()):
        tally = {s: sum(c.status == s for c in run.cells) for s in ("same", "differs", "failed", "cascade")}
        lines.append(f"| {name} | {len(run.cells)} | {tally['same']} | {tally['differs']} | {tally['failed']} | "
                     f"{tally['cascade']} |" + (f" {run.error}" if run.error else ""))
    lines += ["", "## Rows", "", f"| § | claim | verdict on {COMMITTED_TORCH} | on {torch_version} | why |",
              "|---|---|---|---|---|"]
    for row, outcome, detail in outcomes:
        detail = detail.replace("|", "\\|").replace("\n", " ")
        lines.append(f"| {row['section']} | {row['claim']} | {row['verdict']} | {outcome} | {detail} |")
    return "\n".join(lines) + "\n"


def main(out: Path, notebooks: list[Path] | None = None, reuse: bool = False) -> int:
    import torch

    notebooks = notebooks or sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))
    version = torch.__version__.split("+")[0]
    runs = {}
    for path in notebooks:
        print(f"running {path.name} on torch {torch.__version__} ...", flush=True)
        runs[path.name] = run_notebook(path, REPO / "build" / "claims" / version / path.name, reuse=reuse)
    outcomes = row_outcomes(index_rows((NOTEBOOKS / "README.md").read_text()), runs)
    write_atomic(out, render_report(version, runs, outcomes).encode())
    print(f"wrote {out}")
    return 0
