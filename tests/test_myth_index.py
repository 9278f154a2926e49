"""The myth index (notebooks/README.md): every row has a verdict and points to a section that exists."""
import re
from pathlib import Path

import nbformat
import pytest

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
ROW = re.compile(r"^\| (?P<section>[\d.]+) \| (?P<claim>.+?) \| (?P<verdict>[^|]+?) \| (?P<where>[^|]+?) \| (?P<heading>.+) \|$")
LINK = re.compile(r"^\[\d\d\]\((?P<file>\d\d_[a-z0-9_]+\.ipynb)\)$")
VERDICTS = {"true", "false", "partly true", "not checkable"}


def _rows():
    lines = (NOTEBOOKS / "README.md").read_text().splitlines()
    return [m.groupdict() for m in map(ROW.match, lines) if m]


def _headings(notebook: Path) -> list[str]:
    nb = nbformat.read(notebook, as_version=4)
    return [line[3:] for c in nb.cells if c.cell_type == "markdown" for line in c.source.splitlines()
            if line.startswith("## ")]


def test_the_index_has_rows_and_a_correct_count():
    rows = _rows()
    assert len(rows) >= 60
    counts = {v: sum(r["verdict"] == v for r in rows) for v in VERDICTS}
    summary = ", ".join(f"{counts[k]} {k}" for k in ("false", "partly true", "true", "not checkable"))
    assert f"{len(rows)} claims: {summary}." in (NOTEBOOKS / "README.md").read_text()


@pytest.mark.parametrize("row", _rows(), ids=lambda r: f"§{r['section']} {r['claim'][:40]}")
def test_each_claim_points_to_an_existing_section(row):
    assert row["verdict"] in VERDICTS
    if row["verdict"] == "not checkable" and row["where"] == "—":
        return
    link = LINK.match(row["where"])
    assert link, f"{row['where']!r} is not a [NN](NN_topic.ipynb) link"
    notebook = NOTEBOOKS / link["file"]
    assert notebook.is_file(), f"{link['file']} does not exist"
    assert any(h.startswith(row["heading"]) for h in _headings(notebook)), \
        f"{link['file']} has no section starting with {row['heading']!r}"
