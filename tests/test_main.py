"""python -m nbhelpers: each command does what its help says, and reports a failure in its exit code."""
import platform
import subprocess
import sys
from pathlib import Path

import pytest

from nbhelpers import __main__ as cli
from nbhelpers import data, devices
from nbhelpers._tools import notebook_tools


def test_doctor_names_the_machine_and_verifies_the_data(capsys):
    assert cli.main(["doctor"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == devices.banner(devices.pick_device())
    assert out[1] == f"Python {platform.python_version()} at {sys.executable}"      # a terminal may name it
    train, test = data.digits(train=True), data.digits(train=False)
    assert out[-1] == f"digits data: verified, {len(train)} train + {len(test)} test images in {data.DATA_DIR}"


def test_doctor_fails_with_the_reason_when_the_data_is_damaged(capsys, monkeypatch):
    def damaged(train=True):
        raise data.DataIntegrityError("digits_train.gz: sha256 differs; run `git checkout data/`")
    monkeypatch.setattr(data, "digits", damaged)
    assert cli.main(["doctor"]) == 1
    assert capsys.readouterr().out.splitlines()[-1] == (
        "digits data: FAILED: digits_train.gz: sha256 differs; run `git checkout data/`")


def test_execute_runs_each_notebook_in_turn(capsys, monkeypatch):
    ran = []
    monkeypatch.setattr(notebook_tools, "execute_notebook", ran.append)
    assert cli.main(["execute", "a.ipynb", "b.ipynb"]) == 0
    assert ran == [Path("a.ipynb"), Path("b.ipynb")]
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "executing a.ipynb ..." and out[1].startswith("executed a.ipynb in ")
    assert out[2] == "executing b.ipynb ..."


def test_html_builds_the_site_where_asked(capsys, monkeypatch, tmp_path):
    calls = []
    monkeypatch.setattr(notebook_tools, "build_site", lambda notebooks, out: calls.append((notebooks, out)) or ["p"])
    monkeypatch.setattr(notebook_tools, "views_without_state", lambda notebooks: {})
    assert cli.main(["html", "--out", str(tmp_path), "a.ipynb"]) == 0
    assert calls == [([Path("a.ipynb")], tmp_path)]
    assert capsys.readouterr().out == f"wrote 1 page(s) and index.html to {tmp_path}\n"


def test_no_command_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as stopped:
        cli.main([])
    assert stopped.value.code == 2
    assert "the following arguments are required: command" in capsys.readouterr().err


# this file imported nbhelpers.__main__ already, which runpy warns about before running it again
@pytest.mark.filterwarnings("ignore:'nbhelpers.__main__' found in sys.modules:RuntimeWarning")
def test_the_program_exits_with_the_commands_code(monkeypatch):
    import runpy

    from nbhelpers._tools import diagnose_cli

    monkeypatch.setattr(diagnose_cli, "main", lambda args: 3)
    monkeypatch.setattr(sys, "argv", ["python -m nbhelpers", "diagnose", "m:f", "--input", "2x3"])
    with pytest.raises(SystemExit) as stopped:
        runpy.run_module("nbhelpers", run_name="__main__")
    assert stopped.value.code == 3


def test_it_runs_as_a_program():
    done = subprocess.run([sys.executable, "-m", "nbhelpers", "--help"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.startswith("usage: python -m nbhelpers")
