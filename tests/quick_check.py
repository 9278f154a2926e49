"""`make check`, the quick loop: lint first (the Makefile), then one pytest run of every test the last
`make durations` measured under SLOW_S seconds, every test of a test file the change touches, and the notebooks
the change touches under nbval. `make test` runs everything.

"The change" is what differs from BASE (default `main`): commits since the branch left it, staged and unstaged
edits, and new files git does not ignore. A notebook is touched when it changed itself, when a module it imports
changed (the module map's notebook column, through every module that imports the changed one), or when what
every notebook passes through changed (conftest.py, the sanitize file, the notebook rules, the pins)."""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

from tests.durations import SLOW_S
from tests.module_map import modules_in, read_map
from tests.source_imports import imported_modules

REPO = Path(__file__).resolve().parent.parent
EVERY_NOTEBOOK = {"conftest.py", "tests/nbval_sanitize.cfg", "tests/notebook_rules.py", "pyproject.toml",
                  "environment.yml", "tests/offline_guard/sitecustomize.py"}


def changed_files(base: str = "main") -> set[str]:
    """Paths (relative to the repository) that differ from `base`'s merge base, committed or not."""
    def git(*args: str) -> list[str]:
        done = subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True)
        return done.stdout.split() if done.returncode == 0 else []
    since = (git("merge-base", base, "HEAD") or ["HEAD"])[0]
    return set(git("diff", "--name-only", since)) | set(git("ls-files", "--others", "--exclude-standard"))


def module_of(path: str, modules: dict[str, list[Path]]) -> str | None:
    """The nbhelpers module a changed file belongs to: its own module, or the one whose code names it (a .js)."""
    parts = Path(path).parts
    if len(parts) < 2 or parts[0] != "nbhelpers":
        return None
    name = Path(parts[1]).stem
    if name in modules:
        return name
    return next((m for m, files in sorted(modules.items()) if any(parts[-1] in f.read_text() for f in files)), None)


def importers(changed: set[str], modules: dict[str, list[Path]]) -> set[str]:
    """`changed` and every module that imports one of them, directly or through others."""
    imports = {m: {n.split(".")[1] for f in files for n in imported_modules(f) if n.startswith("nbhelpers.")}
               for m, files in modules.items()}
    found = set(changed)
    while grown := {m for m, used in imports.items() if used & found} - found:
        found |= grown
    return found


def touched_notebooks(changed: set[str], package: Path, doc: str) -> list[str]:
    notebooks = sorted(p.relative_to(REPO).as_posix() for p in (REPO / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    if changed & EVERY_NOTEBOOK:
        return notebooks
    modules, the_map = modules_in(package), read_map(doc)
    hit = importers({m for path in changed if (m := module_of(path, modules))}, modules)
    numbers = {nb for m in hit for nb in the_map.get(m, ("", set()))[1]}
    return [nb for nb in notebooks if nb in changed or Path(nb).name[:2] in numbers]


def touched_test_files(changed: set[str], package: Path) -> list[str]:
    """Test files that changed, or that import a changed module of the package or of tests/."""
    modules = modules_in(package)
    hit = importers({m for path in changed if (m := module_of(path, modules))}, modules)
    dotted = {f"nbhelpers.{m}" for m in hit} | {p[:-3].replace("/", ".") for p in changed if p.endswith(".py")}
    tests = sorted((REPO / "tests").glob("test_*.py"))
    return [t.relative_to(REPO).as_posix() for t in tests
            if t.relative_to(REPO).as_posix() in changed or imported_modules(t) & dotted]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", default="main", help="the branch the change is measured against")
    parser.add_argument("--dry-run", action="store_true", help="print the pytest command, do not run it")
    parser.add_argument("pytest_args", nargs="*")
    args = parser.parse_args(argv)
    import nbhelpers

    changed = changed_files(args.base)
    package = Path(nbhelpers.__file__).parent
    notebooks, keep = touched_notebooks(changed, package, nbhelpers.__doc__), touched_test_files(changed, package)
    print(f"make check: {len(changed)} changed file(s) against {args.base}; notebooks under nbval: "
          f"{' '.join(Path(n).name[:2] for n in notebooks) or 'none'}; test files in full: "
          f"{' '.join(Path(t).name for t in keep) or 'none'}; every other test measured under {SLOW_S:.0f} s", flush=True)
    command = [sys.executable, "-m", "pytest", "--quick", *[f"--keep={t}" for t in keep], *args.pytest_args,
               "tests", *notebooks]
    if args.dry_run:
        print(" ".join(command))
        return 0
    return subprocess.run(command, cwd=REPO, env=os.environ).returncode


if __name__ == "__main__":
    sys.exit(main())
