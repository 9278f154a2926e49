"""tests/matrix.py (`make matrix`): which interpreters it finds, which one CI adds, how it reads and reports a run."""
import os
import subprocess
import sys

from tests import matrix
from tests import REPO



def test_the_running_interpreter_is_identified_by_its_real_executable():
    found = matrix.identify(sys.executable)
    assert found.version == ".".join(map(str, sys.version_info[:3]))
    assert found.executable == os.path.realpath(sys.executable)


def test_a_command_that_is_no_interpreter_is_left_out(tmp_path):
    shim = tmp_path / "python3.12"                 # what a pyenv shim of an uninstalled version does
    shim.write_text("#!/bin/sh\necho 'pyenv: python3.12: command not found' >&2\nexit 127\n")
    shim.chmod(0o755)
    assert matrix.identify(str(shim)) is None and matrix.identify(str(tmp_path / "missing")) is None


def test_supported_keeps_each_executable_once_oldest_first_and_only_3_10_to_3_13():
    found = [matrix.Interpreter("3.12.1", "/a/python3.12"), matrix.Interpreter("3.11.7", "/b/python3.11"),
             matrix.Interpreter("3.11.2", "/usr/bin/python3.11"), matrix.Interpreter("3.9.18", "/c/python3.9"),
             matrix.Interpreter("3.14.0", "/d/python3.14"), None, matrix.Interpreter("3.12.1", "/a/python3.12")]
    assert [i.version for i in matrix.supported(found)] == ["3.11.2", "3.11.7", "3.12.1"]


def test_ci_runs_the_oldest_interpreter_besides_the_default():
    found = [matrix.Interpreter("3.10.13", "/p/python3.10"), matrix.Interpreter("3.11.7", "/p/python3.11")]
    assert matrix.second(found, found[0]) == [found[1]]
    assert matrix.second(found, found[1]) == [found[0]]
    assert matrix.second(found[:1], found[0]) == []


def test_candidates_look_on_path_in_pyenv_and_in_the_system_folders(tmp_path):
    pyenv = tmp_path / "pyenv" / "versions" / "3.10.13" / "bin"
    pyenv.mkdir(parents=True)
    (pyenv / "python3.10").touch()
    paths = matrix.candidates({"PATH": "/nonexistent", "PYENV_ROOT": str(tmp_path / "pyenv")})
    assert str(pyenv / "python3.10") in paths and "/usr/bin/python3.13" in paths


def test_two_builds_of_one_version_get_two_venvs():
    taken = set()
    a = matrix.venv_for(matrix.Interpreter("3.11.7", "/a"), taken)
    b = matrix.venv_for(matrix.Interpreter("3.11.7", "/b"), taken)
    assert a.name == "3.11.7" and b.name == "3.11.7-2"


def test_junit_counts_and_failing_ids(tmp_path):
    xml = tmp_path / "junit.xml"
    xml.write_text('<testsuites><testsuite><testcase classname="notebooks.04" name="Cell 16"><failure/></testcase>'
                   '<testcase classname="tests.test_a" name="test_ok"/><testcase classname="t" name="s"><skipped/>'
                   '</testcase><testcase classname="t" name="e"><error/></testcase></testsuite></testsuites>')
    assert matrix.read_junit(xml) == (1, 2, 1, ["notebooks.04::Cell 16", "t::e"])


def test_the_table_names_every_interpreter_and_each_failure():
    ok = matrix.Outcome(matrix.Interpreter("3.10.13", "/p/python3.10"), "passed", 10, 0, 1, [], 200.4, 700.6)
    bad = matrix.Outcome(matrix.Interpreter("3.12.1", "/p/python3.12"), "failed", 9, 1, 1, ["nb::Cell 1"], 150, 650)
    text = matrix.table([ok, bad], "", "abc1234")
    assert "| 3.10.13 | `/p/python3.10` | passed | 10 | 0 | 1 | 200 s | 701 s |" in text
    assert "- 3.12.1: nb::Cell 1" in text and "Commit abc1234" in text and "the whole suite" in text


def test_make_matrix_with_no_interpreter_says_how_to_name_one():
    done = subprocess.run(["make", "-s", "matrix", "PYTHONS=/nonexistent/python3.10"], cwd=REPO,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode != 0 and "PYTHONS=/path/to/python3.10 make matrix" in done.stderr


def test_a_setup_that_fails_twice_is_reported_with_the_end_of_its_log(tmp_path, monkeypatch):
    calls = []

    def failing_make(target, interpreter, venv, log, extra, timeout_s):
        calls.append(target)
        log.write(f"attempt {len(calls)}\nERROR: Could not install packages due to an OSError: No space left\n")
        return 1

    monkeypatch.setattr(matrix, "_make", failing_make)
    monkeypatch.setattr(matrix, "REPO", tmp_path)
    outcome = matrix.run_one(matrix.Interpreter("3.10.13", "/p/python3.10"), tmp_path / "venv", "", tmp_path / "logs",
                             60)
    assert calls == ["setup", "setup"] and outcome.result == "set-up failed" and outcome.setup_attempts == 2
    text = matrix.table([outcome], "notebooks", "abc1234")
    assert "(2 tries)" in text and "make setup failed twice" in text and "No space left" in text


def test_a_setup_that_fails_once_is_retried_and_the_table_says_so(tmp_path, monkeypatch):
    codes = iter([1, 0, 0])
    monkeypatch.setattr(matrix, "_make", lambda target, *args: next(codes))
    monkeypatch.setattr(matrix, "REPO", tmp_path)
    outcome = matrix.run_one(matrix.Interpreter("3.10.13", "/p/python3.10"), tmp_path / "venv", "", tmp_path / "logs",
                             60)
    assert outcome.result == "passed" and outcome.setup_attempts == 2
    assert "(2 tries)" in matrix.table([outcome], "", "abc1234")


def test_setup_only_builds_each_venv_with_one_retry_and_runs_no_suite(tmp_path, monkeypatch, capsys):
    calls = []

    def make(target, interpreter, venv, log, extra, timeout_s):
        calls.append((target, interpreter.version, venv.name))
        return 1 if len(calls) == 1 else 0                      # the first set-up fails once, as a cut download does

    monkeypatch.setattr(matrix, "_make", make)
    monkeypatch.setattr(matrix, "REPO", tmp_path)
    found = [matrix.Interpreter("3.10.13", "/p/python3.10"), matrix.Interpreter("3.12.1", "/p/python3.12")]
    assert matrix.set_up_only(found, set(), tmp_path / "logs", 60) == 0
    assert calls == [("setup", "3.10.13", "3.10.13"), ("setup", "3.10.13", "3.10.13"), ("setup", "3.12.1", "3.12.1")]
    said = capsys.readouterr().out
    assert "matrix: 3.10.13 set up in .venv-matrix/3.10.13: ready" in said and ", 2 tries" in said
    assert "matrix: 3.12.1 set up in .venv-matrix/3.12.1: ready" in said and ", 1 try" in said
    monkeypatch.setattr(matrix, "_make", lambda *args: 2)
    assert matrix.set_up_only(found[:1], set(), tmp_path / "logs", 60) == 1
    assert ": failed after" in capsys.readouterr().out
