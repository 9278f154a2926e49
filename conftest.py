"""Suite-wide set-up: the offline guard, a clean plotting backend, and notebook convention checks.

For every notebook that nbval collects, three more items run beside its cells: `execution-order`
(nbval silently skips comparing never-executed cells), `conventions` (HOUSE_STYLE.md) and
`clean-outputs` (what a reader sees holds no ANSI, machine paths or stray stderr).
"""
from __future__ import annotations

import os
from pathlib import Path

import nbformat
import pytest

from nbhelpers._tools import notebook_tools
from tests import REPO, durations, notebook_rules
from tests.offline_guard import offline_guard

GUARD_DIR = REPO / "tests" / "offline_guard"
NET_LOG = REPO / "build" / "network-attempts.log"
DURATIONS = REPO / "tests" / "durations.md"      # the last `make durations` run, committed


def pytest_configure(config):
    import matplotlib

    matplotlib.use("agg")               # the test process draws off screen; notebook kernels keep the inline backend
    os.environ.pop("MPLBACKEND", None)  # kernels inherit it; 'agg' drops every stored plot
    notebook_tools.quiet_interpreter_notices(os.environ)   # e.g. Python 3.13.0's note on Dynamo's guards
    if offline_guard.LOG_ENV not in os.environ:  # a nested pytest (tests/test_notebooks.py) appends
        NET_LOG.parent.mkdir(exist_ok=True)
        NET_LOG.write_text("")
        # Children (kernels, JupyterLab, DDP ranks) import sitecustomize from here and guard themselves.
        os.environ[offline_guard.LOG_ENV] = str(NET_LOG)
    paths = [str(GUARD_DIR), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    os.environ["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    offline_guard.install()
    _share_the_cores(os.environ)


def _share_the_cores(env) -> None:
    """Give each pytest-xdist worker its share of the cores, it and the kernels it starts.

    Left alone, every worker's torch (and every notebook kernel) runs one OpenMP thread per core: two workers on
    two cores ran four busy threads that wait on each other: nbval of notebooks 03, 04, 06 and 10 with two
    workers took a median 212 s against 51 s with one thread each (farm-bench, 2026-12-06, this 2-core machine).
    A thread count already set is kept.
    """
    workers = int(env.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if workers <= 1 or "OMP_NUM_THREADS" in env:
        return
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    env["OMP_NUM_THREADS"] = str(max(1, cores // workers))
    import torch                        # already imported by the tests' modules, or read from the variable above

    torch.set_num_threads(int(env["OMP_NUM_THREADS"]))


def pytest_sessionfinish(session, exitstatus):
    log = Path(os.environ[offline_guard.LOG_ENV])
    attempts = log.read_text() if log.exists() else ""
    if attempts:
        print(f"\nFAILED: code tried to use the network during the tests (from {log}):\n{attempts}")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_addoption(parser):
    parser.addoption("--quick", action="store_true",
                     help="make check: leave out browser tests and tests measured slow, except in --keep files")
    parser.addoption("--keep", action="append", default=[], help="a test file --quick runs in full")


def pytest_collection_modifyitems(config, items):
    table = DURATIONS.read_text() if DURATIONS.is_file() else ""
    if config.getoption("--quick"):
        _leave_slow_out(config, items, durations.slow_tests_in(table), set(config.getoption("--keep")))
    # Slowest files first, as the committed table measured them: the last file a worker starts is then a short
    # one, and two workers (make test) finish close together. Each file keeps its own order (one kernel each).
    durations.slowest_first(items, durations.measured_seconds_in(table))


def _leave_slow_out(config, items: list, slow: set[str], keep: set[str]) -> None:
    def quick(item) -> bool:
        if item.nodeid.split("::")[0] in keep or item.path.suffix == ".ipynb":
            return True
        return item.nodeid not in slow and not item.get_closest_marker("browser") \
            and not item.get_closest_marker("slow")
    left_out = [item for item in items if not quick(item)]
    if left_out:
        config.hook.pytest_deselected(items=left_out)
        items[:] = [item for item in items if quick(item)]


def pytest_collect_file(file_path: Path, parent):
    if file_path.suffix == ".ipynb" and ".ipynb_checkpoints" not in file_path.parts:
        return NotebookRules.from_parent(parent, path=file_path)
    return None


class NotebookRules(pytest.File):
    def collect(self):
        nb = nbformat.read(self.path, as_version=4)
        yield RuleItem.from_parent(self, name="execution-order",
                                   check=lambda: notebook_rules.execution_problems(nb))
        yield RuleItem.from_parent(self, name="conventions", check=lambda: (
            notebook_rules.opening_problems(nb, self.path) + notebook_rules.structure_problems(nb)))
        yield RuleItem.from_parent(self, name="clean-outputs",
                                   check=lambda: notebook_rules.output_problems(nb))


class RuleItem(pytest.Item):
    def __init__(self, *, check, **kwargs):
        super().__init__(**kwargs)
        self.check = check

    def runtest(self):
        problems = self.check()
        if problems:
            raise NotebookRuleError(problems)

    def repr_failure(self, excinfo):
        if isinstance(excinfo.value, NotebookRuleError):
            return f"{self.path.name}: " + "\n  ".join(excinfo.value.args[0])
        return super().repr_failure(excinfo)

    def reportinfo(self):
        return self.path, None, f"{self.path.name}::{self.name}"


class NotebookRuleError(Exception):
    pass
