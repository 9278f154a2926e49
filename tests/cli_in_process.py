"""`python -m nbhelpers diagnose ...` run in this test process: the same `main`, exit code, printed text and
files, without a second interpreter importing torch for each refused command line (about 4 s each). Tests of
a whole diagnosis still start the real command (tests/test_diagnose.py's `_cli`)."""
from __future__ import annotations

import io
import subprocess
from contextlib import redirect_stderr, redirect_stdout


def diagnose(tmp_path, monkeypatch, *args: str) -> subprocess.CompletedProcess:
    from nbhelpers.__main__ import main

    monkeypatch.chdir(tmp_path)
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        try:
            code = main(["diagnose", *args])
        except SystemExit as stopped:          # argparse's own refusals exit 2
            code = stopped.code if isinstance(stopped.code, int) else 1
    return subprocess.CompletedProcess(["python", "-m", "nbhelpers", "diagnose", *args], code, out.getvalue(),
                                       err.getvalue())
