"""The page Diagnosis.save_html writes, opened from file:// in Chromium with every request blocked: the findings
and agreements are there as text, the timeline answers hover, keys and clicks by selecting the node that holds
the bytes, the twin view answers clicks, every label sits in its box at 10 px or more, and a hostile module name
stays text."""
import contextlib

import pytest
import torch
from torch import nn

from nbhelpers import planted_models
from nbhelpers.diagnosis import diagnose, findings
from nbhelpers.diagnosis import view as diagnosis_view
from tests import REPO, browser


@pytest.fixture(scope="module")
def pages(tmp_path_factory):
    root = tmp_path_factory.mktemp("report")
    torch.manual_seed(0)
    diagnose.run(planted_models.OuterProduct(), torch.randn(8, 32)).save_html(root / "outer.html")
    hostile = nn.Sequential()
    hostile.add_module("<img src=x onerror=alert(1)>", nn.Linear(3, 3))     # no dot: a legal name
    diagnose.run(hostile, torch.randn(2, 3)).save_html(root / "hostile.html")
    return root


@contextlib.contextmanager
def _opened(path, scheme: str = "light"):
    """The page at `path`, rendered; every request but the page's own file is aborted, and must not happen."""
    with browser.local_page(path.as_uri()) as (page, blocked):
        errors = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.emulate_media(color_scheme=scheme)
        page.goto(path.as_uri())
        page.wait_for_selector("body[data-ready=true]", timeout=60_000)
        yield page
    assert not blocked and not errors, (blocked, errors)


@pytest.mark.browser
@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_the_saved_page_answers_clicks_from_a_file_with_no_network(pages, scheme):
    browser.node_modules_or_skip(browser.AXE)
    with _opened(pages / "outer.html", scheme) as page:
        _check_outer(page, scheme)


def _check_outer(page, scheme: str) -> None:
    first = page.locator("#findings li").first.inner_text()
    assert first.startswith("saved-for-backward") and "planted_models.py:" in first and "pairs = h[:, :, None]" in first
    assert page.locator("#agreement-count").inner_text() == (
        "14 of 14 numbers agree. 2 of them are totals both sides add up alike, not independent measurements.")
    parameters = page.locator("#agreements tr", has_text="peak Parameter bytes").locator("td").last
    assert parameters.text_content().startswith("no: both add up the sizes of model.parameters()")
    lesson = page.locator("#findings li .lesson a").first     # the site's page if make html built it, else the notebook
    assert lesson.inner_text() == "notebook 02 · autograd graph"
    built = REPO / "build" / "site" / "02_autograd_graph.html"
    assert lesson.evaluate("a => a.href") == (built if built.is_file() else REPO / "notebooks" /
                                              "02_autograd_graph.ipynb").as_uri()
    views = page.locator(".gv")
    assert views.count() == 3
    assert browser.check_timeline(views.nth(0), "h[:, :, None] * h[:, None, :]") == "AddmmBackward0"
    browser.check_time_bars(views.nth(1))                # the backward's time: bars, then its time-line both ways
    browser.check_time_line(views.nth(1))
    twin = views.nth(2)
    browser.click_label(twin.locator(".gv-pane").nth(0), "tanh", 0)
    assert browser.selected_label(twin.locator(".gv-pane").nth(1)) == "TanhBackward0"
    print(f"{browser.check_labels_fit(page)} labels inside their boxes at 10 px or more")
    page.add_script_tag(path=str(browser.AXE))    # inlined: no request
    assert page.evaluate(browser.AXE_SERIOUS) == []
    whole = page.evaluate("""async () => (await axe.run(document, { resultTypes: ["violations"] })).violations
        .filter((v) => ["serious", "critical"].includes(v.impact)).map((v) => `${v.id}: ${v.nodes[0].target}`)""")
    assert whole == []
    dark = page.evaluate("getComputedStyle(document.body).backgroundColor") == "rgb(30, 30, 30)"
    assert dark == (scheme == "dark") and (views.nth(0).evaluate("v => v.classList.contains('gv-dark')") == dark)


def test_every_lesson_is_a_notebook_of_the_series():
    for kind, lesson in findings.LESSONS.items():
        notebook = findings.Finding(kind, "title", "evidence").notebook
        assert notebook.startswith(lesson[:2]) and (REPO / "notebooks" / notebook).is_file(), kind


@pytest.mark.browser
def test_a_hostile_module_name_is_text_on_the_page(pages):
    with _opened(pages / "hostile.html") as page:
        assert page.locator("img").count() == 0
        assert page.locator("g.gv-box > title", has_text="<img src=x onerror=alert(1)>").count() >= 1


def test_a_lesson_links_to_the_built_page_else_the_notebook_else_nothing(tmp_path):
    torch.manual_seed(0)
    d = diagnose.run(planted_models.OuterProduct(), torch.randn(8, 32))
    notebook = d.findings[0].notebook
    site, folder = tmp_path / "site", tmp_path / "reports"
    site.mkdir(), folder.mkdir()
    to_notebook = diagnosis_view.lesson_links(d, folder, site)[notebook]       # no page built: the notebook
    assert (folder / to_notebook).resolve() == REPO / "notebooks" / notebook
    (site / notebook.replace(".ipynb", ".html")).write_text("<p>page</p>")
    assert diagnosis_view.lesson_links(d, folder, site)[notebook] == f"../site/{notebook.replace('.ipynb', '.html')}"
    assert '"notebook": ""' in diagnosis_view.page(d, {}) and f'"notebook": "{to_notebook}"' not in \
        diagnosis_view.page(d, {})                                              # outside a checkout: no link
