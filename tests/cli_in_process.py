"""`python -m nbhelpers diagnose ...` run in this test process: the same `main`, exit code, printed text and
files, without a second interpreter importing torch for each refused command line (about 4 s each). Tests of
a whole diagnosis still start the real command (tests/test_diagnose.py's `_cli`)."""
from __future__ import annotations

import io
import subprocess
import sys
from contextlib import redirect_stderr, redirect_stdout


def diagnose(tmp_path, monkeypatch, *args: str) -> subprocess.CompletedProcess:
    import torch

    from nbhelpers.__main__ import main

    monkeypatch.chdir(tmp_path)
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err), torch.random.fork_rng():   # the CLI seeds torch's RNG
        try:
            code = main(["diagnose", *args])
        except SystemExit as stopped:          # argparse's own refusals exit 2
            code = stopped.code
            if code is not None and not isinstance(code, int):
                print(code, file=sys.stderr)   # as the interpreter does for sys.exit("..."), which exits 1
                code = 1
    code = code or 0
    return subprocess.CompletedProcess(["python", "-m", "nbhelpers", "diagnose", *args], code, out.getvalue(),
                                       err.getvalue())
