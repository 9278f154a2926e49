"""The probes' two outputs: a report per torch release (claims/torch-VERSION.md) and the myth index
(notebooks/README.md), which shows every row's verdict on each release in VERSIONS that has a report."""
from __future__ import annotations

import platform
import re
from pathlib import Path

from claims.probes import CLAIMS, VERDICTS, VERSIONS, Row, number, one_line

__all__ = ["render_report", "read_report", "reports", "release", "changed_in", "summary", "kind", "KINDS",
           "render_index", "SHORT"]

SHORT = {"true": "T", "false": "F", "partly true": "P", "n/a": "–"}
REPORT_ROW = re.compile(r"^\| (?P<number>\d+) \| (?P<section>[\d.]+) \| (?P<result>true|false|partly true|n/a|error) \|"
                        r" (?P<claim>.+?) \| (?P<detail>.*) \|$")
NOTEBOOKS = CLAIMS.parent / "notebooks"


def render_report(torch_version: str, results: list[tuple[Row, str, str]]) -> str:
    decided = [r for _, r, _ in results if r in VERDICTS]
    counts = ", ".join(f"{decided.count(v)} {v}" for v in VERDICTS)
    lines = [f"# The myth index's probes on torch {torch_version.split('+')[0]}", "",
             f"Written by `python -m claims.probes` (`make claims`) on torch {torch_version}, Python "
             f"{'.'.join(platform.python_version_tuple()[:2])}, without a GPU. Each row's result is the article's "
             "claim's verdict on this torch; n/a says why it could not be decided here.", "",
             f"{len(results)} rows: {len(decided)} decided ({counts}), "
             f"{sum(r == 'n/a' for _, r, _ in results)} n/a, {sum(r == 'error' for _, r, _ in results)} errors.", "",
             "| # | § | result | claim | detail |", "|---|---|---|---|---|"]
    for r, result, detail in results:
        lines.append(f"| {number(r)} | {r.section} | {result} | {one_line(r.claim)} | {one_line(detail)} |")
    return "\n".join(lines) + "\n"


def read_report(path: Path) -> dict[int, tuple[str, str, str]]:
    """row number -> (result, detail, claim) from a committed report."""
    rows = {}
    for line in path.read_text().splitlines():
        if m := REPORT_ROW.match(line):
            rows[int(m["number"])] = (m["result"], m["detail"], m["claim"])
    return rows


def reports() -> dict[str, dict[int, tuple[str, str, str]]]:
    """The committed reports of VERSIONS, by version."""
    return {v: read_report(CLAIMS / f"torch-{v}.md") for v in VERSIONS if (CLAIMS / f"torch-{v}.md").exists()}


def release(version: str) -> tuple[int, ...]:
    return tuple(int(x) for x in version.split("."))


def changed_in(r: Row) -> list[tuple[int, ...]]:
    """The torch releases a row's `changed` note names: "2.4: ..." or "torchvision 0.17 (with torch 2.2): ..."."""
    return [release(v) for v in re.findall(r"(?:^|; )(\d+\.\d+):|with torch (\d+\.\d+)\)", r.changed)
            for v in v if v]


def summary(r: Row, results: dict[str, str]) -> str:
    """The row's verdict across releases: its fixed verdict; the one verdict the releases that decide it agree
    on; or, when they differ, the first and the last, and the release the `changed` note names."""
    if r.fixed:
        return r.fixed
    decided = [(v, results[v]) for v in sorted(results, key=release) if results[v] in VERDICTS]
    if not decided:
        return "undecided"
    (first_version, first), (_, last) = decided[0], decided[-1]
    if len({res for _, res in decided}) == 1:
        return first
    since = ".".join(map(str, changed_in(r)[-1])) if changed_in(r) else "?"
    if (first_version, first, last) == ("2.1.2", "true", "false"):
        return f"right in 2.1, changed in {since}"
    return f"{first} in {first_version.rsplit('.', 1)[0]}, {last} since {since}"


def kind(summary_: str) -> str:
    """The index's tally groups a summary under one of KINDS."""
    return "changed since 2.1" if " since " in summary_ or "changed in" in summary_ else summary_


KINDS = ("false", "partly true", "true", "changed since 2.1", "not checkable")


def _notebook_link(where: str) -> tuple[str, str]:
    if where == "—":
        return "—", "—"
    number_, heading = where.split(" ", 1)
    (path,) = NOTEBOOKS.glob(f"{number_}_*.ipynb")
    return f"[{number_}]({path.name})", heading


def _source_cell(source: str) -> str:
    if source.startswith("https://"):
        label = re.sub(r"^https://github\.com/pytorch/pytorch/", "", source)
        return f"[{label}]({source})"
    path, symbol = source.split(" ", 1)
    return f"`{path}` `{symbol}`"


INTRO = """# The myth index

Every technical claim of the article the series grew from ("【PyTorch】2.1 使用Pytorch构建一个神经网络", "building a
neural network with PyTorch 2.1"), in the article's order, with its verdict and where the series settles it.
`claims/probes/` holds one probe per row: the smallest code that decides the claim, run on each release below
(`make claims CLAIMS_TORCH=...` wrote `claims/torch-VERSION.md`); T true, F false, P partly true, – not decided
there (the report says why: it needs CUDA, an API that release lacks, or the claim is about 2.1 itself). The
verdict is the probes' when the releases agree; when they differ it says how, and names the release and the PR
or release note that changed it. A claim no code can decide (history, another vendor's hardware) carries the
verdict of its cited source. The source column is the line of the pinned torch (2.14.1) that decides the
verdict, checked by the tests, or a pinned PyTorch URL. This file is written by `make index`
(`python -m claims.probes --index notebooks/README.md`); `tests/test_myth_index.py` fails when it, the probes
or the reports disagree.
"""


def render_index(rows: list[Row], by_version: dict[str, dict[int, tuple[str, str]]]) -> str:
    verdicts = {}
    lines = ["| # | § | claim | verdict | " + " · ".join(VERSIONS) + " | source | notebook | section |",
             "|---|---|---|---|---|---|---|---|"]
    for n, r in enumerate(rows, 1):
        results = {v: by_version[v][n][0] for v in VERSIONS if v in by_version and n in by_version[v]}
        verdicts[n] = summary(r, results)
        shown = " ".join(SHORT.get(results.get(v, "n/a"), "?") for v in VERSIONS)
        note = f" ({r.changed.split(':', 1)[1].strip()})" if r.changed else ""
        link, heading = _notebook_link(r.where)
        lines.append(f"| {n} | {r.section} | {one_line(r.claim)} | {verdicts[n]}{one_line(note)} | {shown} | "
                     f"{_source_cell(r.source)} | {link} | {one_line(heading)} |")
    counts = {k: sum(kind(v) == k for v in verdicts.values()) for k in KINDS}
    tally = f"{len(rows)} claims: " + ", ".join(f"{counts[k]} {k}" for k in KINDS) + "."
    return INTRO + "\n" + tally + "\n\n" + "\n".join(lines) + "\n"
