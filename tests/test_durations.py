"""The durations table: each group's time, slowest first; fixed waits and notebook executions as recorded,
also when pytest-xdist's workers ran the tests; and the order it gives the next run."""
import os
import subprocess
import sys
import textwrap
import time
from types import SimpleNamespace

import pytest

from tests import REPO, durations


def test_the_table_groups_by_notebook_and_file_slowest_first_with_waits_and_executions():
    run = durations.Run(seconds={"notebooks/01_a.ipynb::Cell 0": 2.0, "notebooks/01_a.ipynb::Cell 1": 3.0,
                                 "notebooks/02_b.ipynb::Cell 0": 9.0, "tests/test_x.py::test_one": 1.5,
                                 "tests/test_y.py::test_two": 4.0, "tests/test_y.py::test_three": 0.5},
                        browser={"tests/test_y.py::test_two"})
    run.waiting["tests/test_y.py::test_two"] += 2.5
    run.executions[("01_a.ipynb", "nbval")] += 1
    run.executions[("01_a.ipynb", "Run All in JupyterLab")] += 3
    text = durations.table(run, wall_s=30.0, cores=2)
    assert ("one process. Wall time of the pytest session: 30 s; sum of the tests' own times 20 s; 6 tests; "
            "notebooks under nbval 14 s; browser tests 4 s") in text
    assert text.index("`notebooks/02_b.ipynb` | 9.0 | 1") < text.index("`notebooks/01_a.ipynb` | 5.0 | 2")
    assert text.index("`tests/test_y.py` | 4.5 | 2 | 1 |") < text.index("`tests/test_x.py` | 1.5 | 1 |  |")
    assert "| `tests/test_y.py` | 2.5 |" in text and "fixed waits (sleeps, `wait_for_timeout`) 2 s" in text
    assert "| `01_a.ipynb` | Run All in JupyterLab | 3 |" in text and "| `01_a.ipynb` | nbval | 1 |" in text


def test_the_table_says_how_busy_the_machine_was_when_it_knows():
    run = durations.Run(seconds={"tests/test_x.py::test_one": 1.0})
    assert ("The machine's cores were busy 90% of the session (1,800 CPU-s of 2,000, every process counted"
            in durations.table(run, wall_s=1000.0, cores=2, workers=2, busy=(1800.0, 200.0)))
    assert "busy" not in durations.table(run, wall_s=1000.0, cores=2, workers=2, busy=None)


def test_busy_and_idle_read_each_field_of_proc_stat_once():
    #                user nice system idle iowait irq softirq steal guest guest_nice
    line = "cpu  1000  20   300    5000 400    6   7       8     900   10"
    assert durations.busy_and_idle(line, ticks_per_s=100) == ((1000 + 20 + 300 + 6 + 7 + 8) / 100, (5000 + 400) / 100)


def test_busy_seconds_grow_while_this_process_computes():
    before = durations.cpu_seconds()
    if before is None:
        pytest.skip("no /proc/stat: not Linux")
    started, deadline = time.monotonic(), time.process_time() + 0.3
    while time.process_time() < deadline:
        pass
    after, wall = durations.cpu_seconds(), time.monotonic() - started
    assert after[0] - before[0] >= 0.25
    counted = sum(after) - sum(before)                   # busy and idle together: every core's whole time
    assert abs(counted - wall * os.cpu_count()) < 0.3 * wall * os.cpu_count() + 0.05, (counted, wall)


def test_the_committed_table_orders_files_slowest_first_and_keeps_each_files_own_order():
    run = durations.Run(seconds={"notebooks/01_a.ipynb::Cell 0": 2.0, "tests/test_y.py::test_two": 1234.5,
                                 "tests/test_x.py::test_one": 7.0})
    text = durations.table(run, wall_s=9.0, cores=2)
    measured = durations.measured_seconds_in(text)
    assert measured == {"notebooks/01_a.ipynb": 2.0, "tests/test_y.py": 1234.5, "tests/test_x.py": 7.0}
    assert durations.slow_tests_in(text) == {"tests/test_y.py::test_two", "tests/test_x.py::test_one"}  # not cells
    items = [SimpleNamespace(nodeid=n) for n in ("new.py::a", "notebooks/01_a.ipynb::Cell 0", "tests/test_x.py::b",
                                                  "notebooks/01_a.ipynb::Cell 1", "tests/test_y.py::c")]
    durations.slowest_first(items, measured)
    assert [i.nodeid for i in items] == ["tests/test_y.py::c", "tests/test_x.py::b", "notebooks/01_a.ipynb::Cell 0",
                                         "notebooks/01_a.ipynb::Cell 1", "new.py::a"]


def test_two_workers_hand_their_waits_to_the_table(tmp_path):
    """A real xdist run of two files: each worker's sleeps reach the controller's table."""
    for name, wait in (("test_a.py", 0.3), ("test_b.py", 0.2)):
        (tmp_path / name).write_text(textwrap.dedent(f"""
            import time
            def test_waits():
                time.sleep({wait})
        """))
    table = tmp_path / "durations.md"
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-c", "/dev/null",
                           "--rootdir", str(tmp_path), "-p", "tests.durations", "--durations-table", str(table),
                           "-n", "2", "--dist", "loadfile", str(tmp_path)], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 0, done.stdout + done.stderr
    text = table.read_text()
    assert "2 pytest-xdist workers" in text and "2 tests" in text
    assert ("The machine's cores were busy" in text) == (durations.cpu_seconds() is not None)
    waits = text.split("## Fixed waits")[1].split("##")[0]
    assert "| `test_a.py` | 0.3 |" in waits and "| `test_b.py` | 0.2 |" in waits, text


def _collected(**env):
    done = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                           "-o", "addopts=", "--nbval", "--nbval-current-env", "tests", "notebooks"], cwd=REPO,
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, **env})
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return [line for line in done.stdout.splitlines() if "::" in line]


def test_every_worker_collects_the_same_tests_in_the_same_order():
    """pytest-xdist refuses a run whose workers collected differently: a parametrization that iterates a set
    (hash or id() order) differs between processes. Two processes with different hash seeds and allocators
    (so different addresses, so different id() orders) must agree."""
    first = _collected(PYTHONHASHSEED="1", PYTHONMALLOC="pymalloc")
    assert len(first) > 2000
    for allocator in ("malloc", "malloc_debug"):
        other = _collected(PYTHONHASHSEED="2", PYTHONMALLOC=allocator)
        assert first == other, next(f"{a} != {b}" for a, b in zip(first, other) if a != b)
