# Python imports this at start-up when tests/offline_guard is on PYTHONPATH (set by conftest.py).
import os

if os.environ.get("NBHELPERS_NET_LOG"):
    import offline_guard

    offline_guard.install()
