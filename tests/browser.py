"""Headless Chromium for the tests: Debian's binary driven by Python Playwright, kept on this machine.

Never `playwright install` (it downloads a browser). Without a Chromium the caller skips, unless
REQUIRE_BROWSER=1 (set by .ci/run) turns that into a failure.
"""
from __future__ import annotations

import os
import shutil
from contextlib import contextmanager

import pytest

from tests import REPO

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


AXE = REPO / "node_modules" / "axe-core" / "axe.min.js"      # package.json's axe-core, inlined: no request


def node_modules_or_skip(*paths) -> None:
    """Skip unless every path (under node_modules: the widget renderer, axe-core) is there; under REQUIRE_SITE=1
    (set by .ci/run, which runs `npm ci` first) a missing one fails instead."""
    missing = [str(p) for p in paths if not p.exists()]
    if not missing:
        return
    if os.environ.get("REQUIRE_SITE") == "1":
        pytest.fail(f"REQUIRE_SITE=1 but {', '.join(missing)} is missing: run `npm ci` (make html does it)")
    pytest.skip("node_modules is missing: run `npm ci` (needs Node.js; make html does it) to run this test")


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
    """Yield (page, blocked): requests outside `origins` are aborted and their URLs appended to blocked. Each
    page has a context of its own (no cookies, storage or cache shared with another test's) in the one Chromium
    this process keeps: starting Playwright and a browser for every test cost about a second each."""
    executable, blocked = chromium_or_skip(), []

    def only_origin(route):
        if route.request.url.startswith(origins):
            return route.continue_()
        blocked.append(route.request.url)
        return route.abort()

    context = _browser(executable).new_context(viewport={"width": 1400, "height": 1000})
    try:
        page = context.new_page()
        page.set_default_timeout(60_000)
        page.route("**/*", only_origin)
        yield page, blocked
    finally:
        context.close()


_RUNNING: dict = {}      # this process's Playwright and Chromium, started by the first page, stopped at exit


def _browser(executable: str):
    if _RUNNING.get("browser") is None or not _RUNNING["browser"].is_connected():
        import atexit

        from playwright.sync_api import sync_playwright

        if "playwright" not in _RUNNING:
            _RUNNING["playwright"] = sync_playwright().start()
            atexit.register(_stop_browser)
        _RUNNING["browser"] = _RUNNING["playwright"].chromium.launch(executable_path=executable, headless=True,
                                                                     args=FLAGS)
    return _RUNNING["browser"]


def _stop_browser() -> None:
    if _RUNNING.get("browser") is not None and _RUNNING["browser"].is_connected():
        _RUNNING["browser"].close()
    _RUNNING.pop("playwright").stop()


def stored_graph(notebook, label: str) -> dict:
    """The stored graph view of a committed notebook that has a node labelled `label`, as its front-end
    decodes it."""
    import json

    from nbhelpers import graph_view

    state = json.loads(notebook.read_text())["metadata"]["widgets"]["application/vnd.jupyter.widget-state+json"]
    graphs = [graph_view._untext(m["state"]["graph"]) for m in state["state"].values() if "graph" in m["state"]]
    (graph,) = [g for g in graphs if any(n[0] == label for n in g["nodes"])]
    return graph


def view_with(page, label: str):
    """The drawn graph view on `page` with a box whose full label (its tooltip) is `label`."""
    return page.locator(".gv").filter(has=page.locator("g.gv-box > title", has_text=label))


def view_with_title(page, text: str):
    """The drawn graph view on `page` whose title holds `text`."""
    return page.locator(".gv").filter(has=page.locator(".gv-title", has_text=text))


# A box's drawn text may be cut to fit; its <title> (the tooltip) is the whole label.
_BOX_INDEX = """(view, label) => [...view.querySelectorAll("g.gv-box")]
    .find((g) => g.querySelector("title").textContent === label).dataset.box"""
_LIT = """(view) => [...view.querySelectorAll("g.gv-box.gv-linked")].map((g) => g.querySelector("title").textContent)"""


def click_box(view, label: str) -> None:
    """Click the box labelled `label`, wherever the view has panned (a click event, as a mouse gives)."""
    view.locator(f'g.gv-box[data-box="{view.evaluate(_BOX_INDEX, label)}"]').first.dispatch_event("click")


def click_key(view, key: str) -> None:
    view.locator(f'g.gv-box[data-key="{key}"]').first.dispatch_event("click")


def box_keys(view) -> set[str]:
    return set(view.evaluate("""(v) => [...v.querySelectorAll("g.gv-box")].map((g) => g.dataset.key)"""))


def lit_labels(view) -> set[str]:
    return set(view.evaluate(_LIT))


# Every label of every view on the page: its drawn box against its rect, and its size on screen at the
# view's current zoom (font-size x the stage's pixels per unit).
LABEL_FIT = """() => [...document.querySelectorAll(".gv-pane")].flatMap((pane) => {
    const svg = pane.querySelector(".gv-stage svg"), scale = svg.getBoundingClientRect().width / svg.viewBox.baseVal.width;
    return [...pane.querySelectorAll("g.gv-box")].flatMap((g) => {
      const r = g.querySelector("rect").getBBox();
      return [...g.querySelectorAll("text")].map((t) => {
        const b = t.getBBox(), inside = b.x >= r.x - 0.5 && b.y >= r.y - 0.5 && b.x + b.width <= r.x + r.width + 0.5
          && b.y + b.height <= r.y + r.height + 0.5;
        return { key: g.dataset.key, text: t.textContent, inside, px: Number(t.getAttribute("font-size")) * scale };
      });
    });
  })"""


def check_labels_fit(page, min_px: float = 10.0) -> int:
    """Every label on `page` inside its box and at least `min_px` on screen; returns how many were measured."""
    labels = page.evaluate(LABEL_FIT)
    outside = [(x["key"], x["text"]) for x in labels if not x["inside"]]
    small = sorted({(x["key"], round(x["px"], 2)) for x in labels if x["px"] < min_px - 0.01})   # 10 px: 9.9999
    assert labels and not outside and not small, (outside[:5], small[:5])
    return len(labels)


# Every drawn edge label of every pane against every other label and every box of its pane, by the boxes the
# browser measures (SVG user units: one coordinate system per pane; touching is not overlapping), and its
# size on screen (10 px or more, 9.99 for rounding).
LABEL_OVERLAPS = """() => {
    const meet = (a, b) => a.x < b.x + b.width - 0.01 && b.x < a.x + a.width - 0.01
      && a.y < b.y + b.height - 0.01 && b.y < a.y + a.height - 0.01;
    const found = [];
    let labels = 0;
    document.querySelectorAll(".gv-pane").forEach((pane, p) => {
      const title = pane.querySelector(".gv-title").textContent.slice(0, 30), svg = pane.querySelector(".gv-stage svg");
      const scale = svg.getBoundingClientRect().width / svg.viewBox.baseVal.width;
      const texts = [...pane.querySelectorAll("text.gv-elabel")].map((t) => [t.textContent, t.getBBox()]);
      for (const t of pane.querySelectorAll("text.gv-elabel")) {
        const px = Number(t.getAttribute("font-size")) * scale;
        if (px < 9.99) found.push(`pane ${p} (${title}): ${t.textContent} is ${px.toFixed(2)} px on screen`);
      }
      const rects = [...pane.querySelectorAll("g.gv-box")].map((g) => [g.dataset.key, g.querySelector("rect").getBBox()]);
      labels += texts.length;
      texts.forEach(([text, r], i) => {
        for (const [other, q] of [...texts.slice(i + 1), ...rects]) {
          if (meet(r, q)) found.push(`pane ${p} (${title}): ${text} on ${other}`);
        }
      });
    });
    return { labels, found };
  }"""


def check_labels_apart(page) -> int:
    """No edge label on `page` overlaps another label or a box, and each is 10 px or more on screen; returns how
    many labels were measured."""
    measured = page.evaluate(LABEL_OVERLAPS)
    assert not measured["found"], measured["found"][:8]
    return measured["labels"]


# Each pane: how far its drawn boxes reach past the frame (the SVG's viewBox) left and right, in user units,
# and what its hint says when shown.
WIDE_PANES = """() => [...document.querySelectorAll(".gv-pane")].map((pane) => {
    const frame = pane.querySelector(".gv-stage svg").viewBox.baseVal, hint = pane.querySelector(".gv-hint");
    const boxes = [...pane.querySelectorAll("g.gv-box rect")].map((r) => r.getBBox());
    return { left: Math.max(0, ...boxes.map((b) => frame.x - b.x)),
      right: Math.max(0, ...boxes.map((b) => b.x + b.width - frame.x - frame.width)),
      hint: !hint || hint.hidden || !hint.offsetParent ? "" : hint.textContent };   // none: an old front-end
  })"""


def check_wide_views_say_so(page) -> int:
    """A pane whose boxes go on past its frame shows a hint that says which way; the others show none.
    Returns how many panes were cut."""
    panes = page.evaluate(WIDE_PANES)
    for pane in panes:
        cut = pane["left"] > 1 or pane["right"] > 1
        assert bool(pane["hint"]) == cut, pane
        assert not pane["right"] > 1 or "right" in pane["hint"] or "both sides" in pane["hint"], pane
    return sum(1 for pane in panes if pane["hint"])


def check_one_module_opens(view) -> None:
    """02's ResNet view, opened with only the model expanded: a click opens layer1 alone, its two blocks one
    folded box; a click on the fold opens layer1.0 and the chooser's button folds it again; the chooser shows
    layer1.1 instead (a node in it names its copy), and the node's module path shuts layer1 again."""
    shut = box_keys(view)
    assert {"g:ResNet.layer1", "g:ResNet.layer2", "g:ResNet.layer4"} <= shut
    click_key(view, "g:ResNet.layer1")
    keys = box_keys(view)
    assert {"f:ResNet.layer1.0|ResNet.layer1.1", "g:ResNet.layer2", "g:ResNet.layer3"} <= keys, keys
    assert not any(k.startswith("g:ResNet.layer2.") for k in keys) and "g:ResNet.layer1" not in keys
    assert view.locator(".gv-count").inner_text() == "12 boxes of 133 nodes"
    assert view.locator(".gv-folds select").count() == 0                      # nothing open: nothing to choose
    click_key(view, "f:ResNet.layer1.0|ResNet.layer1.1")                       # the fold: opens its first copy
    first = box_keys(view)
    assert {"g:ResNet.layer1.0.conv1", "f:ResNet.layer1.1|ResNet.layer1.1"} <= first, first
    view.locator(".gv-folds button.gv-fold-again").first.click()               # the chooser's button folds it
    assert box_keys(view) == keys and view.locator(".gv-folds select").count() == 0
    click_key(view, "f:ResNet.layer1.0|ResNet.layer1.1")
    assert box_keys(view) == first
    chooser = view.locator(".gv-folds select").first
    assert chooser.input_value() == "0" and chooser.locator("option").all_inner_texts() == ["layer1.0", "layer1.1"]
    chooser.select_option("1")                                                 # the other copy instead
    second = box_keys(view)
    assert {"g:ResNet.layer1.1.conv1", "f:ResNet.layer1.0|ResNet.layer1.0"} <= second, second
    assert not any(k.startswith("g:ResNet.layer1.0.") for k in second)
    node = next(k for k in second - keys if k.startswith("n:"))                # layer1.1's residual add
    click_key(view, node)
    assert "layer1.1 is copy 2 of 2: layer1.0-1 · BasicBlock × 2" in view.locator(".gv-details").inner_text()
    view.locator(".gv-path button", has_text="ResNet.layer1").first.click()
    assert box_keys(view) == shut and view.locator(".gv-folds select").count() == 0   # layer1, all inside it, shut


def check_keyboard(view) -> None:
    """Tab into the view: arrows move the selection along edges, Enter opens a module, Escape clears."""
    view.locator(".gv-stage").first.focus()
    view.page.keyboard.press("ArrowDown")
    first = view.locator("g.gv-box.gv-selected").get_attribute("data-key")
    view.page.keyboard.press("ArrowDown")
    second = view.locator("g.gv-box.gv-selected").get_attribute("data-key")
    assert first != second and view.locator("g.gv-box.gv-selected").count() == 1
    assert view.locator(".gv-info").inner_text().startswith(("selected ", "module "))
    view.page.keyboard.press("Escape")
    assert view.locator("g.gv-box.gv-selected").count() == 0


def check_diff(view, titles: tuple[str, str], legend: str) -> None:
    """A diff's panes are titled, its legend names what its outlines mean, and a click selects one node:
    on both sides where the diff matched it, with one details panel."""
    assert tuple(view.locator(".gv-title").all_inner_texts()) == titles
    assert legend in view.locator(".gv-legend").inner_text()
    left, right = view.locator(".gv-pane").nth(0), view.locator(".gv-pane").nth(1)
    left.locator("g.gv-box[data-key^='n:']").first.dispatch_event("click")
    right.locator("g.gv-box[data-key^='n:']").first.dispatch_event("click")
    assert left.locator("g.gv-box.gv-selected").count() <= 1 and right.locator("g.gv-box.gv-selected").count() == 1
    assert view.locator(".gv-details .gv-heading").count() == 1
    assert view.locator(".gv-details .gv-heading").inner_text().startswith(titles[1] + ": ")


_PANE_BOX = """(pane, [label, nth]) => [...pane.querySelectorAll("g.gv-box")]
    .filter((g) => g.querySelector("text") && g.querySelector("text").textContent === label)[nth].dataset.box"""


def click_label(pane, label: str, nth: int = 0) -> None:
    """Click the `nth` box of `pane` whose drawn label is `label` (a click event, wherever it has panned)."""
    pane.locator(f'g.gv-box[data-box="{pane.evaluate(_PANE_BOX, [label, nth])}"]').dispatch_event("click")


def selected_label(pane) -> str:
    return pane.locator("g.gv-box.gv-selected text").first.text_content()


# 02's views, in the order the notebook shows them
VIEWS_02 = {"twin": 0, "mlp": 1, "cnn": 2, "residual": 3, "resnet": 4, "resnet twin": 5, "diff": 6}
# 02's first twin (Flatten, Linear(784, 128), ReLU, Linear(128, 10) on 32 images): three forward ops clicked,
# each with the node it made, what that node saved, and the forward boxes that made what it saved; the reverse
TWIN_02 = ([(("addmm", 0), "AddmmBackward0", ["_saved_mat1 [32, 784] float32 100,352 B"], ["view"]),
            (("relu", 0), "ReluBackward0", ["_saved_result [32, 128] float32 16,384 B"], ["relu"]),
            (("addmm", 1), "AddmmBackward0", ["_saved_mat1 [32, 128] float32 16,384 B",
                                              "_saved_mat2 [128, 10] float32 5,120 B"], ["relu", "t"])],
           (("ReluBackward0", 0), "relu"))


def check_twin(view, clicks, reverse) -> None:
    """A twin view: a click on a forward op (label, nth) selects the backward node it made, the panel names that
    node and lists what it saved, and the forward boxes whose tensors it saved light up; a click on a backward
    node (label, nth) selects the op that made it."""
    left, right = view.locator(".gv-pane").nth(0), view.locator(".gv-pane").nth(1)
    assert view.locator(".gv-title").nth(0).inner_text().startswith("forward: ")
    for (label, nth), node, saved, lit in clicks:
        click_label(left, label, nth)
        assert selected_label(right) == node, (label, nth)
        details = view.locator(".gv-details").inner_text()
        assert f"{node} (selected on the right)" in details and all(s in details for s in saved), details
        assert sorted(left.locator("g.gv-box.gv-saved text").all_text_contents()) == lit, (label, nth)
    (node, nth), label = reverse
    click_label(right, node, nth)
    assert selected_label(left) == label
    assert "made a tensor the selected backward node saved" in view.locator(".gv-legend").inner_text()


def check_compile_view_clicks(view, graph: dict, line: str, code: str) -> None:
    """In a compile_lens view: a click on source line `line` lights up exactly the nodes Python linked
    to it (its FX nodes among them), and a click on its break shows the break's GB code."""
    labels = [n[0] for n in graph["nodes"]]
    linked = {labels[k] for k in graph["nodes"][labels.index(line)][7]}
    view.locator(".gv-expand").click()                   # every graph open: the links land on their nodes
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
    view.locator(".gv-expand").click()
    click_box(custom, CUSTOM_OP_KERNEL)
    assert lit_labels(custom) == linked
    fused = view.locator(".gv-details").inner_text().split("fuses", 1)[1]
    assert "mul" in fused and "scaled_relu_default" not in fused, fused


def stored_panes(notebook) -> int:
    """How many panes the stored graph views of `notebook` draw (a diff has two)."""
    import json

    state = json.loads(notebook.read_text())["metadata"]["widgets"]["application/vnd.jupyter.widget-state+json"]
    return sum(2 if model["state"].get("other") else 1 for model in state["state"].values() if "graph" in model["state"])


def all_drawn(views, notebook):
    """`views` (a locator of a page's graph views) once every pane `notebook` stores is drawn. The views render in
    no fixed order: before that, `views.first` can be a later view that is drawn already, and then becomes another
    view between two actions (13's memory timeline failed so, about one run in six)."""
    from playwright.sync_api import expect

    expect(views.locator(".gv-pane")).to_have_count(stored_panes(notebook), timeout=120_000)
    return views


# Serious and critical violations inside the graph views (nbconvert's page around them is not ours to fix).
AXE_SERIOUS = """async () => {
    const found = [];
    for (const view of document.querySelectorAll(".gv")) {          // one view at a time: its context only
        const result = await axe.run(view, { resultTypes: ["violations"] });
        found.push(...result.violations.filter((v) => ["serious", "critical"].includes(v.impact))
            .map((v) => `${v.id}: ${v.nodes.length} (${v.nodes[0].target.join(" ")})`));
    }
    return found;
}"""


# Serious and critical violations anywhere on the page: the site's pages are ours, nbconvert's frame included.
AXE_PAGE_SERIOUS = """async () => {
    const result = await axe.run(document, { resultTypes: ["violations"] });
    return result.violations.filter((v) => ["serious", "critical"].includes(v.impact))
        .map((v) => `${v.id}: ${v.nodes.length} (${v.nodes[0].target.join(" ")})`);
}"""

def check_timeline(view, line: str) -> str:
    """A diagnosis view (Diagnosis.show): the keyboard walks the timeline until the op at `line` (a fragment of
    the learner's line) made bytes a backward node holds; Enter selects that node in the graph below, opening
    its modules and marking the ops whose bytes it holds; hovering the far right shows a backward op; "by module"
    restacks the legend and keeps the marks. Returns the selected node's label."""
    info, chart = view.locator(".gv-tl-info"), view.locator(".gv-tl-chart")
    chart.focus()
    view.page.keyboard.press("Home")
    for _ in range(int(chart.get_attribute("aria-valuemax")) + 1):
        text = info.inner_text()
        if line in text and "held by node" in text:
            break
        view.page.keyboard.press("ArrowRight")
    assert line in text and "held by node" in text, text
    label = text.split("held by node ", 1)[1].split(": ", 1)[1].split(" (click", 1)[0]
    view.page.keyboard.press("Enter")
    assert "(selected below)" in info.inner_text()
    assert view.locator("g.gv-box.gv-selected").count() == 1 and selected_label(view) == label
    assert f"{label} (node " in view.locator(".gv-details").inner_text()
    lit = int(chart.get_attribute("data-lit"))            # the selected node's ops are marked on the timeline,
    marks = [m.get_attribute("x1") for m in view.locator(".gv-tl-lit").all()]   # the op Enter was pressed on too
    assert lit >= 1 and len(marks) == lit and view.locator(".gv-tl-cursor").get_attribute("x1") in marks
    box = chart.bounding_box()
    chart.hover(position={"x": box["width"] * 0.97, "y": box["height"] / 2})
    assert info.inner_text().startswith("op ") and "(backward, " in info.inner_text(), info.inner_text()
    before = view.locator(".gv-tl .gv-legend").inner_text()
    view.locator(".gv-tl-by-module").click()
    assert view.locator(".gv-tl-by-module").get_attribute("aria-pressed") == "true"
    assert view.locator(".gv-tl .gv-legend").inner_text() != before and "gradients" not in \
        view.locator(".gv-tl .gv-legend").inner_text()
    assert view.locator(".gv-tl-lit").count() == lit      # and stay marked when the chart is redrawn
    return label


# Each time bar of a view: its width, and its box's width, key and tooltip.
_TIME_BARS = """(view) => [...view.querySelectorAll("g.gv-box")].filter((g) => g.querySelector("rect.gv-time")).map((g) => ({
    bar: g.querySelector("rect.gv-time").getBBox().width, box: g.querySelector("rect").getBBox().width,
    key: g.dataset.key, title: g.querySelector("title").textContent }))"""


def check_time_line(view) -> str:
    """A timed view's time-line (node_times.timeline), after check_time_bars selected the slowest node: that node's
    slice is outlined above; a click on the first node's slice selects that node below (its panel names it) and
    outlines that slice instead; the keyboard walks the slices (Home, arrows) and Enter selects one's node.
    Returns the label the click selected."""
    chart, info = view.locator(".gv-tl-chart"), view.locator(".gv-tl-info")
    assert chart.get_attribute("data-lit") == "1" and view.locator(".gv-tl-lit").count() == 1
    first = view.locator(".gv-tl-slice:not(.gv-tl-outside)").first
    first.click()
    said = info.inner_text()
    label = _slice_label(said)
    assert "(selected below)" in said and label in view.locator(".gv-details").inner_text(), said
    lit = view.locator(".gv-tl-lit")
    assert lit.count() == 1 and lit.get_attribute("x") == first.get_attribute("x")
    chart.focus()
    for key in ("Home", "ArrowRight", "ArrowRight", "Enter"):  # slice 0 is backward()'s seed, outside every node
        view.page.keyboard.press(key)
    said = info.inner_text()
    second = _slice_label(said)
    assert chart.get_attribute("aria-valuenow") == "2" and said.startswith("node ") and second != label, said
    assert "(selected below)" in said and second in view.locator(".gv-details").inner_text()
    at = view.locator(".gv-tl-slice").nth(2)                 # the outline moved to the slice Enter chose
    assert lit.count() == 1 and lit.get_attribute("x") == at.get_attribute("x")
    return label


def check_forward_time_line(view) -> str:
    """A twin view of a timed forward (graph_view.show_twin(fg, times=..., timeline=...)): the forward pane's boxes
    are barred and the legend says of what; the keyboard walks the slices to the first addmm and Enter selects it in
    the forward pane, and with it the backward node it made; a click on the `t` box beside it moves the outline to
    that op's slice; a gap between slices is named as one. Returns the backward node's label."""
    chart, info = view.locator(".gv-tl-chart"), view.locator(".gv-tl-info")
    left, right = view.locator(".gv-pane").nth(0), view.locator(".gv-pane").nth(1)
    assert left.locator("rect.gv-time").count() >= 1 and right.locator("rect.gv-time").count() == 0
    assert "bar: share of the forward's time" in view.locator(".gv-legend").first.inner_text()
    chart.focus()
    view.page.keyboard.press("Home")
    for _ in range(int(chart.get_attribute("aria-valuemax")) + 1):
        if ": addmm — " in info.inner_text():
            break
        view.page.keyboard.press("ArrowRight")
    said = info.inner_text()
    assert said.startswith("node ") and ": addmm — " in said and "% of the forward" in said, said
    view.page.keyboard.press("Enter")
    assert "(selected below)" in info.inner_text() and selected_label(left) == "addmm"
    made = selected_label(right)
    assert made == "AddmmBackward0" and chart.get_attribute("data-lit") == "1"
    click_label(left, "t", 0)
    assert selected_label(left) == "t" and chart.get_attribute("data-lit") == "1"
    assert info.inner_text().startswith("node ") and ": t — " in info.inner_text(), info.inner_text()
    _check_a_gap(view)
    return made


# The middle of the first stretch of a time-line that no slice covers (3 of the chart's 720 units or more), as a
# fraction of the chart's width; null when there is none.
_FIRST_GAP = """(chart) => { const r = [...chart.querySelectorAll("rect.gv-tl-slice")].map((e) =>
    [+e.getAttribute("x"), +e.getAttribute("width")]);
  for (let i = 0; i + 1 < r.length; i++) {
    const end = r[i][0] + r[i][1];
    if (r[i + 1][0] - end >= 3) return (end + r[i + 1][0]) / 2 / chart.viewBox.baseVal.width; }
  return null; }"""


def _check_a_gap(view) -> None:
    """Hovering where no profiled event ran names the gap (not the slice before it), and a click there selects
    nothing."""
    chart, info = view.locator(".gv-tl-chart"), view.locator(".gv-tl-info")
    at, box = chart.evaluate(_FIRST_GAP), chart.bounding_box()
    assert at is not None, "no gap of 3 units on the time-line"
    panel = view.locator(".gv-details").inner_text()
    chart.hover(position={"x": box["width"] * at, "y": box["height"] / 2})
    assert info.inner_text().startswith("a gap at ") and "no profiled event ran here" in info.inner_text()
    chart.click(position={"x": box["width"] * at, "y": box["height"] / 2})
    assert info.inner_text().startswith("a gap at ") and view.locator(".gv-details").inner_text() == panel


def _slice_label(said: str) -> str:
    """The name in a time-line slice's description: "node 0: NllLossBackward0 — 1.39 ms, ..." -> NllLossBackward0."""
    return said.split(": ", 1)[1].split(" — ")[0]


def check_time_bars(view) -> str:
    """A view of a timed backward (graph_view.from_autograd(graph, times=...)): every box with time has a bar, the
    legend says what a bar is, the longest bar spans its box (less 3 px a side) and its tooltip gives the share;
    opening the slowest box and clicking its slowest node shows that node's time in the panel. Returns the node's
    label."""
    bars = view.evaluate(_TIME_BARS)
    assert bars and "bar: share of the backward's time" in view.locator(".gv-legend").first.inner_text()
    assert all(b["title"].endswith("% of the backward") for b in bars), bars
    for _ in range(4):                                   # open modules until the slowest box is a node
        slowest = max(bars, key=lambda b: b["bar"])
        assert abs(slowest["bar"] - (slowest["box"] - 6)) < 0.5, slowest
        view.locator(f'g.gv-box[data-key="{slowest["key"]}"]').click()
        if slowest["key"].startswith("n:"):
            break
        view.locator(".gv-box").first.wait_for()
        bars = view.evaluate(_TIME_BARS)
    details = view.locator(".gv-details").inner_text()
    assert slowest["key"].startswith("n:") and "time" in details and "of the backward" in details, details
    assert "profiler events" in details
    return slowest["title"].split(" · ")[0]
