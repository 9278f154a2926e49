"""python -m nbhelpers doctor | execute NOTEBOOK... | html --out DIR NOTEBOOK... | diagnose MODULE:FACTORY ..."""
from __future__ import annotations

import argparse
import platform
import sys
from pathlib import Path


def _doctor() -> int:
    from nbhelpers import data, devices

    device = devices.pick_device()
    print(devices.banner(device))
    print(f"Python {platform.python_version()} at {sys.executable}")   # a terminal's report may name it
    print(devices.render_capabilities(devices.capabilities()))
    try:
        train, test = data.digits(train=True), data.digits(train=False)
    except data.DataIntegrityError as e:
        print(f"digits data: FAILED: {e}")
        return 1
    print(f"digits data: verified, {len(train)} train + {len(test)} test images in {data.DATA_DIR}")
    return 0


def _execute(notebooks: list[Path]) -> int:
    import time

    from nbhelpers._tools.notebook_tools import execute_notebook

    for nb in notebooks:
        print(f"executing {nb} ...", flush=True)
        start = time.perf_counter()
        execute_notebook(nb)
        print(f"executed {nb} in {time.perf_counter() - start:.0f} s (kernel start included)", flush=True)
    return 0


def _html(notebooks: list[Path], out: Path) -> int:
    from nbhelpers._tools.notebook_tools import build_site, views_without_state

    for path, cells in views_without_state(notebooks).items():
        print(f"html: {path}: code cell(s) {', '.join(map(str, cells))} show widget views whose state was not "
              "saved with the notebook; their pages show the stored pictures. To get the live views back, run "
              f"the cells in make lab and save, or `make execute NB={path}`", file=sys.stderr)
    pages = build_site(notebooks, out)
    print(f"wrote {len(pages)} page(s) and index.html to {out}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m nbhelpers", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("doctor", help="print what this machine can run, and check the shipped data")
    run = sub.add_parser("execute", help="re-execute notebooks in place, refreshing stored outputs")
    run.add_argument("notebooks", nargs="+", type=Path)
    site = sub.add_parser("html", help="build a static site that renders offline")
    site.add_argument("--out", type=Path, default=Path("build/site"))
    site.add_argument("notebooks", nargs="+", type=Path)
    from nbhelpers._tools import diagnose_cli

    diagnose_cli.add_parser(sub)
    args = parser.parse_args(argv)
    if args.command == "diagnose":
        return diagnose_cli.main(args)
    if args.command == "doctor":
        return _doctor()
    if args.command == "execute":
        return _execute(args.notebooks)
    return _html(args.notebooks, args.out)


if __name__ == "__main__":
    sys.exit(main())
