"""`make html`: a static site whose pages, widgets included, render with no network at all."""
import functools
import http.server
import os
import re
import threading
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook

from nbhelpers import _notebook_tools
from tests import browser

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    if not _notebook_tools._WIDGET_DIST.is_dir():
        if os.environ.get("REQUIRE_SITE") == "1":
            pytest.fail("REQUIRE_SITE=1 but node_modules is missing: run `npm ci` (make html does it)")
        pytest.skip("no local widget renderer: run `npm ci` (needs Node.js) to test `make html`")
    root = tmp_path_factory.mktemp("site")
    widget_nb = root / "99_widget.ipynb"
    nb = new_notebook(cells=[new_code_cell("import ipywidgets\nipywidgets.IntSlider(value=3, description='n')")])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, widget_nb)
    _notebook_tools.execute_notebook(widget_nb)                 # stores the widget state
    pages = _notebook_tools.build_site([REPO / "notebooks" / "00_environment.ipynb", widget_nb], root / "out")
    return root / "out", pages


def test_pages_name_no_remote_script_or_style(site):
    out, pages = site
    assert [p.name for p in pages] == ["00_environment.html", "99_widget.html"]
    for page in pages:
        html = page.read_text()
        remote = re.findall(r'<(?:script|link)[^>]+(?:src|href)="(https?://[^"]+)"', html)
        assert not remote, f"{page.name} loads {remote}"
        has_widgets = "application/vnd.jupyter.widget-state+json" in html
        assert has_widgets == (page.name == "99_widget.html")
        if has_widgets:                                          # the renderer comes from static/
            assert 'src="static/require.js"' in html and "widgetRendererSrc = 'static/embed-amd.js'" in html
        assert "unpkg.com" not in html and "require.min.js" not in html   # nbconvert's CDN defaults
    assert (out / "static" / "embed-amd.js").is_file() and (out / "index.html").is_file()


@pytest.fixture
def served(site):
    out, _ = site
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(out))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.mark.browser
def test_widget_renders_offline(served):
    with browser.local_page(served) as (page, blocked):
        page.goto(f"{served}/99_widget.html")
        readout = page.locator(".widget-slider .widget-readout").first
        readout.wait_for(timeout=60_000)
        assert readout.inner_text() == "3"
        page.goto(f"{served}/00_environment.html")
        assert page.locator(".jp-OutputArea-output img").count() == 1
    assert not blocked, f"the site tried to leave the machine: {blocked}"
