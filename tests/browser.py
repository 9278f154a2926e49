"""Headless Chromium for the tests: Debian's binary driven by Python Playwright, kept on this machine.

Never `playwright install` (it downloads a browser). Without a Chromium the caller skips, unless
REQUIRE_BROWSER=1 (set by .ci/run) turns that into a failure.
"""
from __future__ import annotations

import os
import shutil
from contextlib import contextmanager

import pytest

FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage"]


def chromium_or_skip() -> str:
    path = os.environ.get("CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
    if path:
        return path
    if os.environ.get("REQUIRE_BROWSER") == "1":
        pytest.fail("REQUIRE_BROWSER=1 but no Chromium was found: `apt-get install chromium` "
                    "or set CHROMIUM=/path/to/chromium")
    pytest.skip("no Chromium found: install Debian's `chromium` (or set CHROMIUM) to run browser tests")


@contextmanager
def local_page(origin: str):
    """Yield (page, blocked): requests outside `origin` are aborted and their URLs appended to blocked."""
    from playwright.sync_api import sync_playwright

    executable, blocked = chromium_or_skip(), []

    def only_origin(route):
        if route.request.url.startswith(origin):
            return route.continue_()
        blocked.append(route.request.url)
        return route.abort()

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=executable, headless=True, args=FLAGS)
        try:
            page = browser.new_context(viewport={"width": 1400, "height": 1000}).new_page()
            page.set_default_timeout(60_000)
            page.route("**/*", only_origin)
            yield page, blocked
        finally:
            browser.close()
