"""Where the suite's time goes: a pytest plugin that writes a table of one run (`make durations`).

Loaded with `-p tests.durations --durations-table PATH`. It records each test's wall time (set-up, call and
tear-down, as pytest reports them), groups the times by notebook (nbval's cells, one kernel per notebook) and by
test file, marks the browser tests, and counts two things a faster suite would remove:

- **waiting**: seconds spent in `time.sleep` and in Playwright's `Page.wait_for_timeout` in the pytest process
  (fixed waits, not readiness signals such as `wait_for` / `wait_for_function`, which end when the thing is ready);
- **notebook executions**: who runs each notebook's cells, and how often: nbval (one per notebook file), nbclient
  in the pytest process (`NotebookClient.execute`, as `execute_notebook` and the site tests use it), and Run All
  in JupyterLab (tests/test_lab.py's `open_and_run_all`).

It also says how busy the machine's cores were during the session (Linux's /proc/stat, every process counted):
when every core is busy, overlapping more does not make the suite shorter; doing less work does.

Kernels, JupyterLab and DDP ranks are other processes: their own sleeps are inside the wall time of the test
that waits for them, not in the waiting column.

Under pytest-xdist each worker counts its own waits and executions and hands them to the controller
(`workeroutput`), which receives every test's report and writes the table. The committed table also orders the
next run (`slowest_first`): files start slowest first, so that the workers finish together.
"""
from __future__ import annotations

import collections
import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from nbhelpers.atomic import write_atomic


@dataclass
class Run:
    seconds: dict[str, float] = field(default_factory=dict)                 # nodeid -> wall s
    waiting: collections.Counter = field(default_factory=collections.Counter)   # nodeid -> s in fixed waits
    browser: set[str] = field(default_factory=set)
    executions: collections.Counter = field(default_factory=collections.Counter)  # (notebook, who) -> runs
    current: str = ""


_RUN = Run()


def pytest_addoption(parser):
    parser.addoption("--durations-table", default=None, help="write where the time went to this markdown file")


def _count_waits(run: Run) -> None:
    real_sleep = time.sleep

    def sleep(seconds):
        run.waiting[run.current] += max(0.0, float(seconds))
        return real_sleep(seconds)

    time.sleep = sleep
    try:
        from playwright.sync_api._generated import Page
    except ImportError:
        return
    real_wait = Page.wait_for_timeout

    def wait_for_timeout(self, timeout):
        run.waiting[run.current] += timeout / 1000
        return real_wait(self, timeout)

    Page.wait_for_timeout = wait_for_timeout


def _count_executions(run: Run) -> None:
    from nbclient import NotebookClient

    real_execute = NotebookClient.execute

    def execute(self, *args, **kwargs):
        run.executions[(_title(self.nb), "nbclient in the pytest process")] += 1
        return real_execute(self, *args, **kwargs)

    NotebookClient.execute = execute


def _title(nb) -> str:
    """The notebook's `# ` heading (nbclient does not know its file), or what a test made up."""
    first = nb.cells[0] if nb.cells else None
    if first is not None and first.cell_type == "markdown" and first.source.startswith("# "):
        return first.source.splitlines()[0][2:]
    return "(a notebook a test writes)"


def pytest_configure(config):
    if config.getoption("--durations-table"):
        _count_waits(_RUN)
        _count_executions(_RUN)


def pytest_collection_finish(session):
    """Wrap test_lab's Run All, where this process collected it (a worker collects every file)."""
    if not session.config.getoption("--durations-table"):
        return
    items = session.items
    lab = next((item.module for item in items if item.path.name == "test_lab.py" and hasattr(item, "module")), None)
    if lab is not None and hasattr(lab, "open_and_run_all"):
        real = lab.open_and_run_all

        def open_and_run_all(page, lab_info, notebook):
            _RUN.executions[(notebook, "Run All in JupyterLab")] += 1
            return real(page, lab_info, notebook)

        lab.open_and_run_all = open_and_run_all


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """What runs, counted where it runs: the worker that gets a notebook runs its one nbval kernel."""
    _RUN.current = item.nodeid
    if item.get_closest_marker("browser"):
        _RUN.browser.add(item.nodeid)
    if item.path.suffix == ".ipynb" and (item.path.name, "nbval") not in _RUN.executions:
        _RUN.executions[(item.path.name, "nbval")] = 1
    yield
    _RUN.current = ""


def pytest_runtest_logreport(report):
    _RUN.seconds[report.nodeid] = _RUN.seconds.get(report.nodeid, 0.0) + report.duration


def pytest_sessionstart(session):
    session.config._durations_started = time.monotonic()
    session.config._durations_cpu = cpu_seconds()


def cpu_seconds() -> tuple[float, float] | None:
    """(busy, idle) seconds of all this machine's cores so far, from Linux's /proc/stat; None without one."""
    try:
        return busy_and_idle(Path("/proc/stat").read_text().split("\n", 1)[0], os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError):
        return None


def busy_and_idle(cpu_line: str, ticks_per_s: int) -> tuple[float, float]:
    """/proc/stat's "cpu" line (man 5 proc) as (busy, idle) seconds: user, nice, system, irq, softirq and steal are
    busy; idle and iowait are idle; guest time is already inside user, so it is not added again."""
    user, nice, system, idle, iowait, irq, softirq, steal = (int(t) for t in cpu_line.split()[1:9])
    return (user + nice + system + irq + softirq + steal) / ticks_per_s, (idle + iowait) / ticks_per_s


def pytest_sessionfinish(session, exitstatus):
    config = session.config
    path = config.getoption("--durations-table")
    if not path:
        return
    if hasattr(config, "workerinput"):                 # an xdist worker: the controller writes the table
        config.workeroutput["durations"] = _portable(_RUN)
        return
    wall, started, ended = time.monotonic() - config._durations_started, config._durations_cpu, cpu_seconds()
    busy = None if started is None or ended is None else (ended[0] - started[0], ended[1] - started[1])
    workers = getattr(config.option, "numprocesses", None) or 0
    write_atomic(Path(path), table(_RUN, wall, os.cpu_count() or 0, workers, busy).encode())


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    """xdist's controller: add what a worker counted (its test times came with its reports)."""
    counted = getattr(node, "workeroutput", {}).get("durations")
    if counted:
        _RUN.waiting.update(counted["waiting"])
        _RUN.browser.update(counted["browser"])
        _RUN.executions.update({(nb, who): n for nb, who, n in counted["executions"]})


def _portable(run: Run) -> dict:
    """What execnet can carry from a worker: plain dicts, lists and strings."""
    return {"waiting": dict(run.waiting), "browser": sorted(run.browser),
            "executions": [[nb, who, n] for (nb, who), n in run.executions.items()]}


SLOW_S = 2.0          # a test over this, measured, is left out of `make check`'s quick loop
_ROW = re.compile(r"^\| `([^`]+)` \| ([\d,]+\.\d) \|", re.M)


def measured_seconds(path: Path) -> dict[str, float]:
    """Seconds per notebook or test file (its path as pytest names it) from a committed table; {} without one."""
    return measured_seconds_in(path.read_text()) if path.is_file() else {}


def measured_seconds_in(text: str) -> dict[str, float]:
    """The "By notebook" and "By test file" rows of a table (the waits table's rows name files too: first wins)."""
    found: dict[str, float] = {}
    for name, seconds in _ROW.findall(text):
        if "::" not in name:
            found.setdefault(name, float(seconds.replace(",", "")))
    return found


def slow_tests_in(text: str) -> set[str]:
    """The tests a table measured over SLOW_S seconds (their node ids)."""
    return {name for name, _ in _ROW.findall(text) if "::" in name}


def slowest_first(items: list, seconds: dict[str, float]) -> None:
    """Reorder `items` in place, files by measured seconds (unmeasured ones last); a file's own order is kept."""
    items.sort(key=lambda item: -seconds.get(_group(item.nodeid), 0.0))


def _group(nodeid: str) -> str:
    return nodeid.split("::")[0]


def table(run: Run, wall_s: float, cores: int, workers: int = 0, busy: tuple[float, float] | None = None) -> str:
    """The markdown report of `run`: totals, then notebooks, test files, waits and executions, slowest first.
    `busy`: the (busy, idle) CPU seconds of the whole machine during the run, when known."""
    by_file, counts, waits = collections.Counter(), collections.Counter(), collections.Counter()
    for nodeid, seconds in run.seconds.items():
        by_file[_group(nodeid)] += seconds
        counts[_group(nodeid)] += 1
    for nodeid, seconds in run.waiting.items():
        waits[_group(nodeid) if nodeid else "(between tests)"] += seconds
    browser = sum(run.seconds.get(n, 0.0) for n in run.browser)
    notebooks = {k: v for k, v in by_file.items() if k.endswith(".ipynb")}
    lines = [
        "# Where the suite's time goes", "",
        f"One `make durations` run on {cores} cores, {f'{workers} pytest-xdist workers' if workers else 'one process'}. "
        f"Wall time of the pytest session: {wall_s:,.0f} s; sum of the tests' own times {sum(run.seconds.values()):,.0f} s; "
        f"{len(run.seconds):,} tests; notebooks under nbval {sum(notebooks.values()):,.0f} s; browser tests "
        f"{browser:,.0f} s; fixed waits (sleeps, `wait_for_timeout`) {sum(waits.values()):,.0f} s.{_load(busy)}", "",
        "## By notebook (nbval: one kernel, every cell)", "", "| notebook | s | items |", "|---|---:|---:|"]
    lines += [f"| `{k}` | {v:,.1f} | {counts[k]} |" for k, v in sorted(notebooks.items(), key=lambda kv: -kv[1])]
    lines += ["", "## By test file", "", "| file | s | tests | of them browser |", "|---|---:|---:|---:|"]
    for name, seconds in by_file.most_common():
        if name.endswith(".ipynb"):
            continue
        in_browser = sum(1 for n in run.browser if _group(n) == name)
        lines.append(f"| `{name}` | {seconds:,.1f} | {counts[name]} | {in_browser or ''} |")
    lines += ["", f"## Tests over {SLOW_S:.0f} s (`make check` leaves them to `make test`)", "",
              "| test | s |", "|---|---:|"]
    lines += [f"| `{n}` | {s:,.1f} |" for n, s in sorted(run.seconds.items(), key=lambda kv: -kv[1])
              if s > SLOW_S and not _group(n).endswith(".ipynb")]
    lines += ["", "## Fixed waits", "", "| where | s |", "|---|---:|"]
    lines += [f"| `{k}` | {v:,.1f} |" for k, v in waits.most_common() if v >= 0.05]
    lines += ["", "## Who executes a notebook, and how often", "", "| notebook | who | runs |", "|---|---|---:|"]
    lines += [f"| `{nb}` | {who} | {n} |" for (nb, who), n in sorted(run.executions.items())]
    return "\n".join(lines) + "\n"


def _load(busy: tuple[float, float] | None) -> str:
    """How busy the machine was: a suite that keeps every core busy is shortened only by doing less work."""
    if busy is None or sum(busy) <= 0:
        return ""
    return (f" The machine's cores were busy {busy[0] / sum(busy):.0%} of the session ({busy[0]:,.0f} CPU-s of "
            f"{sum(busy):,.0f}, every process counted: kernels, browsers, servers, subprocesses).")
