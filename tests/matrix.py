"""`make matrix`: the whole suite on every Python 3.10-3.13 this machine has, each in a venv of its own.

    python3 tests/matrix.py [--pythons "python3.10 /usr/bin/python3.11"] [--second] [--pytest-args ARGS]
                            [--report matrix/README.md]

It looks for interpreters on PATH (python3.10 ... python3.13, python3), in pyenv's versions and in /usr/bin and
/usr/local/bin, and keeps each distinct executable once: Debian's 3.11.2 and pyenv's 3.11.7 are two
interpreters. Each gets `.venv-matrix/<version>`, built by `make setup` from the project's own pins, and runs
`make test` there. `--second` (CI) runs only the oldest interpreter found besides `--default` (the one `make
test` uses). `--setup-only` builds the venvs and stops (CI builds the second one beside the first). The table is
printed and written to the report, with results.json beside it; every run's log is under build/matrix/. Standard
library only: it runs before any venv exists.
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import shlex
import shutil
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from dataclasses import asdict, dataclass, field
from pathlib import Path

# its own REPO, not tests.REPO: make matrix runs this file as a script, with no venv and no package path
REPO = Path(__file__).resolve().parent.parent
SUPPORTED = ((3, 10), (3, 11), (3, 12), (3, 13))
_ASK = "import platform, sys; print(platform.python_version()); print(sys.executable)"


@dataclass(frozen=True)
class Interpreter:
    version: str           # "3.11.7"
    executable: str        # its real path

    @property
    def key(self) -> tuple[int, ...]:
        return tuple(int(part) for part in self.version.split(".")[:3] if part.isdigit())


@dataclass
class Outcome:
    interpreter: Interpreter
    result: str                      # "passed", "failed" or "set-up failed"
    passed: int = 0
    failed: int = 0
    skipped: int = 0
    failures: list[str] = field(default_factory=list)
    setup_s: float = 0.0
    suite_s: float = 0.0
    log: str = ""
    setup_attempts: int = 1
    setup_tail: list[str] = field(default_factory=list)


def candidates(env: dict[str, str]) -> list[str]:
    """Every place an interpreter of a supported version may be, found or not."""
    names = [f"python{major}.{minor}" for major, minor in SUPPORTED] + ["python3"]
    found = [shutil.which(name, path=env.get("PATH")) for name in names]
    pyenv = Path(env.get("PYENV_ROOT") or Path(env.get("HOME", "~")).expanduser() / ".pyenv")
    for major, minor in SUPPORTED:
        found += sorted(glob.glob(str(pyenv / "versions" / f"{major}.{minor}.*" / "bin" / f"python{major}.{minor}")))
        found += [f"{folder}/python{major}.{minor}" for folder in ("/usr/bin", "/usr/local/bin")]
    return [path for path in dict.fromkeys(found) if path]


def identify(command: str) -> Interpreter | None:
    """The interpreter `command` starts, or None when it does not run (a pyenv shim of another version)."""
    try:
        done = subprocess.run([command, "-c", _ASK], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = done.stdout.split()
    if done.returncode != 0 or len(lines) != 2:
        return None
    return Interpreter(lines[0], os.path.realpath(lines[1]))


def supported(interpreters) -> list[Interpreter]:
    """The distinct interpreters of supported versions, oldest first."""
    unique = {i.executable: i for i in interpreters if i is not None and i.key[:2] in SUPPORTED}
    return sorted(unique.values(), key=lambda i: (i.key, i.executable))


def second(found: list[Interpreter], default: Interpreter | None) -> list[Interpreter]:
    """The oldest interpreter besides the default one, as a list of at most one."""
    others = [i for i in found if default is None or i.executable != default.executable]
    return others[:1]


def venv_for(interpreter: Interpreter, taken: set[Path]) -> Path:
    path, n = REPO / ".venv-matrix" / interpreter.version, 1
    while path in taken:                     # two builds of one version (a distribution's and pyenv's)
        n += 1
        path = REPO / ".venv-matrix" / f"{interpreter.version}-{n}"
    taken.add(path)
    return path


def read_junit(path: Path) -> tuple[int, int, int, list[str]]:
    """(passed, failed, skipped, failing test ids) from pytest's JUnit XML; failed counts errors too."""
    root = ET.parse(path).getroot()
    passed = failed = skipped = 0
    failures = []
    for case in root.iter("testcase"):
        kinds = {child.tag for child in case}
        if kinds & {"failure", "error"}:
            failed += 1
            failures.append(f"{case.get('classname', '')}::{case.get('name', '')}")
        elif "skipped" in kinds:
            skipped += 1
        else:
            passed += 1
    return passed, failed, skipped, failures


def _make(target: str, interpreter: Interpreter, venv: Path, log, extra: list[str], timeout_s: float) -> int:
    env = dict(os.environ, VENV=str(venv))     # the suite's own `make lab` uses the same venv
    command = ["make", "--no-print-directory", target, f"PYTHON={interpreter.executable}", f"VENV={venv}", *extra]
    log.write(f"$ {shlex.join(command)}\n")
    log.flush()
    try:
        return subprocess.run(command, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT,
                              timeout=timeout_s).returncode
    except subprocess.TimeoutExpired:
        log.write(f"\nmatrix: stopped after {timeout_s:.0f} s\n")
        return 124


def _set_up(interpreter: Interpreter, venv: Path, log, timeout_s: float) -> tuple[bool, int]:
    """`make setup` in `venv`: (whether it is ready, the attempts it took). One retry: a set-up that fails once
    is most often a download cut short (pip resumes from its cache); the log keeps both attempts."""
    for attempt in (1, 2):
        if _make("setup", interpreter, venv, log, [], timeout_s) == 0:
            return True, attempt
    return False, 2


def run_one(interpreter: Interpreter, venv: Path, pytest_args: str, logs: Path, timeout_s: float) -> Outcome:
    logs.mkdir(parents=True, exist_ok=True)
    log_path, junit = logs / f"{venv.name}.log", logs / f"{venv.name}.xml"
    junit.unlink(missing_ok=True)
    outcome = Outcome(interpreter, "set-up failed", log=str(log_path.relative_to(REPO)))
    with open(log_path, "w") as log:
        start = time.monotonic()
        ready, outcome.setup_attempts = _set_up(interpreter, venv, log, timeout_s)
        if not ready:
            outcome.setup_s = time.monotonic() - start
            log.flush()
            outcome.setup_tail = _tail(log_path)
            return outcome
        outcome.setup_s, start = time.monotonic() - start, time.monotonic()
        code = _make("test", interpreter, venv, log, [f"PYTEST_ARGS=--junitxml={junit} {pytest_args}".strip()],
                     timeout_s)
        outcome.suite_s = time.monotonic() - start
    if junit.exists():
        outcome.passed, outcome.failed, outcome.skipped, outcome.failures = read_junit(junit)
    outcome.result = "passed" if code == 0 else "failed"
    if code != 0 and not outcome.failures:
        outcome.failures = [f"make test exited with {code} (lint, or the run stopped): see {outcome.log}"]
    return outcome


def set_up_only(found: list[Interpreter], taken: set[Path], logs: Path, timeout_s: float) -> int:
    """`make setup` for each interpreter's venv (the venv a full run uses; the log `<venv>-setup.log` beside
    its), one retry as there; the exit status says whether every one is ready."""
    logs.mkdir(parents=True, exist_ok=True)
    failed = 0
    for interpreter in found:
        venv = venv_for(interpreter, taken)
        start = time.monotonic()
        with open(logs / f"{venv.name}-setup.log", "w") as log:
            ready, attempts = _set_up(interpreter, venv, log, timeout_s)
        print(f"matrix: {interpreter.version} set up in {venv.relative_to(REPO)}: "
              f"{'ready' if ready else 'failed'} after {time.monotonic() - start:.0f} s, "
              f"{attempts} {'try' if attempts == 1 else 'tries'}", flush=True)
        failed += not ready
    return 1 if failed else 0


def _tail(path: Path, lines: int = 25) -> list[str]:
    """The log's last lines as a fenced block, so that CI's output shows why a set-up failed."""
    text = path.read_text(errors="replace").splitlines()[-lines:]
    return ["```", *text, "```"]


def _where(executable: str) -> str:
    home = str(Path.home())
    return "~" + executable[len(home):] if executable.startswith(home + os.sep) else executable


def table(outcomes: list[Outcome], pytest_args: str, commit: str) -> str:
    """The report: one row per interpreter, then each failure by name."""
    scope = f"`make test PYTEST_ARGS='{pytest_args}'`" if pytest_args else "`make test`, the whole suite"
    lines = [f"# make matrix: {scope}, on every interpreter found", "",
             f"Commit {commit}; {time.strftime('%Y-%m-%d')}; {os.cpu_count()} CPU cores. Written by "
             f"`make matrix` (tests/matrix.py); each interpreter in its own venv under .venv-matrix/.", "",
             "| Python | executable | result | passed | failed | skipped | set-up | suite |",
             "|---|---|---|---|---|---|---|---|"]
    for o in outcomes:
        retried = f" ({o.setup_attempts} tries)" if o.setup_attempts > 1 else ""
        lines.append(f"| {o.interpreter.version} | `{_where(o.interpreter.executable)}` | {o.result} | {o.passed} | "
                     f"{o.failed} | {o.skipped} | {o.setup_s:.0f} s{retried} | {o.suite_s:.0f} s |")
    failing = [o for o in outcomes if o.failures or o.result == "set-up failed"]
    if failing:
        lines += ["", "## Failures", ""]
        for o in failing:
            names = o.failures or [f"make setup failed twice: see {o.log}; its last lines:"]
            lines += [f"- {o.interpreter.version}: {name}" for name in names] + o.setup_tail
    return "\n".join(lines) + "\n"


def _commit() -> str:
    def git(*args):
        return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True).stdout.strip()

    head = git("rev-parse", "--short", "HEAD") or "unknown"
    return head + (" with uncommitted changes" if git("status", "--porcelain", "--untracked-files=no") else "")


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def _run_and_say(interpreter: Interpreter, venv: Path, options) -> Outcome:
    print(f"matrix: {interpreter.version} in {venv.relative_to(REPO)} ...", flush=True)
    o = run_one(interpreter, venv, options.pytest_args, REPO / "build" / "matrix", options.timeout_s)
    print(f"matrix: {interpreter.version} {o.result}: {o.passed} passed, {o.failed} failed, {o.skipped} skipped; "
          f"set-up {o.setup_s:.0f} s, suite {o.suite_s:.0f} s (log: {o.log})", flush=True)
    return o


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tests/matrix.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--pythons", default=os.environ.get("PYTHONS", ""),
                        help="interpreters to run (names or paths, space-separated) instead of looking for them")
    parser.add_argument("--default", default="python3", help="the interpreter `make test` uses")
    parser.add_argument("--second", action="store_true",
                        help="only the oldest interpreter found besides --default (CI)")
    parser.add_argument("--pytest-args", default="", help="what to hand pytest, e.g. 'notebooks'")
    parser.add_argument("--report", type=Path, default=REPO / "matrix" / "README.md")
    parser.add_argument("--timeout-s", type=float, default=3600, help="per make command")
    parser.add_argument("--setup-only", action="store_true",
                        help="only build each venv (make setup), no suite and no report: CI builds the second "
                             "Python's while the first one's builds, and the later run finds it ready")
    options = parser.parse_args(argv)
    asked = shlex.split(options.pythons) or candidates(dict(os.environ))
    found = supported(identify(c) for c in asked)
    if options.second:
        found = second(found, identify(options.default))
    if not found:
        wanted = "a second interpreter besides " + options.default if options.second else "an interpreter"
        print(f"matrix: found no {wanted} among Python 3.10-3.13 (looked at: {', '.join(asked)}); install one "
              f"(pyenv install 3.10) or name it: PYTHONS=/path/to/python3.10 make matrix", file=sys.stderr)
        return 2
    print("matrix: " + ", ".join(f"{i.version} ({_where(i.executable)})" for i in found), flush=True)
    taken: set[Path] = set()
    if options.setup_only:
        return set_up_only(found, taken, REPO / "build" / "matrix", options.timeout_s)
    outcomes = [_run_and_say(interpreter, venv_for(interpreter, taken), options) for interpreter in found]
    report = table(outcomes, options.pytest_args, _commit())
    print("\n" + report)
    _write(options.report, report)
    rows = [{**asdict(o), "interpreter": {"version": o.interpreter.version, "executable": _where(o.interpreter.executable)}}
            for o in outcomes]
    _write(options.report.with_name("results.json"), json.dumps(rows, indent=1, sort_keys=True) + "\n")
    return 0 if all(o.result == "passed" for o in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
