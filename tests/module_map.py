"""The package map in nbhelpers/__init__.py, read: each module's layer and the notebooks that import it."""
from __future__ import annotations

import re
from pathlib import Path

ROW = re.compile(r"^\| (\S+) +\| (\S+) +\| ([\d -]+?|all) +\| .+\|$")
ALL = {f"{n:02d}" for n in range(14)}


def read_map(doc: str) -> dict[str, tuple[str, set[str]]]:
    """module -> (layer, notebooks) from the map's table."""
    rows = {}
    for line in doc.splitlines():
        m = ROW.match(line.strip())
        if m and m.group(1) != "module":
            rows[m.group(1)] = (m.group(2), ALL if m.group(3) == "all" else set(m.group(3).split()) - {"-"})
    return rows


def modules_in(package: Path) -> dict[str, list[Path]]:
    """Each top-level module or subpackage of the package -> its files."""
    found = {p.stem: [p] for p in package.glob("*.py") if p.stem != "__init__"}
    found |= {d.name: sorted(d.rglob("*.py")) for d in package.iterdir() if (d / "__init__.py").is_file()}
    return found
