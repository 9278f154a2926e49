"""What make lab's save stores: the models the outputs show, from the live state or the file it replaces."""
import json

from nbhelpers._tools import widget_state
from tests import REPO

GRAPH_NB = REPO / "notebooks" / "02_autograd_graph.ipynb"


def _committed() -> dict:
    return json.loads(GRAPH_NB.read_text())


def _state(nb) -> dict:
    return nb["metadata"]["widgets"][widget_state.STATE]["state"]


def test_a_save_with_no_live_model_keeps_every_stored_one():
    saved, replaced = _committed(), _committed()
    _state(saved).clear()                                  # what JupyterLab sends for a notebook only opened
    counts = widget_state.keep_displayed(saved, replaced)
    assert _state(saved) == _state(replaced) and counts == {"stored": 14, "restored": 14, "dropped": 0}


def test_a_save_after_runs_drops_every_model_no_output_shows():
    saved = _committed()
    orphan = {"model_name": "LayoutModel", "state": {}}
    _state(saved)["dead0"] = {"model_name": "AnyModel", "state": {"layout": "IPY_MODEL_dead1"}}
    _state(saved)["dead1"] = orphan
    counts = widget_state.keep_displayed(saved, None)
    assert set(_state(saved)) == set(_state(_committed())) and counts["dropped"] == 2


def test_a_view_keeps_the_models_it_refers_to():
    state = _state(_committed())
    shown = [model for _, model in widget_state.displayed_models(_committed())]
    needed = widget_state.needed_models(state, shown)
    assert set(shown) < needed == set(state)               # each view's layout model too


def test_make_execute_keeps_no_state_of_widgets_the_run_did_not_make(tmp_path, monkeypatch):
    """A notebook whose cells stopped making a widget (03's training once showed a tqdm bar) stores none."""
    import nbformat
    from nbformat.v4 import new_code_cell, new_notebook

    from nbhelpers._tools import notebook_tools

    monkeypatch.setenv("PYTHONPATH", str(REPO))
    nb = new_notebook(cells=[new_code_cell("1 + 1")])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.metadata["widgets"] = {widget_state.STATE: {"state": {"stale": {"model_name": "HBoxModel", "state": {}}},
                                                   "version_major": 2, "version_minor": 0}}
    path = tmp_path / "stale.ipynb"
    nbformat.write(nb, path)
    notebook_tools.execute_notebook(path)
    assert "widgets" not in nbformat.read(path, as_version=4).metadata
