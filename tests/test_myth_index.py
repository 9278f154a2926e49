"""The myth index (notebooks/README.md): every row has a verdict and points to a section that exists."""
import functools
import re
from pathlib import Path

import nbformat
import pytest

from nbhelpers._claims import LINK, index_rows  # the same parser `make claims` reads the index with

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
# A claim about history is settled by PyTorch's own release notes, not by a cell.
RELEASE_NOTES = re.compile(r"^\[release notes\]\(https://github\.com/pytorch/pytorch/releases/tag/v2\.\d+\.\d+\)$")
VERDICTS = {"true", "false", "partly true", "not checkable"}
CHANGED = re.compile(r"^right in 2\.1, changed (in 2\.\d+|since)$")   # right for the article's torch, not now
ORDER = ("false", "partly true", "true", "right in 2.1, changed since", "not checkable")


def _rows():
    return index_rows((NOTEBOOKS / "README.md").read_text())


@functools.lru_cache
def _headings(notebook: Path) -> list[str]:
    nb = nbformat.read(notebook, as_version=4)
    return [line[3:] for c in nb.cells if c.cell_type == "markdown" for line in c.source.splitlines()
            if line.startswith("## ")]


def _kind(verdict: str) -> str:
    return "right in 2.1, changed since" if CHANGED.match(verdict) else verdict


def test_the_index_has_rows_and_counts_that_match_them():
    rows = _rows()
    assert len(rows) >= 100
    counts = {k: sum(_kind(r["verdict"]) == k for r in rows) for k in ORDER}
    summary = ", ".join(f"{counts[k]} {k}" for k in ORDER)
    assert f"{len(rows)} claims: {summary}." in (NOTEBOOKS / "README.md").read_text()
    top = (NOTEBOOKS.parent / "README.md").read_text()
    assert f"{len(rows)} claims, of which {counts['false']} are false" in top     # the project README agrees


def test_rows_are_in_article_order():
    sections = [[int(x) for x in r["section"].split(".")] for r in _rows()]
    assert sections == sorted(sections)


@pytest.mark.parametrize("row", _rows(), ids=lambda r: f"§{r['section']} {r['claim'][:40]}")
def test_each_claim_points_to_an_existing_section(row):
    assert row["verdict"] in VERDICTS or CHANGED.match(row["verdict"]), row["verdict"]
    if row["verdict"] == "not checkable" and row["where"] == "—":
        return
    if RELEASE_NOTES.match(row["where"]):
        assert row["heading"].startswith("release history"), row["heading"]
        return
    link = LINK.match(row["where"])
    assert link, f"{row['where']!r} is not a [NN](NN_topic.ipynb) link"
    notebook = NOTEBOOKS / link["file"]
    assert notebook.is_file(), f"{link['file']} does not exist"
    assert any(h.startswith(row["heading"]) for h in _headings(notebook)), \
        f"{link['file']} has no section starting with {row['heading']!r}"


@functools.lru_cache
def _section_texts(notebook: Path) -> dict[str, str]:
    """Each '## ' heading's markdown, up to the next '## ' heading (a cell may hold the end of one section
    and the start of the next)."""
    nb = nbformat.read(notebook, as_version=4)
    texts, current = {}, None
    for cell in nb.cells:
        if cell.cell_type != "markdown":
            continue
        for line in cell.source.splitlines():
            if line.startswith("## "):
                current = line[3:]
                texts[current] = ""
            elif current is not None:
                texts[current] += line + "\n"
    return texts


WRONG = [r for r in _rows() if r["verdict"] in ("false", "partly true") and LINK.match(r["where"])]


@pytest.mark.parametrize("row", WRONG, ids=lambda r: f"§{r['section']} {r['claim'][:40]}")
def test_each_wrong_claim_has_a_myth_box_in_its_section(row):
    """The article's wrong statement is quoted where the series settles it, as a Myth / Fact box."""
    texts = _section_texts(NOTEBOOKS / LINK.match(row["where"])["file"])
    section = next(t for h, t in texts.items() if h.startswith(row["heading"]))
    assert "> **Myth" in section and "> **Fact:**" in section, \
        f"section {row['heading']!r} settles a wrong claim but has no '> **Myth ...' / '> **Fact:**' box"
