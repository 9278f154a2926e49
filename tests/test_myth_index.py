"""The myth index (notebooks/README.md) and the probes behind it (claims/probes/): each row's verdict is what
its probe returned on each release's committed report, a verdict that differs between releases names the
change, every row cites a source line that holds in the installed torch, and points to a section that exists."""
import functools
import re
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
import torch

from claims.probes import SECTIONS, VERDICTS, VERSIONS, _load, in_torch, report
from tests.source_imports import imported_modules
from tests import REPO

NOTEBOOKS = REPO / "notebooks"
ROWS = _load()
REPORTS = report.reports()
PINNED = "2.14.1"
# History is cited by a pinned PyTorch page: a PR, an issue, a commit, a release's notes or a tagged tree.
PYTORCH_URL = re.compile(r"^https://github\.com/pytorch/(pytorch|vision)/"
                         r"(pull/\d+|issues/\d+|commit/[0-9a-f]{40}|releases/tag/v[\d.]+|tree/v[\d.]+(#[\w-]+)?)$")
CITATION = re.compile(r"^(?P<path>torch/\S+\.pyi?):(?P<line>\d+) (?P<symbol>.+)$")
ABSENT = re.compile(r'^absent "(?P<text>.+)"$')


def _id(r) -> str:
    return f"{ROWS.index(r) + 1}-§{r.section}-{r.claim[:30]}"


def _results(n: int) -> dict[str, str]:
    return {v: rows[n][0] for v, rows in REPORTS.items() if n in rows}


def _summary(r) -> str:
    return report.summary(r, _results(ROWS.index(r) + 1))


def test_the_probes_import_only_torch_and_the_standard_library():
    """So that they run in a bare venv with any torch from 2.1 on (torchvision only where a row is about it)."""
    allowed = set(sys.stdlib_module_names) | {"torch", "torchvision", "claims", "__future__"}
    for name in SECTIONS + ("__init__", "report", "__main__"):
        modules = {m for m in imported_modules(REPO / "claims" / "probes" / f"{name}.py") if not m.startswith(".")}
        assert {m.split(".")[0] for m in modules} <= allowed, f"{name}.py imports {sorted(modules)}"


def test_every_release_has_a_report_of_every_row_without_errors():
    assert set(REPORTS) == set(VERSIONS), f"missing reports: {set(VERSIONS) - set(REPORTS)} (make claims)"
    for version, rows in REPORTS.items():
        assert sorted(rows) == list(range(1, len(ROWS) + 1)), f"torch-{version}.md has other rows than the probes"
        for n, (result, detail, claim) in rows.items():
            assert claim == report.one_line(ROWS[n - 1].claim), f"torch-{version}.md row {n} is another claim"
            assert result != "error", f"torch-{version}.md row {n}: the probe failed: {detail}"


def test_the_probes_on_this_torch_agree_with_its_committed_report(tmp_path):
    if torch.__version__.split("+")[0] != PINNED:
        pytest.skip(f"the committed report is of torch {PINNED}")
    out = tmp_path / "report.md"
    done = subprocess.run([sys.executable, "-m", "claims.probes", "--out", str(out)], cwd=REPO,
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    here, committed = report.read_report(out), REPORTS[PINNED]
    for n, (result, detail, _) in committed.items():
        if result == "n/a" and detail.startswith("needs CUDA") and torch.cuda.is_available():
            assert here[n][0] in VERDICTS, f"row {n} on this GPU: {here[n]}"     # decidable here, not in CI
            continue
        assert here[n][:2] == (result, detail), f"row {n}: {here[n][:2]} here, {(result, detail)} committed"


def test_the_index_is_the_one_the_rows_and_reports_write():
    """`make index` wrote it: every verdict, per-release letter and tally comes from the committed reports."""
    assert (NOTEBOOKS / "README.md").read_text() == report.render_index(ROWS, REPORTS), "run `make index`"


def test_the_project_readme_gives_the_index_tally():
    false = sum(report.kind(_summary(r)) == "false" for r in ROWS)
    top = (REPO / "README.md").read_text()
    assert f"{len(ROWS)} claims, of which {false} are false" in top


def test_the_rows_are_in_article_order():
    sections = [[int(x) for x in r.section.split(".")] for r in ROWS]
    assert sections == sorted(sections)


def test_at_least_three_quarters_of_the_rows_are_decided_on_the_articles_torch():
    decided = sum(result in VERDICTS for result, _, _ in REPORTS["2.1.2"].values())
    assert decided >= 0.75 * len(ROWS), f"{decided} of {len(ROWS)} rows decided on torch 2.1.2"


@pytest.mark.parametrize("r", ROWS, ids=_id)
def test_a_verdict_that_differs_between_releases_names_the_change(r):
    decided = sorted(((report.release(v), res) for v, res in _results(ROWS.index(r) + 1).items()
                      if res in VERDICTS))
    if len({res for _, res in decided}) < 2:
        return
    assert r.changed, f"decided {decided} across releases, but the row names no change"
    assert re.search(r"\(https://github\.com/pytorch/(pytorch|vision)/(pull/\d+|releases/tag/v[\d.]+)\)$",
                     r.changed), f"the change note cites no PR or release note: {r.changed!r}"
    # one verdict before a release the note names, one verdict from it on
    assert any(len({res for v, res in decided if v < since}) == 1 == len({res for v, res in decided if v >= since})
               for since in report.changed_in(r)), f"{decided} does not change at {report.changed_in(r)}"


@pytest.mark.parametrize("r", ROWS, ids=_id)
def test_a_row_no_release_decides_carries_its_verdict_and_a_source(r):
    if all(res == "n/a" for res in _results(ROWS.index(r) + 1).values()):
        assert r.fixed in VERDICTS + ("not checkable",), f"no release decides it, and its verdict is {r.fixed!r}"


@functools.cache
def _torch_line(path: str, line: int) -> str:
    lines = (Path(torch.__file__).parent.parent / path).read_text().splitlines()
    return lines[line - 1] if line <= len(lines) else ""


@pytest.mark.parametrize("r", ROWS, ids=_id)
def test_each_source_citation_holds(r):
    if m := CITATION.match(r.source):
        assert (Path(torch.__file__).parent.parent / m["path"]).is_file(), f"{m['path']} is not in this torch"
        assert m["symbol"] in _torch_line(m["path"], int(m["line"])), \
            f"{m['path']}:{m['line']} reads {_torch_line(m['path'], int(m['line'])).strip()!r}, not {m['symbol']!r}"
    elif m := ABSENT.match(r.source):     # no Python file of torch (Dynamo, inductor, autograd's Python) has it
        assert not in_torch(m["text"], whole_word=True), f"{m['text']!r} is in torch's Python sources"
    elif PYTORCH_URL.match(r.source):
        pass
    else:           # a claim about another vendor's product cites that vendor's page
        assert r.fixed == "not checkable" and r.source.startswith("https://"), r.source


@functools.cache
def _sections(notebook: Path) -> dict[str, str]:
    """Each '## ' heading's markdown, up to the next '## ' heading."""
    texts, current = {}, None
    for cell in nbformat.read(notebook, as_version=4).cells:
        if cell.cell_type != "markdown":
            continue
        for line in cell.source.splitlines():
            if line.startswith("## "):
                current = line[3:]
                texts[current] = ""
            elif current is not None:
                texts[current] += line + "\n"
    return texts


def _section(r) -> str:
    number, heading = r.where.split(" ", 1)
    (notebook,) = NOTEBOOKS.glob(f"{number}_*.ipynb")
    matches = [text for h, text in _sections(notebook).items() if h.startswith(heading)]
    assert matches, f"{notebook.name} has no section starting with {heading!r}"
    return matches[0]


@pytest.mark.parametrize("r", [r for r in ROWS if r.where != "—"], ids=_id)
def test_each_claim_points_to_an_existing_section(r):
    _section(r)


@pytest.mark.parametrize("r", [r for r in ROWS if r.where != "—" and _summary(r) in ("false", "partly true")],
                         ids=_id)
def test_each_wrong_claim_has_a_myth_box_in_its_section(r):
    """The article's wrong statement is quoted where the series settles it, as a Myth / Fact box."""
    section = _section(r)
    assert "> **Myth" in section and "> **Fact:**" in section, \
        f"section {r.where!r} settles a wrong claim but has no '> **Myth ...' / '> **Fact:**' box"

