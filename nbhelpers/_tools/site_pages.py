"""The static site's own pages and the way around nbconvert's: an index of the series, a start-here path, the
myth index as a page, and on every notebook page previous / next links, a table of contents and one theme for
the whole page (site.css: light, or dark where the reader's system prefers it).

Links between notebooks are relative `.ipynb` links in their markdown, which JupyterLab follows; here they
become links to the pages. The run times come from README.md's notebook table, the one place they are stated.
"""
from __future__ import annotations

import html
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

from nbhelpers._tools import widget_state
from nbhelpers.atomic import write_atomic

__all__ = ["Card", "read_card", "run_times", "to_pages", "render_notebook", "write_pages", "STYLESHEET",
           "MYTHS_PAGE", "START_PAGE"]

REPO = Path(__file__).resolve().parents[2]
STYLESHEET = "site.css"
MYTHS_PAGE = "myths.html"
START_PAGE = "start.html"
_MYTH_LINK = re.compile(r"\]\(README\.md(#[^)\s]*)?\)")
_TITLE = re.compile(r"^# (\d\d) · (.+)$", re.M)
_PREREQUISITES = re.compile(r"^\*\*Prerequisites:\*\* (.+)$", re.M)
_RUN_TIME = re.compile(r"^\| `(\d\d_[a-z0-9_]+)` \| (~\d+ s)\b", re.M)
_SENTENCE_END = re.compile(r"(?<=[a-z)*`][.!?])\s")
_H2 = re.compile(r'<h2 id="([^"]+)">(.*?)<a class="anchor-link"', re.S)


@dataclass(frozen=True)
class Card:
    """What the index says of one notebook; the texts are markdown."""
    stem: str
    title: str
    teaches: str = ""
    prerequisites: str = ""
    run_time: str = ""

    @property
    def page(self) -> str:
        """The page's file name, escaped for an attribute."""
        return html.escape(f"{self.stem}.html")


def run_times(readme: Path = REPO / "README.md") -> dict[str, str]:
    """{stem: "~15 s"} from README.md's notebook table."""
    return dict(_RUN_TIME.findall(readme.read_text()))


def read_card(nb, stem: str, times: dict[str, str]) -> Card:
    """The card of notebook `nb` (nbformat), from its opening cell: `# NN · Title`, the first sentence after it."""
    first = nb.cells[0].source if nb.cells and nb.cells[0].cell_type == "markdown" else ""
    title = _TITLE.search(first)
    if title is None:                                  # not one of the series' notebooks: its name is its title
        return Card(stem, html.escape(stem), run_time=times.get(stem, ""))
    motivation = first[title.end():].strip().split("\n\n")[0].replace("\n", " ")
    prerequisites = _PREREQUISITES.search(first)
    return Card(stem, f"{title.group(1)} · {title.group(2)}", _SENTENCE_END.split(motivation)[0],
                prerequisites.group(1) if prerequisites else "", times.get(stem, ""))


_LINK_TO_NB = re.compile(r"\[([^\]]*)\]\((\d\d_[a-z0-9_]+)\.ipynb(#[^)\s]*)?\)")


def to_pages(markdown: str, built: set[str] | None = None) -> str:
    """`markdown` with its links to notebooks and to the myth index pointing at the site's pages. A link to a
    notebook whose page is not in `built` (stems; None: every page is) stays as its text, marked as such:
    `make html NB=...` builds some pages, and a link to a missing page would lead nowhere."""
    def page(m: re.Match) -> str:
        if built is None or m.group(2) in built:
            return f"[{m.group(1)}]({m.group(2)}.html{m.group(3) or ''})"
        return f"{m.group(1)} (page not built: `make html` builds them all)"

    return _MYTH_LINK.sub(rf"]({MYTHS_PAGE}\1)", _LINK_TO_NB.sub(page, markdown))


def _inline(markdown: str, built: set[str] | None = None) -> str:
    """One line of the series' own markdown as HTML, without the paragraph around it."""
    from nbconvert.filters.markdown_mistune import markdown2html_mistune

    text = markdown2html_mistune(to_pages(markdown, built)).strip()
    return text[3:-4] if text.startswith("<p>") and text.endswith("</p>") else text


def _link(card: Card | None, rel: str) -> str:
    if card is None:
        return f'<span class="site-{rel}"></span>'
    title = _inline(card.title)
    text = f"← {title}" if rel == "prev" else f"{title} →"
    return f'<a class="site-{rel}" rel="{rel}" href="{card.page}">{text}</a>'


def _nav(prev: Card | None, nxt: Card | None) -> str:
    return (f'<nav class="site-nav" aria-label="series">{_link(prev, "prev")}<span class="site-home">'
            f'<a href="index.html">index</a> · <a href="{START_PAGE}">start here</a> · '
            f'<a href="{MYTHS_PAGE}">myth index</a></span>{_link(nxt, "next")}</nav>')


def _toc(body: str) -> str:
    """A table of contents from the page's `##` headings, linked to nbconvert's anchors."""
    entries = "".join(f'<li><a href="#{anchor}">{re.sub(r"</?a[^>]*>", "", text)}</a></li>'
                      for anchor, text in _H2.findall(body))
    return (f'<nav class="site-toc" aria-label="contents"><details open><summary>Contents</summary><ol>{entries}'
            '</ol></details></nav>') if entries else ""


def render_notebook(exporter, nb_path: Path, cards: list[Card], built: set[str] | None = None) -> str:
    """The page of `nb_path` (one of `cards`, in site order): its links to the `built` pages, the navigation,
    site.css."""
    import nbformat

    nb = nbformat.read(nb_path, as_version=4)
    widget_state.fall_back_to_pictures(nb)            # a view without stored state shows its picture
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            cell.source = to_pages(cell.source, built)
    body, _ = exporter.from_notebook_node(nb, resources={"metadata": {"name": nb_path.stem, "path": str(nb_path.parent)}})
    k = [c.stem for c in cards].index(nb_path.stem)
    prev, nxt = cards[k - 1] if k else None, cards[k + 1] if k + 1 < len(cards) else None
    title = html.escape(re.sub(r"`", "", cards[k].title))
    body = re.sub(r"<title>[^<]*</title>", f"<title>{title}</title>", body, count=1)
    body = body.replace("</head>", f'<link rel="stylesheet" href="{STYLESHEET}">\n</head>', 1)
    return re.sub(r"(<body[^>]*>)", lambda m: m.group(1) + _nav(prev, nxt) + _toc(body), body, count=1)


def _page(title: str, main: str) -> str:
    return (f'<!doctype html>\n<html lang="en"><head><meta charset="utf-8"><meta name="viewport" '
            f'content="width=device-width, initial-scale=1"><title>{html.escape(title)}</title>'
            f'<link rel="stylesheet" href="{STYLESHEET}"></head>\n<body class="site-page">{_nav(None, None)}'
            f'<main>\n{main}\n</main></body></html>\n')


def _index(cards: list[Card]) -> str:
    rows = "".join(f'<tr><td><a href="{c.page}">{_inline(c.title)}</a></td><td>{_inline(c.teaches)}</td>'
                   f'<td class="site-time">{html.escape(c.run_time)}</td></tr>\n' for c in cards)
    return _page("PyTorch from the Inside", (
        "<h1>PyTorch from the Inside</h1><p>A runnable, tested notebook series that shows what PyTorch really does "
        f'inside. New here? Follow <a href="{START_PAGE}">the path from 00 to the end</a>. Every claim of the '
        f'article the series grew from, and where it is settled: <a href="{MYTHS_PAGE}">the myth index</a>.</p>'
        "<table><thead><tr><th>notebook</th><th>what it teaches</th><th>on a CPU (2 cores)</th></tr></thead>"
        f"<tbody>\n{rows}</tbody></table>"))


def _start(cards: list[Card], built: set[str] | None) -> str:
    steps = "".join(f'<li><a href="{c.page}">{_inline(c.title)}</a>: {_inline(c.teaches)}'
                    + (f' <span class="site-needs">Needs: {_inline(c.prerequisites, built)}</span>' if c.prerequisites
                       else "") + "</li>\n" for c in cards)
    return _page("Start here · PyTorch from the Inside", (
        "<h1>Start here</h1><p>The notebooks in order, each building on the ones before it (run them in "
        f"JupyterLab with <code>make lab</code>).</p><ol class=\"site-path\">\n{steps}</ol>"))


def _myths(readme: Path, built: set[str] | None) -> str:
    from nbconvert.filters.markdown_mistune import markdown2html_mistune

    return _page("The myth index · PyTorch from the Inside",
                 markdown2html_mistune(to_pages(readme.read_text(), built)))


def write_pages(cards: list[Card], out: Path, built: set[str] | None = None) -> list[Path]:
    """index.html, the start-here path, the myth index (notebooks/README.md, linked to the `built` pages) and
    site.css, under `out`."""
    shutil.copy2(Path(__file__).with_name(STYLESHEET), out / STYLESHEET)
    series = [c for c in cards if c.teaches]            # the series' own notebooks, not stand-alone ones
    return [write_atomic(out / "index.html", _index(cards).encode()),
            write_atomic(out / START_PAGE, _start(series, built).encode()),
            write_atomic(out / MYTHS_PAGE, _myths(REPO / "notebooks" / "README.md", built).encode())]
