"""Run the project's own pytest (same conftest, same options) on a changed copy of a notebook."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import uuid

import nbformat

from tests import REPO


def run_suite_on(nb, tmp_name: str, file_name: str = "00_environment.ipynb", *pytest_args: str,
                 timeout_s: float = 600) -> subprocess.CompletedProcess:
    """The copy lives under build/ so that the repository's conftest.py and pyproject.toml apply to it."""
    folder = REPO / "build" / "test-notebooks" / f"{tmp_name}-{uuid.uuid4().hex[:8]}"
    folder.mkdir(parents=True)
    nbformat.write(nb, folder / file_name)
    try:
        return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *pytest_args,
                               str(folder / file_name)], cwd=REPO, capture_output=True, text=True,
                              timeout=timeout_s, env=dict(os.environ))
    finally:
        shutil.rmtree(folder)
