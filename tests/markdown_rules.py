"""Markdown cells as a reader sees them: rendered, then checked for what renders other than as written.

JupyterLab renders markdown with `marked` (GFM: CommonMark plus tables). markdown-it-py's CommonMark with its
table rule builds the same blocks on the series' markdown (tests/test_markdown_rendering.py compares the two
on every markdown cell when Node.js and JupyterLab's own copy of `marked` are here). Each rule returns
problems as text.
"""
from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import unquote

from markdown_it import MarkdownIt

from tests.notebook_rules import NAME

_MD = MarkdownIt("commonmark").enable("table")
TABLE_ROW = re.compile(r"^\s*\|.*\|\s*$")
# A sentence ends with . : ! ? (then perhaps closing marks: `(see below.)`, `"done."`, `**Fact:**`).
SENTENCE_END = re.compile(r"[.:!?][)\]\"'*_`]*$")
SCHEME = re.compile(r"^[a-z][a-z0-9+.-]*:", re.I)


def tokens(markdown: str) -> list:
    """markdown-it's block tokens for `markdown`, as JupyterLab's renderer would build the blocks."""
    return _MD.parse(markdown)


def render(markdown: str) -> str:
    """The HTML markdown-it makes of `markdown`."""
    return _MD.render(markdown)


def _paragraphs(toks) -> list[tuple[int, str]]:
    """(token index, text) of each paragraph, in order, list items' included."""
    return [(k, toks[k + 1].content) for k, t in enumerate(toks) if t.type == "paragraph_open"]


def table_rows_as_text(markdown: str) -> list[str]:
    """Lines that look like table rows (`| a | b |`) but render as a paragraph's text: a table that a blank
    line (or anything else) cut, whose rows after the cut show as literal pipes."""
    return [f"a table row renders as text (a blank line ends a table): {line.strip()[:70]!r}"
            for _, text in _paragraphs(tokens(markdown)) for line in text.splitlines() if TABLE_ROW.match(line)]


def _is_label(toks, k: int) -> bool:
    """A paragraph that is all one bold or italic span, or an image: a label, not a sentence."""
    children = [c for c in toks[k + 1].children or [] if not (c.type == "text" and not c.content.strip())]
    return (len(children) == 1 and children[0].type == "image") or (
        len(children) >= 2 and children[0].type in ("strong_open", "em_open")
        and children[-1].type == children[0].type.replace("_open", "_close"))


def cut_sentences(markdown: str) -> list[str]:
    """Paragraphs that begin mid-sentence: a paragraph (not a label) that ends without . : ! ? and is
    followed by another paragraph in the same block (a list item's second paragraph: a blank line in the item),
    or with nothing between them but a blockquote's end and start (a blank line inside a `>` box ends the box).
    A list item's end, a list, a table, code or a heading between the two breaks the chain."""
    toks, problems = tokens(markdown), []
    paragraphs = _paragraphs(toks)
    for (k, text), (j, after) in zip(paragraphs, paragraphs[1:]):
        between = {t.type for t in toks[k + 3:j]}
        if _is_label(toks, k) or SENTENCE_END.search(text.rstrip()) or TABLE_ROW.match(
                text.splitlines()[-1]) or not between <= {"blockquote_open", "blockquote_close"}:
            continue
        problems.append(f"a paragraph begins mid-sentence: {text.rstrip()[-40:]!r} | {after[:40]!r}")
    return problems


def anchors(markdown: str) -> set[str]:
    """The ids JupyterLab gives the headings of `markdown`: the heading's text, spaces made '-'
    (@jupyterlab/rendermime's createHeaderId; nbconvert's pages use the same)."""
    toks = tokens(markdown)
    return {"".join(c.content for c in toks[k + 1].children or [] if c.type in ("text", "code_inline"))
            .replace(" ", "-") for k, t in enumerate(toks) if t.type == "heading_open"}


def _links(toks) -> list[str]:
    hrefs = []
    for t in toks:
        for child in t.children or []:
            if child.type == "link_open":
                hrefs.append(child.attrGet("href") or "")
    return hrefs


def unresolved_links(markdown: str, here: Path, notebook_anchors: dict[str, set[str]]) -> list[str]:
    """Relative links in `markdown` (a cell of the notebook `here`) that go nowhere: a file that does not
    exist next to `here`, or a `#fragment` that is no heading of its notebook (`notebook_anchors`: notebook
    file name -> anchors). A link to a notebook file that is not in the series is notebook_rules'
    unlinked_references' to report."""
    problems = []
    for href in _links(tokens(markdown)):
        if SCHEME.match(href) or href.startswith("//"):
            continue
        path, _, fragment = unquote(href).partition("#")
        target = path or here.name
        if NAME.match(target) and target not in notebook_anchors:
            continue                                      # unlinked_references names it
        if not (here.parent / target).exists():
            problems.append(f"[...]({href}): no file {target} next to {here.name}")
        elif fragment and fragment not in notebook_anchors.get(target, {fragment}):
            problems.append(f"[...]({href}): {target} has no heading whose anchor is #{fragment}")
    return problems


def notebook_anchors(paths) -> dict[str, set[str]]:
    """notebook file name -> the anchors of all its headings."""
    import nbformat

    return {p.name: set().union(*(anchors(c.source) for c in nbformat.read(p, as_version=4).cells
                                  if c.cell_type == "markdown")) for p in paths}


def rendering_problems(nb, here: Path, all_anchors: dict[str, set[str]]) -> list[str]:
    """Every rule above, on every markdown cell of the notebook `nb` stored at `here`."""
    return [f"markdown cell {i}: {p}" for i, cell in enumerate(nb.cells) if cell.cell_type == "markdown"
            for p in (table_rows_as_text(cell.source) + cut_sentences(cell.source)
                      + unresolved_links(cell.source, here, all_anchors))]
