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
def serve(directory) -> str:
    """Serve `directory` on a free loopback port while the block runs; yield its origin."""
    import functools
    import http.server
    import threading

    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(directory))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@contextmanager
def local_page(*origins: str):
    """Yield (page, blocked): requests outside `origins` are aborted and their URLs appended to blocked."""
    from playwright.sync_api import sync_playwright

    executable, blocked = chromium_or_skip(), []

    def only_origin(route):
        if route.request.url.startswith(origins):
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


def stored_graph(notebook, label: str) -> dict:
    """The stored graph view of a committed notebook that has a node labelled `label`, as its front-end
    receives it."""
    import json

    state = json.loads(notebook.read_text())["metadata"]["widgets"]["application/vnd.jupyter.widget-state+json"]
    graphs = [json.loads(m["state"]["graph"]) for m in state["state"].values() if "graph" in m["state"]]
    (graph,) = [g for g in graphs if any(n[0] == label for n in g["nodes"])]
    return graph


def view_with(page, label: str):
    """The drawn graph view on `page` whose text includes `label`."""
    return page.locator(".gv").filter(has_text=label)


# A box's text content also holds its <title> (the tooltip): compare the drawn <text> only.
_BOX_INDEX = """(view, label) => [...view.querySelectorAll("g.gv-box")]
    .find((g) => g.querySelector("text").textContent === label).dataset.box"""
_LIT = """(view) => [...view.querySelectorAll("g.gv-box.gv-linked")].map((g) => g.querySelector("text").textContent)"""


def click_box(view, label: str) -> None:
    view.locator(f'g.gv-box[data-box="{view.evaluate(_BOX_INDEX, label)}"]').click()


def lit_labels(view) -> set[str]:
    return set(view.evaluate(_LIT))


def check_compile_view_clicks(view, graph: dict, line: str, code: str) -> None:
    """In a compile_lens view: a click on source line `line` lights up exactly the nodes Python linked
    to it (its FX nodes among them), and a click on its break shows the break's GB code."""
    labels = [n[0] for n in graph["nodes"]]
    linked = {labels[k] for k in graph["nodes"][labels.index(line)][7]}
    click_box(view, line)
    lit = lit_labels(view)
    assert lit == linked and any(not label.startswith("break ") for label in lit), (lit, linked)
    click_box(view, f"break {code}: {line}")
    details = view.locator(".gv-details").inner_text()
    assert f"code\n{code}" in details and "explain lists it" in details, details


CUSTOM_OP_KERNEL = "cpp_fused_mul_scaled_relu_0"      # inductor names a kernel after the nodes near it
CUSTOM_OP_NODE = "scaled_relu_default: scaled_relu.default"


def check_kernel_links_by_provenance(view, graph: dict) -> None:
    """11's compile view: a click on the kernel inductor named after `scaled_relu` lights up the nodes whose
    computation its code contains (`mul`), as the stored graph links them, and not the custom op, which runs
    as an extern kernel; the panel lists what the kernel fuses, without the op."""
    labels = [n[0] for n in graph["nodes"]]
    linked = {labels[k] for k in graph["nodes"][labels.index(CUSTOM_OP_KERNEL)][7]}
    assert "mul: mul" in linked and CUSTOM_OP_NODE not in linked, linked
    custom = view.locator(".gv-pane").first           # the view is a diff: the custom op's graph on the left
    click_box(custom, CUSTOM_OP_KERNEL)
    assert lit_labels(custom) == linked
    fused = view.locator(".gv-details").inner_text().split("fuses", 1)[1]
    assert "mul" in fused and "scaled_relu_default" not in fused, fused
