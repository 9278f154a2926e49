"""python -m claims.probes --out claims/torch-VERSION.md   |   python -m claims.probes --index notebooks/README.md"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path


def _write(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m claims.probes", description=__doc__)
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument("--out", type=Path, help="run every probe on this torch and write its report here")
    what.add_argument("--index", type=Path, help="write the myth index from the rows and the committed reports")
    options = parser.parse_args(argv)
    import torch

    from claims.probes import report, run_all

    if options.index:
        from claims.probes import _load

        _write(options.index, report.render_index(_load(), report.reports()))
        print(f"wrote {options.index}")
        return 0
    results = run_all()
    _write(options.out, report.render_report(torch.__version__, results))
    errors = [(r.section, r.claim, detail) for r, result, detail in results if result == "error"]
    for section, claim, detail in errors:
        print(f"error in the probe of §{section} {claim[:60]!r}: {detail}", file=sys.stderr)
    print(f"wrote {options.out}: {len(results)} rows, {len(errors)} errors")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
