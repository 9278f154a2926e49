"""nbhelpers.stderr_capture: what children and C code write to fd 2 is captured, and fd 2 comes back."""
import os
import subprocess
import sys

import pytest

from nbhelpers import stderr_capture


def test_captures_child_processes_and_raw_writes(capfd):
    with stderr_capture.capture_stderr() as captured:
        subprocess.run([sys.executable, "-c", "import sys; sys.stderr.write('child\\n')"], check=True)
        os.write(2, b"raw\n")
    assert captured.text == "child\nraw\n"
    os.write(2, b"after\n")
    assert capfd.readouterr().err == "after\n"


def test_fd_2_is_restored_when_the_block_raises(capfd):
    with pytest.raises(RuntimeError):
        with stderr_capture.capture_stderr() as captured:
            os.write(2, b"before the error\n")
            raise RuntimeError("boom")
    assert captured.text == "before the error\n"
    os.write(2, b"restored\n")
    assert capfd.readouterr().err == "restored\n"


def test_only_kinetos_own_lines_are_dropped(capfd):
    with stderr_capture.without_kineto_lines():
        os.write(2, b"USDT:2026-11-30 20:05:50 8537:8537 SyncActivityProfilerHandler.cpp:39] profiler_start\n")
        os.write(2, b"a real warning\n")
    sys.stderr.flush()
    assert capfd.readouterr().err == "a real warning\n"
