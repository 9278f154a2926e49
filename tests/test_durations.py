"""The durations table: each group's time, slowest first; fixed waits and notebook executions as recorded."""
from tests import durations


def test_the_table_groups_by_notebook_and_file_slowest_first_with_waits_and_executions():
    run = durations.Run(seconds={"notebooks/01_a.ipynb::Cell 0": 2.0, "notebooks/01_a.ipynb::Cell 1": 3.0,
                                 "notebooks/02_b.ipynb::Cell 0": 9.0, "tests/test_x.py::test_one": 1.5,
                                 "tests/test_y.py::test_two": 4.0, "tests/test_y.py::test_three": 0.5},
                        browser={"tests/test_y.py::test_two"})
    run.waiting["tests/test_y.py::test_two"] += 2.5
    run.executions[("01_a.ipynb", "nbval")] += 1
    run.executions[("01_a.ipynb", "Run All in JupyterLab")] += 3
    text = durations.table(run, wall_s=30.0, cores=2)
    assert "Wall time of the pytest session: 30 s; 6 tests; notebooks under nbval 14 s; browser tests 4 s" in text
    assert text.index("`notebooks/02_b.ipynb` | 9.0 | 1") < text.index("`notebooks/01_a.ipynb` | 5.0 | 2")
    assert text.index("`tests/test_y.py` | 4.5 | 2 | 1 |") < text.index("`tests/test_x.py` | 1.5 | 1 |  |")
    assert "| `tests/test_y.py` | 2.5 |" in text and "fixed waits (sleeps, `wait_for_timeout`) 2 s" in text
    assert "| `01_a.ipynb` | Run All in JupyterLab | 3 |" in text and "| `01_a.ipynb` | nbval | 1 |" in text
