"""The series' own tooling: execute notebooks in place, and build an offline HTML site.

Not part of the learners' API (hence the underscore); `make execute` and `make html` call it
through `python -m nbhelpers`.
"""
from __future__ import annotations

import configparser
import os
import re
import shutil
from pathlib import Path

from nbhelpers import progress
from nbhelpers._tools import site_pages, widget_state
from nbhelpers.atomic import write_atomic

__all__ = ["execute_notebook", "INTERPRETER_NOTICES", "quiet_interpreter_notices", "sanitize_rules",
           "sanitize_outputs", "views_without_state", "build_site"]

REPO = Path(__file__).resolve().parents[2]
_WIDGET_DIST = REPO / "node_modules" / "@jupyter-widgets" / "html-manager" / "dist"
_REQUIRE_JS = REPO / "node_modules" / "requirejs" / "require.js"
_SANITIZE_CFG = REPO / "tests" / "nbval_sanitize.cfg"


# Notices about the interpreter, not the lesson, that kernels started for the series' tooling ignore so that
# stored outputs hold on every supported Python. Python 3.13.0 only: Dynamo warns at a first guard that
# "Guards may run slower on Python 3.13.0" (torch/_dynamo/guards.py, config.issue_3_13_0_warning, which
# torch's own test suite turns off too). Each entry is a PYTHONWARNINGS filter.
INTERPRETER_NOTICES = ("ignore:Guards may run slower on Python 3.13.0:RuntimeWarning",)


def quiet_interpreter_notices(environ: dict) -> None:
    """Add INTERPRETER_NOTICES to PYTHONWARNINGS in `environ` (os.environ: for the kernels started after)."""
    filters = [f for f in environ.get("PYTHONWARNINGS", "").split(",") if f]
    environ["PYTHONWARNINGS"] = ",".join(dict.fromkeys([*filters, *INTERPRETER_NOTICES]))


def execute_notebook(path: str | os.PathLike, timeout_s: int = 600) -> None:
    """Run every cell of `path` in a fresh kernel and store the outputs back, atomically.

    Cell timings are not recorded (they would churn every diff); widget state is stored so that
    GitHub and `make html` show the widgets. A failing cell raises nbclient's CellExecutionError and
    leaves the file untouched; cells tagged raises-exception are allowed to fail.
    """
    import nbformat
    from nbclient import NotebookClient

    path = Path(path).resolve()
    nb = nbformat.read(path, as_version=4)
    os.environ.pop("MPLBACKEND", None)  # kernels inherit it; 'agg' would drop every plot
    quiet_interpreter_notices(os.environ)
    # nbclient writes widget state only when the run made a widget: a notebook that no longer makes one would keep
    # the state of an earlier run's widgets, which no output shows
    nb.metadata.pop("widgets", None)
    NotebookClient(nb, timeout=timeout_s, kernel_name="python3",
                   resources={"metadata": {"path": str(path.parent)}},
                   store_widget_state=True, record_timing=False, allow_errors=False,
                   skip_cells_with_tag="skip-execution").execute()
    sanitize_outputs(nb)
    write_atomic(path, (nbformat.writes(nb) + "\n").encode())    # as nbformat.write and JupyterLab end it


def sanitize_rules(stored: bool = False) -> list[tuple[re.Pattern, str]]:
    """The (regex, replacement) pairs of nbval's sanitize file, in file order.

    stored=True leaves out the rules marked `stored: no` (kept in what a reader sees).
    """
    parser = configparser.ConfigParser(interpolation=None)
    parser.read(_SANITIZE_CFG)
    return [(re.compile(parser[s]["regex"]), parser[s]["replace"]) for s in parser.sections()
            if not (stored and parser[s].get("stored") == "no")]


def apply_rules(text: str, rules: list[tuple[re.Pattern, str]]) -> str:
    for pattern, replacement in rules:
        text = pattern.sub(replacement, text)
    return text


def sanitize_outputs(nb) -> None:
    """Apply the sanitize file to `nb`'s stored outputs, in place.

    strict nbval sanitizes both sides before comparing, so this changes no verdict; it keeps
    temporary paths, kernel pids and addresses of this run out of what a reader sees. The empty outputs
    that ended progress lines leave are dropped (nbval compares nothing of them either).
    """
    progress.empty_outputs_dropped(nb)
    rules = sanitize_rules(stored=True)

    def clean(text: str) -> str:
        return apply_rules(text, rules)

    for cell in nb.cells:
        for out in cell.get("outputs", []):
            if "text" in out:
                out["text"] = clean(out["text"])
            if "evalue" in out:
                out["evalue"] = clean(out["evalue"])
                out["traceback"] = [clean(line) for line in out["traceback"]]
            if isinstance(out.get("data", {}).get("text/plain"), str):
                out["data"]["text/plain"] = clean(out["data"]["text/plain"])


def views_without_state(notebooks: list[Path]) -> dict[Path, list[int]]:
    """The code cells of each notebook that show widget views whose state the notebook did not store: a
    page built from it shows their stored pictures instead (widget_state.fall_back_to_pictures)."""
    import nbformat

    found = {Path(p): sorted({i for i, _ in widget_state.widgets_without_state(nbformat.read(p, as_version=4))})
             for p in notebooks}
    return {path: cells for path, cells in found.items() if cells}


def _anywidget_amd() -> Path:
    import anywidget

    return Path(anywidget.__file__).parent / "nbextension" / "index.js"


def build_site(notebooks: list[Path], out: Path) -> list[Path]:
    """Render `notebooks` to HTML under `out`, loading widgets and require.js from `out`/static.

    nbconvert's defaults fetch both from public CDNs, so pages would render blank widgets offline;
    the local copies come from `npm ci` (package-lock.json pins them). A view whose widget state the notebook
    did not store shows its stored picture (views_without_state names them).
    """
    import nbformat
    from nbconvert import HTMLExporter

    if not _WIDGET_DIST.is_dir() or not _REQUIRE_JS.is_file():
        raise FileNotFoundError(f"{_WIDGET_DIST} or {_REQUIRE_JS} is missing: run `npm ci` in "
                                f"{REPO} (make html does it), which needs Node.js and npm")
    static = out / "static"
    shutil.rmtree(static, ignore_errors=True)
    static.mkdir(parents=True)
    # Only what the pages load: the AMD renderer (embed.js, its 6 MB source map, libembed-amd.js and the icon
    # fonts no view uses are left in node_modules; tests/test_site.py records every request the pages make).
    shutil.copy2(_WIDGET_DIST / "embed-amd.js", static / "embed-amd.js")
    shutil.copy2(_REQUIRE_JS, static / "require.js")
    # The renderer asks require.js for anywidget.js beside the page, and falls back to a public CDN when
    # it is missing; anywidget's wheel ships that AMD build (the views' own modules travel in the state).
    shutil.copy2(_anywidget_amd(), out / "anywidget.js")
    exporter = HTMLExporter(template_name="lab", widget_renderer_url="static/embed-amd.js",
                            require_js_url="static/require.js", mathjax_url="")
    ordered = sorted((Path(p) for p in notebooks), key=lambda p: p.name)
    times = site_pages.run_times()
    cards = [site_pages.read_card(nbformat.read(p, as_version=4), p.stem, times) for p in ordered]
    # the pages this build writes and those an earlier one left in `out` (make html NB=... builds some)
    built = {p.stem for p in ordered} | {p.stem for p in out.glob("[0-9][0-9]_*.html")}
    pages = [write_atomic(out / f"{p.stem}.html", site_pages.render_notebook(exporter, p, cards, built).encode())
             for p in ordered]
    site_pages.write_pages(cards, out, built)
    return pages
