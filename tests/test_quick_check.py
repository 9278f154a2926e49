"""`make check` picks what a change touches: notebooks through the module map and the package's imports, test
files through what they import; with --quick, pytest leaves out the slow and browser tests of other files."""
import subprocess
import sys
from pathlib import Path

import nbhelpers
from tests import REPO, quick_check

PACKAGE = Path(nbhelpers.__file__).parent
MAP = nbhelpers.__doc__


def _numbers(paths) -> list[str]:
    return [Path(p).name[:2] for p in paths]


def test_a_module_touches_the_notebooks_of_every_module_that_imports_it():
    assert _numbers(quick_check.touched_notebooks({"nbhelpers/storage.py"}, PACKAGE, MAP)) == ["01"]
    # picture_canvas is on no notebook's import line; pictures (03, 04, 06) and compile_picture (05) import it
    assert _numbers(quick_check.touched_notebooks({"nbhelpers/picture_canvas.py"}, PACKAGE, MAP)) == \
        ["03", "04", "05", "06"]


def test_a_script_touches_the_notebooks_of_the_module_that_loads_it():
    assert quick_check.module_of("nbhelpers/memory_timeline.js", quick_check.modules_in(PACKAGE)) == \
        "memory_timeline"
    assert "08" in _numbers(quick_check.touched_notebooks({"nbhelpers/memory_timeline.js"}, PACKAGE, MAP))


def test_a_notebook_touches_itself_and_the_sanitize_file_touches_them_all():
    nb = "notebooks/05_compile_backends.ipynb"
    assert quick_check.touched_notebooks({nb}, PACKAGE, MAP) == [nb]
    assert len(quick_check.touched_notebooks({"tests/nbval_sanitize.cfg"}, PACKAGE, MAP)) == 14
    assert quick_check.touched_notebooks({"README.md"}, PACKAGE, MAP) == []


def test_test_files_are_touched_by_their_own_change_or_by_a_module_they_import():
    touched = quick_check.touched_test_files({"nbhelpers/storage.py"}, PACKAGE)
    assert "tests/test_storage.py" in touched and "tests/test_atomic.py" not in touched
    assert quick_check.touched_test_files({"tests/test_atomic.py"}, PACKAGE) == ["tests/test_atomic.py"]
    assert "tests/test_durations.py" in quick_check.touched_test_files({"tests/durations.py"}, PACKAGE)


def _collected(*args: str) -> list[str]:
    done = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", *args, "tests/test_site.py"],
                          cwd=REPO, capture_output=True, text=True, timeout=120)
    return [line for line in done.stdout.splitlines() if "::" in line]


def test_quick_leaves_out_the_browser_tests_of_a_file_it_does_not_keep():
    every, quick = _collected(), _collected("--quick")
    kept = _collected("--quick", "--keep=tests/test_site.py")
    assert kept == every and 0 < len(quick) < len(every)
    assert not any("axe" in test for test in quick) and any("axe" in test for test in every)
