"""A diagnosis (`diagnose.run`) drawn: its summary as text, its memory timeline over its backward graph as a
widget, and the whole report as one self-contained HTML page that opens from a file with no network.

The page is a fixed shell. Its data (findings, agreements, the widgets' states) travel as JSON in a
`<script type="application/json">`, and nbhelpers/report_page.js fills the shell in with textContent, so a name from the
learner's code is never read as HTML. The widgets are graph_view's own front-end, inlined, and run with a small
stand-in for the widget model: every click works without a kernel.

Example:
    print(view.summary(d))
    view.save_html(d, "report.html")
"""
from __future__ import annotations

import json
import os
from pathlib import Path

from nbhelpers import arguments, atomic, forward_view, graph_view, memory_timeline, node_times

__all__ = ["summary", "show", "show_times", "save_html", "page", "lesson_links", "MAX_PAGE_BYTES"]

MAX_PAGE_BYTES = 1_000_000
_PACKAGE = Path(__file__).parent.parent       # nbhelpers/: the page's shell and filler live there


def summary(d, top: int = 5) -> str:
    """The top findings, each with its evidence, place, lesson, cost, fix and the consequences of its cause, then
    the agreements (what the CLI prints)."""
    arguments.require_positive("diagnosis.view.summary", "top", top)
    lines = [f"{d.model} on {', '.join(d.inputs)}: {d.step}"]
    if d.error:
        lines.append(f"the step raised {d.error}" + (f" at {d.error_where}" if d.error_where else ""))
    lines.append(f"top {min(top, len(d.findings))} of {len(d.findings)} findings:")
    for k, f in enumerate(d.findings[:top], 1):
        lines += _finding_lines(k, f)
    wrong = [a for a in d.agreements if not a.agrees]
    tools = ", ".join(sorted({a.tool for a in d.agreements}))
    if d.agreements:
        lines.append(f"{len(d.agreements) - len(wrong)} of {len(d.agreements)} numbers agree with PyTorch's own "
                     f"tools ({tools})")
        shared = [a.name for a in d.agreements if not a.independent]
        if shared:
            lines.append(f"   of them {len(shared)} are totals both sides add up from the same list, not "
                         f"measurements: {', '.join(shared)}")
    else:
        lines.append("no number could be checked against PyTorch's own tools (the step did not run)")
    lines += [f"   disagrees: {a.name}: ours {a.ours:,}, {a.tool} {a.theirs:,}" for a in wrong]
    lines += [f"   not checked: {text}" for text in d.unchecked]
    return "\n".join(lines)


def _finding_lines(k: int, f) -> list[str]:
    """One finding as text: title, evidence, place, cost, the fix (as code) and the consequences of its cause."""
    lines = [f"{k}. [{f.kind}] {f.title}", f"   {f.evidence}", f"   where: {f.where or '-'} · taught in {f.lesson}"]
    if f.cost is not None:
        lines.append(f"   cost: {f.cost}")
    fix = f.fix.splitlines()
    lines += [f"   fix: {fix[0]}"] + [f"        {more}" for more in fix[1:]] if fix else []
    if f.consequences:
        lines.append("   the same line also causes:")
        lines += [f"   - [{c.kind}] {c.title}" + (f" ({c.cost})" if c.cost is not None else "") for c in f.consequences]
    return lines


def _finding_data(f, lessons: dict[str, str]) -> dict:
    return {"kind": f.kind, "title": f.title, "evidence": f.evidence, "where": f.where, "lesson": f.lesson,
            "notebook": lessons.get(f.notebook, ""), "cost": "" if f.cost is None else str(f.cost), "fix": f.fix,
            "consequences": [_finding_data(c, lessons) for c in f.consequences]}


def _graph_data(d):
    if d.graph is not None:
        return graph_view.from_autograd(d.graph)
    return forward_view.twin(d.forward)[0] if d.forward is not None and d.forward.ops else None


def _timeline_and_graph(d) -> tuple | None:
    """(graph data, timeline state) to draw, or None when nothing ran."""
    data = _graph_data(d) if d.tracker is not None else None
    if data is None:
        return None
    timeline = memory_timeline.state(d)
    if d.graph is None:
        timeline["node"] = [-1] * len(timeline["node"])     # no backward node holds anything
    return data, timeline


def show(d):
    """The memory timeline above the step's backward graph (the forward graph when there was no backward): hover
    for the op and the learner's line, click to select the node that holds the bytes."""
    drawn = _timeline_and_graph(d)
    if drawn is None:
        raise ValueError(f"Diagnosis.show: nothing ran to draw ({d.error or 'no op was recorded'}); fix the error "
                         "the findings name and diagnose again")
    return graph_view.show(drawn[0], timeline=drawn[1])


def _timed_graph(d) -> tuple | None:
    """(graph data with each node's time, its time-line) of the backward the time lens profiled, or None."""
    if d.timed is None:
        return None
    graph, times = d.timed
    return graph_view.from_autograd(graph, times=times), node_times.timeline(graph, times)


def show_times(d):
    """The backward's time node by node: each box barred by its share, the nodes' ranges as slices above; a
    click on a slice selects its node, selecting a node outlines its slice."""
    drawn = _timed_graph(d)
    if drawn is None:
        raise ValueError("Diagnosis.show_times: no backward was timed (an inference step, or the step raised: "
                         f"{d.error or 'see unchecked'}); diagnose a training step, with a loss, to time its backward")
    return graph_view.show(drawn[0], timeline=drawn[1])


def _widget_states(d) -> list[tuple[str, dict]]:
    """(caption, traits) of each view the page shows; traits only: no widget is made (one made in a kernel
    would be stored with the notebook). Each graph is built once."""
    states = []
    drawn = _timeline_and_graph(d)
    if drawn is not None:
        states.append((f"Memory over the step, above the {'backward' if d.graph is not None else 'forward'} graph",
                       graph_view.traits(drawn[0], timeline=drawn[1])))
    timed = _timed_graph(d)
    if timed is not None:
        states.append(("The backward's time, node by node: its nodes on its clock, above its graph",
                       graph_view.traits(timed[0], timeline=timed[1])))
    if d.forward is not None and d.forward.ops:
        states.append(("The forward graph beside the backward graph it built", graph_view.twin_traits(d.forward)))
    return states


def _data(d, lessons: dict[str, str]) -> dict:
    views = _widget_states(d)
    return {"title": f"Diagnosis of {d.model}", "subtitle": f"{', '.join(d.inputs)} · {d.step}",
            "error": f"the step raised {d.error}" + (f" at {d.error_where}" if d.error_where else "") if d.error else "",
            "findings": [_finding_data(f, lessons) for f in d.findings],
            "agreements": [{"name": a.name, "ours": a.ours, "theirs": a.theirs, "tool": a.tool, "agrees": a.agrees,
                            "shared": a.shared}
                           for a in d.agreements],
            "unchecked": list(d.unchecked),
            "widgets": [state for _, state in views], "captions": [caption for caption, _ in views]}


def _script_safe(data: dict) -> str:
    """JSON that cannot end its <script> element early (`</script>`, `<!--`): "<" occurs only inside strings,
    where \\u003c reads the same."""
    return json.dumps(data).replace("<", "\\u003c")


def page(d, lessons: dict[str, str] | None = None) -> str:
    """The report as one HTML document: no request leaves it (no CDN, no font, no image).

    lessons: {notebook file: URL relative to where the page will be} for links to the lessons (none when
    absent).
    """
    shell = (_PACKAGE / "report_page.html").read_text()
    code = graph_view.esm_source() + "\n" + (_PACKAGE / "report_page.js").read_text()
    if "</script" in code.lower():
        raise AssertionError("a shipped front-end file contains </script>, which would end the page's script")
    before, rest = shell.split("@DATA@")
    middle, after = rest.split("@CODE@")          # one pass: a name in the data that reads @CODE@ stays text
    return before + _script_safe(_data(d, lessons or {})) + middle + code + after


def lesson_links(d, folder: Path, site: Path = _PACKAGE.parent / "build" / "site") -> dict[str, str]:
    """{notebook: URL relative to `folder`} for each lesson of `d`'s findings: the page `make html` built
    (a browser shows it; a .ipynb it would show as raw JSON), else the notebook of this checkout (JupyterLab
    opens it), else no link (the package installed outside a checkout)."""
    links = {}
    for f in d.findings:
        for target in (site / f"{Path(f.notebook).stem}.html", _PACKAGE.parent / "notebooks" / f.notebook):
            if target.is_file():
                links[f.notebook] = Path(os.path.relpath(target, folder.resolve())).as_posix()
                break
    return links


def save_html(d, path) -> Path:
    """Write `page(d)` to `path`, atomically; a page over MAX_PAGE_BYTES is refused with what to do."""
    target = arguments.require_writable_file("Diagnosis.save_html", "path", path)
    text = page(d, lesson_links(d, target.parent)).encode()
    if len(text) > MAX_PAGE_BYTES:
        raise ValueError(f"Diagnosis.save_html: the page would be {len(text):,} B, over {MAX_PAGE_BYTES:,}; "
                         "diagnose a smaller input (fewer ops), or save the snapshot instead (save_snapshot)")
    atomic.write_atomic(target, text)
    return target
