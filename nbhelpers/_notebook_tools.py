"""The series' own tooling: execute notebooks in place, and build an offline HTML site.

Not part of the learners' API (hence the underscore); `make execute` and `make html` call it
through `python -m nbhelpers`.
"""
from __future__ import annotations

import html
import os
import shutil
from pathlib import Path

from nbhelpers._atomic import write_atomic

__all__ = ["execute_notebook", "build_site"]

REPO = Path(__file__).resolve().parent.parent
_WIDGET_DIST = REPO / "node_modules" / "@jupyter-widgets" / "html-manager" / "dist"
_REQUIRE_JS = REPO / "node_modules" / "requirejs" / "require.js"


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
    NotebookClient(nb, timeout=timeout_s, kernel_name="python3",
                   resources={"metadata": {"path": str(path.parent)}},
                   store_widget_state=True, record_timing=False, allow_errors=False,
                   skip_cells_with_tag="skip-execution").execute()
    write_atomic(path, nbformat.writes(nb).encode())


def build_site(notebooks: list[Path], out: Path) -> list[Path]:
    """Render `notebooks` to HTML under `out`, loading widgets and require.js from `out`/static.

    nbconvert's defaults fetch both from public CDNs, so pages would render blank widgets offline;
    the local copies come from `npm ci` (package-lock.json pins them).
    """
    from nbconvert import HTMLExporter

    if not _WIDGET_DIST.is_dir() or not _REQUIRE_JS.is_file():
        raise FileNotFoundError(f"{_WIDGET_DIST} or {_REQUIRE_JS} is missing: run `npm ci` in "
                                f"{REPO} (make html does it), which needs Node.js and npm")
    static = out / "static"
    shutil.rmtree(static, ignore_errors=True)
    shutil.copytree(_WIDGET_DIST, static)
    shutil.copy2(_REQUIRE_JS, static / "require.js")
    exporter = HTMLExporter(template_name="lab", widget_renderer_url="static/embed-amd.js",
                            require_js_url="static/require.js", mathjax_url="")
    pages = []
    for nb_path in sorted((Path(p) for p in notebooks), key=lambda p: p.name):
        body, _ = exporter.from_filename(str(nb_path))
        pages.append(write_atomic(out / f"{nb_path.stem}.html", body.encode()))
    links = "\n".join(f'<li><a href="{p.name}">{html.escape(p.stem)}</a></li>' for p in pages)
    write_atomic(out / "index.html", f"<!doctype html><meta charset='utf-8'><title>PyTorch from the "
                 f"Inside</title><h1>PyTorch from the Inside</h1><ul>{links}</ul>\n".encode())
    return pages
