"""Refuse and record every socket connection that would leave this machine.

Installed in the pytest process by conftest.py, and in every Python child process (notebook kernels,
JupyterLab, DDP ranks) through sitecustomize.py, which PYTHONPATH puts first. Each refused attempt is
appended to the file named by NBHELPERS_NET_LOG; conftest.py fails the session when that file is not
empty, so a library that swallows the error still cannot hide the attempt.
"""
from __future__ import annotations

import ipaddress
import os
import socket
import traceback

LOG_ENV = "NBHELPERS_NET_LOG"
_real = {"connect": socket.socket.connect, "connect_ex": socket.socket.connect_ex,
         "sendto": socket.socket.sendto}


def is_local(address) -> bool:
    """True for AF_UNIX paths, loopback IPs, 'localhost' and this machine's own host name."""
    if not isinstance(address, tuple):
        return True  # AF_UNIX path (str or bytes): a file, not the network
    host = address[0].decode() if isinstance(address[0], bytes) else address[0]
    if host in ("localhost", socket.gethostname()):
        return True
    try:
        return ipaddress.ip_address(host.split("%")[0]).is_loopback
    except ValueError:
        return False  # another host name: resolving it would already query the network


def _record(address) -> None:
    path = os.environ.get(LOG_ENV)
    if path:
        stack = "".join(traceback.format_stack(limit=8)[:-2])
        with open(path, "a") as f:
            f.write(f"pid {os.getpid()} tried to reach {address!r}\n{stack}\n")


def _guarded(name: str):
    def method(self, *args):
        address = args[-1] if name == "sendto" else args[0]
        if not is_local(address):
            _record(address)
            raise ConnectionRefusedError(f"offline guard: {address!r} is not on this machine; "
                                         "the series must run without the network")
        return _real[name](self, *args)
    method.__name__ = method.__qualname__ = f"guarded_{name}"
    return method


def install() -> None:
    """Patch socket.socket in this process (idempotent)."""
    for name in _real:
        setattr(socket.socket, name, _guarded(name))
