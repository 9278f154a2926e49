"""The rot sentinel (nbhelpers._claims): cells compared as strict nbval would, rows judged by their section."""
import nbformat

from nbhelpers import _claims
from nbhelpers._notebook_tools import sanitize_rules


def _cell(source, outputs, tags=()):
    cell = nbformat.v4.new_code_cell(source)
    cell.outputs = [nbformat.from_dict(o) for o in outputs]
    cell.metadata["tags"] = list(tags)
    return cell


def _stream(text):
    return {"output_type": "stream", "name": "stdout", "text": text}


def _error(name, value="boom"):
    return {"output_type": "error", "ename": name, "evalue": value, "traceback": []}


def test_same_output_through_the_sanitize_rules_is_same():
    stored = _cell("print(p)", [_stream("saved to /tmp/tmpab12/x.pt\n")])
    ran = _cell("print(p)", [_stream("saved to /tmp/tmpzz99/x.pt\n")])
    assert _claims._compare(stored, ran, sanitize_rules()) == ("same", "")


def test_a_different_line_is_reported_with_both_sides():
    status, detail = _claims._compare(_cell("x", [_stream("1 graph\n")]), _cell("x", [_stream("2 graphs\n")]),
                                      sanitize_rules())
    assert status == "differs" and "1 graph'" in detail and "2 graphs'" in detail


def test_an_assertion_failure_is_a_failure_and_a_name_error_a_cascade():
    rules = sanitize_rules()
    assert _claims._compare(_cell("a", []), _cell("a", [_error("AssertionError")]), rules)[0] == "failed"
    assert _claims._compare(_cell("a", []), _cell("a", [_error("NameError")]), rules)[0] == "cascade"
    expected = _cell("# Expected: ValueError", [_error("ValueError")], tags=["raises-exception"])
    assert _claims._compare(expected, expected, rules) == ("same", "")


def test_ignored_output_counts_as_same():
    stored = _cell("# NBVAL_IGNORE_OUTPUT\nprint(time)", [_stream("1.0 s\n")])
    assert _claims._compare(stored, _cell(stored.source, [_stream("2.0 s\n")]), sanitize_rules())[0] == "same"


def test_rows_are_held_changed_or_could_not_run():
    run = _claims.NotebookRun("05_x.ipynb", started=True, cells=[
        _claims.CellResult(0, "", "same"),
        _claims.CellResult(1, "4. Graph breaks", "same"),
        _claims.CellResult(2, "5. Dynamic shapes", "differs", "stored '3', got '4'"),
        _claims.CellResult(3, "6. Caches", "cascade", "NameError: x")])
    rows = [{"section": "1", "claim": c, "verdict": "false", "where": w, "heading": h} for c, w, h in (
        ("a", "[05](05_x.ipynb)", "4. Graph breaks"), ("b", "[05](05_x.ipynb)", "5. Dynamic"),
        ("c", "[05](05_x.ipynb)", "6. Caches"), ("d", "—", "—"))]
    outcomes = [o for _, o, _ in _claims.row_outcomes(rows, {"05_x.ipynb": run})]
    assert outcomes == ["held", "held", "could not run", "could not run"]   # claims are the asserts
    report = _claims.render_report("2.13.0", {"05_x.ipynb": run}, _claims.row_outcomes(rows, {"05_x.ipynb": run}))
    assert "4 rows: 2 held, 0 changed, 2 could not run." in report and "printed otherwise" in report
