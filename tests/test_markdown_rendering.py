"""Every markdown cell renders as it was written: no table cut into rows of literal pipes, no sentence cut into
two paragraphs, no link that goes nowhere (tests/markdown_rules.py), and the renderer the rules use builds the
same blocks as JupyterLab's own `marked`."""
import html.parser
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from tests import REPO, markdown_rules, notebook_rules

NOTEBOOKS = sorted((REPO / "notebooks").glob("*.ipynb"))
ANCHORS = markdown_rules.notebook_anchors(NOTEBOOKS)
COMPILE_NB = REPO / "notebooks" / "05_compile_backends.ipynb"

# 05 c6 as it stood before issue 39: a blank line after the first row ends the table, and the two rows after it
# render as a paragraph of pipes.
OLD_BACKEND_TABLE = """## 2. Three backends side by side

Each backend adds one stage, which is what makes them useful for bisecting a problem:

| backend | Dynamo captures a graph | AOTAutograd traces the backward | code generated |
|---|---|---|---|
| `eager` | yes | no | no: the graph's torch calls run as in eager, through the usual dispatcher |

| `aot_eager` | yes | yes (also functionalises in-place ops) | no |
| `inductor` (default) | yes | yes | C++/OpenMP (CPU) or Triton (GPU) |

`compilation.compare_backends` resets Dynamo, compiles the function with each backend, times the first call
(compile + run) and then the steady state with `torch.utils.benchmark`, and counts graphs and graph breaks.
First the sandwich model's forward pass, for inference:"""


def _read(path):
    return nbformat.read(path, as_version=4)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_every_markdown_cell_renders_as_written(path):
    assert markdown_rules.rendering_problems(_read(path), path, ANCHORS) == []


def test_the_rules_fail_on_05s_old_backend_table():
    nb = _read(COMPILE_NB)
    cell = next(i for i, c in enumerate(nb.cells) if c.source.startswith("## 2. Three backends side by side"))
    here = [p for p in markdown_rules.rendering_problems(nb, COMPILE_NB, ANCHORS) if p.startswith(f"markdown cell {cell}:")]
    assert here == []
    nb.cells[cell].source = OLD_BACKEND_TABLE
    problems = markdown_rules.rendering_problems(nb, COMPILE_NB, ANCHORS)
    cut = [p for p in problems if p.startswith(f"markdown cell {cell}: a table row renders as text")]
    assert len(cut) == 2 and "`aot_eager`" in cut[0] and "`inductor` (default)" in cut[1], problems


def test_a_blank_line_ends_a_table_and_its_next_rows_render_as_text():
    """Known inputs and the HTML the rules' renderer makes of them: in GFM a table ends at the first blank line
    (the next test shows marked's own output for the same input)."""
    assert markdown_rules.render("| a | b |\n|---|---|\n| 1 | 2 |\n| 3 | 4 |\n") == (
        "<table>\n<thead>\n<tr>\n<th>a</th>\n<th>b</th>\n</tr>\n</thead>\n<tbody>\n<tr>\n<td>1</td>\n<td>2</td>\n"
        "</tr>\n<tr>\n<td>3</td>\n<td>4</td>\n</tr>\n</tbody>\n</table>\n")
    assert markdown_rules.render("| a | b |\n|---|---|\n| 1 | 2 |\n\n| 3 | 4 |\n") == (
        "<table>\n<thead>\n<tr>\n<th>a</th>\n<th>b</th>\n</tr>\n</thead>\n<tbody>\n<tr>\n<td>1</td>\n<td>2</td>\n"
        "</tr>\n</tbody>\n</table>\n<p>| 3 | 4 |</p>\n")
    assert markdown_rules.table_rows_as_text("| a | b |\n|---|---|\n| 1 | 2 |\n\n| 3 | 4 |\n") != []
    assert markdown_rules.table_rows_as_text("| a | b |\n|---|---|\n| 1 | 2 |\n| 3 | 4 |\n") == []


@pytest.mark.parametrize("text", [
    "Paragraph one ends with\n\nthe rest of its sentence.",                       # the issue's case
    "It returns a tensor, a `torch.Size`\n\nand a dtype.",
    "> **Fact:** `nn.Embedding` draws\n\n> N(0, 1), as its source says.",          # a blank line inside a `>` box
    "- Workers hold their own seeds (NumPy: a state derived from both),\n\n  reproducible through the generator.",
])
def test_a_sentence_cut_into_two_paragraphs_is_caught(text):
    assert len(markdown_rules.cut_sentences(text)) == 1


@pytest.mark.parametrize("text", [
    "One sentence.\n\nAnother one.",
    "**What you will learn**\n\n- a claim;\n- another claim.",                    # a label, then a list
    "**Myth**\n\nA paragraph.",                                                     # a label alone
    "It prints:\n\n```\n1\n```\n\nthen more text",                                 # code between
    "- an item that ends without a stop\n- the next item.",                       # list items
    "Measured\n\n## 2. Next section\n\nmore text.",                                # a heading between
    "Does it? Yes!\n\n> **Fact (article §2):** the text.",
])
def test_what_is_not_a_cut_sentence_passes(text):
    assert markdown_rules.cut_sentences(text) == []


def test_a_link_that_goes_nowhere_is_caught_and_a_good_one_passes():
    here = COMPILE_NB
    good = ("[section 2](#2.-Three-backends-side-by-side), [its summary](08_memory_diagnosis.ipynb#Summary), "
            "[the myth index](README.md), [torch](https://pytorch.org/docs)")
    assert markdown_rules.unresolved_links(good, here, ANCHORS) == []
    assert markdown_rules.unresolved_links("[a](#No-such-section)", here, ANCHORS) == [
        "[...](#No-such-section): 05_compile_backends.ipynb has no heading whose anchor is #No-such-section"]
    assert len(markdown_rules.unresolved_links("[a](08_memory_diagnosis.ipynb#summary)", here, ANCHORS)) == 1
    assert len(markdown_rules.unresolved_links("[a](../no_such_file.md)", here, ANCHORS)) == 1


def test_a_link_to_a_notebook_not_in_the_series_is_caught_once_with_or_without_a_fragment():
    names = set(ANCHORS)
    for target in ("08_no_such.ipynb", "08_no_such.ipynb#Summary"):
        text = f"[notebook 08]({target})"
        assert len(notebook_rules.unlinked_references(text, names)) == 1, target       # the notebook rule reports it
        assert markdown_rules.unresolved_links(text, COMPILE_NB, ANCHORS) == [], target    # and only it


# JupyterLab 4 renders markdown with the `marked` its markedparser-extension imports (a shared module with a
# fallback chunk in the lab's static bundle), with gfm on. Node runs that very copy.
_STATIC = Path(sys.prefix) / "share" / "jupyter" / "lab" / "static"
_PARSER_IMPORT = re.compile(r"\{marked:\w+,Renderer:\w+\},\w+\]=await Promise\.all\(\[\w+\.e\(\d+\)\.then\(\w+\.t\.bind"
                            r"\(\w+,(\d+),")
DRIVER = """
globalThis.self = globalThis;
const [chunk, moduleId] = process.argv.slice(1);
require(chunk);
const table = self.rspackChunk_jupyterlab_application_top.find((c) => moduleId in c[1])[1];
const module = { exports: {} };
const req = {
  r: (e) => Object.defineProperty(e, "__esModule", { value: true }),
  d: (e, getters) => { for (const k in getters) Object.defineProperty(e, k, { enumerable: true, get: getters[k] }); },
};
table[moduleId](module, module.exports, req);
const marked = new module.exports.Marked({ gfm: true });
const sources = JSON.parse(require("fs").readFileSync(0, "utf8"));
process.stdout.write(JSON.stringify(sources.map((s) => marked.parse(s, { async: false }))));
"""


def _jupyterlab_marked() -> tuple[str, str]:
    """(chunk file, module id) of the `marked` JupyterLab's markdown parser loads, found in the lab's bundle."""
    core = next(_STATIC.glob("jlab_core.*.js"), None)
    main = next(_STATIC.glob("main.*.js"), None)
    if core is None or main is None or not (m := _PARSER_IMPORT.search(core.read_text())):
        pytest.fail(f"JupyterLab's static bundle in {_STATIC} has no markdown parser importing marked")
    share = re.search(rf"{m.group(1)}:\{{shareScope:\"default\",shareKey:\"marked\".*?fallback:\(\)=>__webpack_"
                      r"require__\.e\((\d+)\)\.then\(\(\)=>\(\)=>__webpack_require__\((\d+)\)\)", main.read_text())
    assert share, "the lab's bundle no longer says where its marked lives"
    return str(next(_STATIC.glob(f"{share.group(1)}.*.js"))), share.group(2)


class _Blocks(html.parser.HTMLParser):
    """The block elements of rendered HTML, each with its text (whitespace collapsed), in document order."""

    BLOCKS = {"p", "h1", "h2", "h3", "h4", "h5", "h6", "table", "tr", "th", "td", "ul", "ol", "li", "pre",
              "blockquote", "hr"}

    def __init__(self):
        super().__init__()
        self.open, self.found = [], []

    def handle_starttag(self, tag, attrs):
        if tag in self.BLOCKS:
            self.found.append([tag, len(self.open), ""])
            self.open.append(len(self.found) - 1)

    def handle_endtag(self, tag):
        if tag in self.BLOCKS and self.open:
            self.open.pop()

    def handle_data(self, data):
        for i in self.open:
            self.found[i][2] += data

    @classmethod
    def of(cls, rendered: str) -> list[tuple[str, int, str]]:
        parser = cls()
        parser.feed(rendered)
        return [(tag, depth, " ".join(text.split())) for tag, depth, text in parser.found]


def test_markdown_it_builds_the_blocks_jupyterlabs_marked_builds_on_every_markdown_cell():
    """Same block elements, nested alike, with the same text, for every markdown cell of the series and for the
    constructs the rules are about (a table, a blank line ending it, a cut paragraph, a cut `>` box)."""
    node = shutil.which("node")
    if node is None:
        if os.environ.get("REQUIRE_SITE") == "1":                    # CI installs Node.js for the site
            pytest.fail("REQUIRE_SITE=1 but Node.js is missing: install it (apt-get install nodejs)")
        pytest.skip("no Node.js: install it to compare markdown-it with JupyterLab's marked")
    chunk, module_id = _jupyterlab_marked()
    sources = [c.source for p in NOTEBOOKS for c in _read(p).cells if c.cell_type == "markdown"]
    sources += [OLD_BACKEND_TABLE, "| a | b |\n|---|---|\n| 1 | 2 |\n\n| 3 | 4 |\n",
                "> one\n\n> two\n", "- item (a),\n\n  rest.\n"]
    done = subprocess.run([node, "-e", DRIVER, chunk, module_id], input=json.dumps(sources), capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    by_marked = json.loads(done.stdout)
    assert len(by_marked) == len(sources)
    differ = [(s[:60], _Blocks.of(m), _Blocks.of(markdown_rules.render(s))) for s, m in zip(sources, by_marked)
              if _Blocks.of(m) != _Blocks.of(markdown_rules.render(s))]
    assert differ == []
    assert by_marked[-3] == ("<table>\n<thead>\n<tr>\n<th>a</th>\n<th>b</th>\n</tr>\n</thead>\n<tbody><tr>\n"
                             "<td>1</td>\n<td>2</td>\n</tr>\n</tbody></table>\n<p>| 3 | 4 |</p>\n")
    assert ("p", 0, "| aot_eager | yes | yes (also functionalises in-place ops) | no | | inductor (default) "
            "| yes | yes | C++/OpenMP (CPU) or Triton (GPU) |") in _Blocks.of(by_marked[-4])   # marked agrees
