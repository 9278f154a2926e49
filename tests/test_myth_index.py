"""The myth index (notebooks/README.md) and the probes behind it (claims/probes/): each row's verdict is what
its probe returned on each release's committed report, a verdict that differs between releases names the
change, every row cites a source line that holds in the installed torch, and points to a section that exists."""
import ast
import functools
import inspect
import itertools
import os
import re
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
import torch

from claims.probes import SECTIONS, VERDICTS, VERSIONS, _load, in_torch, report, run_row
from claims.probes.article import CLAIMS, NOT_CLAIMS
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



# --- the article's claims: each a fragment of the article, each with its rows (claims/probes/article.py) -----------

ARTICLE = Path(os.environ.get("MYTH_ARTICLE", "")) if os.environ.get("MYTH_ARTICLE") else \
    next(iter(sorted((REPO.parent / "shared" / "seed").glob("*.txt"))), None)
needs_article = pytest.mark.skipif(ARTICLE is None or not ARTICLE.is_file(),
                                   reason="the article is not in ../shared/seed/ (set MYTH_ARTICLE)")
API = re.compile(r"\b(?:torch|nn|F)\.[A-Za-z_][A-Za-z0-9_.]*")


def _article_sections(text: str) -> dict[str, str]:
    """Each section's text, found by its heading ("\\n2.1 ...", "\\n6. ...") after the previous one."""
    labels = list(dict.fromkeys(r.section for r in ROWS))
    starts, at = [], 0
    for label in labels:
        m = re.compile(rf"(?:^|\n){re.escape(label)}(?:\.| |\d?[^\d.])").search(text, at)
        assert m, f"the article has no heading {label} after position {at}"
        starts.append(m.start())
        at = m.end()
    return {label: text[start:end] for label, start, end in zip(labels, starts, starts[1:] + [len(text)])}


@needs_article
def test_every_article_claim_is_in_its_section_and_has_a_row_and_every_row_a_claim():
    sections = _article_sections(ARTICLE.read_text())
    for section, fragment, _ in CLAIMS:
        assert fragment in sections[section], f"§{section} of the article does not say {fragment!r}"
    named = [probe for _, _, probes in CLAIMS for probe in probes]
    rows = [r.probe.__name__ for r in ROWS]
    assert sorted(named) == sorted(rows), \
        f"rows with no claim: {set(rows) - set(named)}; claims naming no row or a row twice: " \
        f"{set(named) - set(rows) or {p for p in named if named.count(p) > 1}}"
    assert all(probes for _, _, probes in CLAIMS)
    by_probe = {r.probe.__name__: r for r in ROWS}
    for section, fragment, probes in CLAIMS:
        assert {by_probe[p].section for p in probes} == {section}, f"{fragment!r}: rows of another section"


@needs_article
def test_every_torch_api_the_article_names_is_in_a_row_or_said_to_be_no_claim():
    """Derived from the article: an API it names that no row mentions is a claim the index lacks (as
    `@torch.inference_mode()` was), unless NOT_CLAIMS gives the reason it is none."""
    named = sorted({name.rstrip(".") for name in API.findall(ARTICLE.read_text())})
    rows = " ".join(r.claim for r in ROWS) + " ".join(fragment for _, fragment, _ in CLAIMS if len(fragment) < 40)
    missing = [n for n in named if n not in NOT_CLAIMS and n not in rows and n.rsplit(".", 1)[-1] not in rows]
    assert not missing, f"the article names {missing}, which no row checks: add a row or say why in NOT_CLAIMS"
    assert set(NOT_CLAIMS) <= set(named), f"NOT_CLAIMS names APIs the article does not: {set(NOT_CLAIMS) - set(named)}"


# --- every probe can return every verdict it names ---------------------------------------------------------------

def _module_functions(module) -> dict[str, ast.FunctionDef]:
    return {f.name: f for f in ast.parse(inspect.getsource(module)).body if isinstance(f, ast.FunctionDef)}


def _own_returns(fn: ast.FunctionDef) -> list[ast.Return]:
    nested = {id(n) for d in ast.walk(fn) if d is not fn and isinstance(d, (ast.FunctionDef, ast.Lambda))
              for n in ast.walk(d)}
    return [n for n in ast.walk(fn) if isinstance(n, ast.Return) and id(n) not in nested and n.value is not None]


def _verdicts(e: ast.expr, functions: dict[str, ast.FunctionDef]) -> set[str]:
    """The verdicts an expression a probe returns can be, read from the code: literals, verdict(...) (true or false),
    parts(...) (all three), a conditional, a dict's .get, or a helper of the same module."""
    if isinstance(e, ast.Constant) and isinstance(e.value, str):
        return {e.value}
    if isinstance(e, ast.IfExp):
        return _verdicts(e.body, functions) | _verdicts(e.orelse, functions)
    if isinstance(e, ast.Call) and isinstance(e.func, ast.Name):
        if e.func.id == "verdict":
            return {"true", "false"}
        if e.func.id == "parts":
            return set(VERDICTS) if len(e.args) > 1 else {"true", "false"}
        if e.func.id in functions:
            return set().union(*(_verdicts(r.value, functions) for r in _own_returns(functions[e.func.id])))
    if isinstance(e, ast.Call) and isinstance(e.func, ast.Attribute) and e.func.attr == "get" \
            and isinstance(e.func.value, ast.Dict):
        return {v.value for v in e.func.value.values} | _verdicts(e.args[1], functions)
    raise AssertionError(f"cannot read which verdicts `{ast.unparse(e)}` returns")


def _probe_verdicts(r) -> set[str]:
    functions = _module_functions(sys.modules[r.probe.__module__])
    return set().union(*(_verdicts(ret.value, functions) for ret in _own_returns(functions[r.probe.__name__])))


@pytest.mark.parametrize("r", ROWS, ids=_id)
def test_a_probe_names_two_verdicts_or_carries_a_fixed_one(r):
    """A probe that can return one verdict only is that verdict written down, not a test of the claim."""
    named = _probe_verdicts(r)
    assert named <= set(VERDICTS), f"it returns {named - set(VERDICTS)}"
    if r.fixed:
        assert named <= {r.fixed} | (set(VERDICTS) if named else set()) and (not named or r.fixed in named), \
            f"fixed {r.fixed!r}, but the probe returns {named}"
    else:
        assert len(named) >= 2, f"the probe can only return {named}"


def _decisions():
    """Each probe module's deciding helper (`_..._verdict`) whose arguments are all bools."""
    # Sorted by name: a set of modules iterates in id() order, which differs between
    # processes, and pytest-xdist's workers must collect the same tests in the same order.
    for module in sorted({sys.modules[r.probe.__module__] for r in ROWS}, key=lambda m: m.__name__):
        for name, fn in vars(module).items():
            if name.endswith("_verdict") and callable(fn):
                hints = inspect.signature(fn).parameters.values()
                if all(p.annotation in (bool, "bool") for p in hints):
                    yield pytest.param(module, name, id=f"{module.__name__.rsplit('.', 1)[-1]}.{name}")


@pytest.mark.parametrize("module, name", list(_decisions()))
def test_every_verdict_a_deciding_helper_names_is_reached_by_some_observation(module, name):
    fn = getattr(module, name)
    arity = len(inspect.signature(fn).parameters)
    reached = {fn(*facts) for facts in itertools.product((False, True), repeat=arity)}
    named = set().union(*(_verdicts(r.value, _module_functions(module)) for r in
                          _own_returns(_module_functions(module)[name])))
    assert reached == named, f"{name} names {named} but reaches only {reached}"


def test_the_decision_helpers_cover_the_rewritten_probes():
    names = {p.values[1] for p in _decisions()}
    assert {"_options_verdict", "_dtype_verdict", "_buffer_fix_verdict"} <= names, names


class _FakeCudart:
    """Stands in for libcudart: a driver and runtime version, and what cudaGetDeviceCount returns."""

    def __init__(self, driver: int, runtime: int, error: int):
        self.values, self.error = {"cudaDriverGetVersion": driver, "cudaRuntimeGetVersion": runtime}, error

    def __getattr__(self, name):
        def call(pointer):
            if name in self.values:
                pointer._obj.value = self.values[name]
                return 0
            return self.error
        return call


@pytest.mark.parametrize("driver, runtime, error, expected", [
    (0, 13000, 35, "false"),                 # no driver: older than any runtime
    (12020, 13000, 35, "false"),             # a driver older than the runtime
    (13010, 13000, 35, "partly true"),       # the message with a driver as new as the runtime: an upgrade could
    (13010, 13000, 0, "n/a"),                # a working driver cannot produce the message
])
def test_the_driver_probe_returns_each_of_its_verdicts(monkeypatch, driver, runtime, error, expected):
    from claims.probes import deployment

    monkeypatch.setattr(deployment.glob, "glob", lambda *a, **k: ["libcudart.so.13"])
    monkeypatch.setattr(deployment.ctypes, "CDLL", lambda path: _FakeCudart(driver, runtime, error))
    (r,) = [r for r in ROWS if r.probe is deployment.driver_insufficient]
    assert run_row(r)[0] == expected
