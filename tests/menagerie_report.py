"""The menagerie's report: menagerie/report.json (every row as measured) and menagerie/README.md (the table)."""
from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from nbhelpers.atomic import write_atomic

LENSES = ("trace", "forward_graph", "memory", "work", "diagnose")
STATUSES = ("agrees", "disagrees", "cannot see", "fails")
NOT_RUN = "not run"          # a lens left out of a run (--lenses), as for the models past the time a run had
_MARK = {"agrees": "agrees", "disagrees": "**disagrees**", "cannot see": "cannot see", "fails": "**fails**"}


def load(folder: Path) -> dict[str, dict]:
    path = folder / "report.json"
    return {row["name"]: row for row in json.loads(path.read_text())["models"]} if path.is_file() else {}


def save(report: dict[str, dict], folder: Path, order: list[str]) -> None:
    rows = [report[name] for name in order if name in report]
    folder.mkdir(parents=True, exist_ok=True)
    write_atomic(folder / "report.json", (json.dumps({"models": rows, "counts": counts(rows)}, indent=1) + "\n")
                 .encode())
    write_atomic(folder / "README.md", table(rows).encode())


def counts(rows: list[dict]) -> dict:
    ran = [r for r in rows if "lenses" in r]
    by_lens = {lens: dict(Counter(r["lenses"][lens]["status"] if lens in r["lenses"] else NOT_RUN for r in ran))
               for lens in LENSES}
    return {"models": len(rows), "built": sum(r.get("builds", False) for r in rows), "measured": len(ran),
            "timed_out": sum(bool(r.get("timed_out")) for r in rows),
            "crashed": sum(bool(r.get("crashed")) for r in rows),
            "by_source": dict(Counter(r["name"].split("/")[0] for r in ran)), "by_lens": by_lens}


def one_line(row: dict) -> str:
    if "lenses" not in row:
        return f"{row['name']}: {row.get('error', '')}"
    said = ", ".join(f"{lens} {row['lenses'][lens]['status']}" for lens in LENSES if lens in row["lenses"])
    return f"{row['name']} ({row['s']} s): {said}"


def table(rows: list[dict]) -> str:
    c = counts(rows)
    ran = [r for r in rows if "lenses" in r]
    lines = ["# The menagerie", "",
             "Every instrument against PyTorch's own tool on real architectures: `make menagerie` "
             "(tests/menagerie.py; the models and how each is called: tests/menagerie_models.py). One process "
             "per model on this 2-core machine, two at a time; torch 2.14.1, torchvision 0.29.1, timm 1.0.31, "
             "transformers 5.23.0; random weights, nothing downloaded.", "",
             f"{c['measured']} models measured ({', '.join(f'{n} {s}' for s, n in c['by_source'].items())}); "
             f"{c['models'] - c['built']} did not build, {c['timed_out']} timed out, {c['crashed']} crashed "
             "(listed at the end).", "",
             "| lens | " + " | ".join((*STATUSES, NOT_RUN)) + " |", "|---|" + "---:|" * (len(STATUSES) + 1)]
    for lens in LENSES:
        lines.append(f"| {lens} | " + " | ".join(str(c["by_lens"][lens].get(s, 0)) for s in (*STATUSES, NOT_RUN))
                     + " |")
    slowest = sorted(ran, key=lambda r: -r["s"])[:5]
    lines += ["", "Slowest five (all lenses, seconds): " +
              ", ".join(f"{r['name']} {r['s']:.0f}" for r in slowest) + ".", "",
              "## Each model", "",
              "| model | parameters | input | " + " | ".join(LENSES) + " | s |",
              "|---|---:|---|" + "---|" * len(LENSES) + "---:|"]
    for r in ran:
        cells = [_MARK[r["lenses"][lens]["status"]] if lens in r["lenses"] else NOT_RUN for lens in LENSES]
        lines.append(f"| `{r['name']}` | {r['parameters']:,} | {r['input']} | " + " | ".join(cells) +
                     f" | {r['s']:.1f} |")
    notes = [(r["name"], lens, r["lenses"][lens]) for r in ran for lens in LENSES
             if lens in r["lenses"] and r["lenses"][lens]["status"] != "agrees"]
    if notes:
        lines += ["", "## What did not agree, and why", "", "| model | lens | status | what it said |",
                  "|---|---|---|---|"]
        lines += [f"| `{n}` | {lens} | {v['status']} | {_cell(v['detail'])} |" for n, lens, v in notes]
    other = [r for r in rows if "lenses" not in r]
    if other:
        lines += ["", "## Not measured", "", "| model | why |", "|---|---|"]
        lines += [f"| `{r['name']}` | {_cell(r.get('error', ''))} |" for r in other]
    return "\n".join(lines) + "\n"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")
