"""The offline guard refuses and records non-loopback connections, here and in child processes."""
import os
import socket
import subprocess
import sys

import pytest

from tests.offline_guard import offline_guard


@pytest.mark.parametrize("address", [("127.0.0.1", 80), ("127.8.9.10", 1), ("::1", 8888, 0, 0),
                                     ("localhost", 8888), "/tmp/some.sock", b"\0abstract"])
def test_local_addresses_are_allowed(address):
    assert offline_guard.is_local(address)


@pytest.mark.parametrize("address", [("192.0.2.1", 80), ("10.0.0.1", 443), ("2001:db8::1", 443, 0, 0),
                                     ("example.org", 443)])
def test_other_addresses_are_not(address):
    assert not offline_guard.is_local(address)


def test_a_refused_attempt_is_recorded_and_never_reaches_the_network(tmp_path, monkeypatch):
    log = tmp_path / "net.log"
    monkeypatch.setenv(offline_guard.LOG_ENV, str(log))
    reached = []
    monkeypatch.setitem(offline_guard._real, "connect", lambda self, address: reached.append(address))
    with socket.socket() as s, pytest.raises(ConnectionRefusedError, match="offline guard"):
        s.connect(("192.0.2.1", 9))                             # TEST-NET-1, and stubbed anyway
    assert reached == [] and "192.0.2.1" in log.read_text()


def test_child_python_processes_are_guarded(tmp_path):
    """sitecustomize installs the guard in every child that inherits the test environment."""
    log = tmp_path / "child.log"
    code = ("import socket, offline_guard\n"
            "offline_guard._real['connect'] = lambda *a: (_ for _ in ()).throw(AssertionError('reached'))\n"
            "try:\n    socket.create_connection(('192.0.2.1', 9), timeout=1)\n"
            "except ConnectionRefusedError as e:\n    print('refused:', e)\n")
    env = dict(os.environ, **{offline_guard.LOG_ENV: str(log)})
    run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert "refused: offline guard" in run.stdout, run.stderr
    assert "192.0.2.1" in log.read_text()
