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


def test_the_text_carries_no_colour_codes(monkeypatch):
    """What a Jupyter kernel's child does: FORCE_COLOR=1 (ipykernel sets it), and Python 3.13 colours its
    traceback; the text is the same as an uncoloured one."""
    monkeypatch.setenv("FORCE_COLOR", "1")
    with stderr_capture.capture_stderr() as captured:
        os.write(2, b"\x1b[1;35mAttributeError\x1b[0m: \x1b[35mCan't get attribute 'X'\x1b[0m\n")
        subprocess.run([sys.executable, "-c", "raise AttributeError('Y')"], check=False)
    assert "\x1b[" not in captured.text
    assert captured.text.startswith("AttributeError: Can't get attribute 'X'\n")
    assert captured.text.rstrip().endswith("AttributeError: Y")
