"""A notebook's stored widget state: which models its views need, kept across a save, pictures where it is gone.

Why a save in JupyterLab loses views (jupyterlab_widgets 3.0.17, its `saveState` setting on, as `make lab` sets
it): the widget manager marks the notebook changed whenever it registers a model, also one it restores from the
file on opening (`register_model` calls `setDirty`), so autosave writes a notebook nobody touched; and on every
save it replaces `metadata.widgets` with `get_state_sync()`, which serializes only models with a live kernel
connection (`comm_live`). Opened and saved without running, a notebook keeps its views' outputs and loses every
model they show ("Error displaying widget: model not found"); after a Run All it stores every model the kernel
still holds, the previous run's included (ipywidgets issues 3270 and 3888). `keep_displayed` mends both at the
save: what is stored is exactly the models the notebook's outputs display and the models those refer to, taken
from the live state first and from the file being replaced otherwise. `make lab`'s server applies it to every
save (`lab_contents`). `fall_back_to_pictures` serves a notebook whose state is gone anyway (saved by another
Jupyter): each view shows the picture stored beside it, with one line on how to get the live view back.
"""
from __future__ import annotations

import re

__all__ = ["STATE", "VIEW", "FALLBACK_NOTE", "displayed_models", "needed_models", "keep_displayed",
           "widgets_without_state", "fall_back_to_pictures"]

STATE = "application/vnd.jupyter.widget-state+json"
VIEW = "application/vnd.jupyter.widget-view+json"
FALLBACK_NOTE = ("(the live view was not saved with this notebook: this is its stored picture. Run the cell to "
                 "get the view back; make lab saves views with the notebook)")
_REFERENCE = re.compile(r"^IPY_MODEL_([0-9a-f]+)$")
_PICTURES = ("image/svg+xml", "image/png")


def _code_cells(nb) -> list:
    return [c for c in nb["cells"] if c["cell_type"] == "code"]


def _stored_state(nb) -> dict:
    return nb.get("metadata", {}).get("widgets", {}).get(STATE, {}).get("state", {})


def displayed_models(nb) -> list[tuple[int, str]]:
    """(code cell index, model id) of every widget view in `nb`'s outputs, in order."""
    return [(i, out["data"][VIEW]["model_id"]) for i, cell in enumerate(_code_cells(nb))
            for out in cell.get("outputs", []) if VIEW in out.get("data", {})]


def _referenced(value) -> set[str]:
    """Model ids a model's state refers to: `IPY_MODEL_<id>` values (children, layout, style) and the views
    an Output widget captured (`model_id` keys)."""
    if isinstance(value, str):
        found = _REFERENCE.match(value)
        return {found.group(1)} if found else set()
    if isinstance(value, dict):
        own = {value["model_id"]} if isinstance(value.get("model_id"), str) else set()
        return own.union(*(_referenced(v) for v in value.values()))
    if isinstance(value, list):
        return set().union(*(_referenced(v) for v in value))
    return set()


def needed_models(state: dict, roots) -> set[str]:
    """The models of `state` that `roots` need: the roots and, transitively, every model they refer to."""
    needed, todo = set(), [r for r in roots if r in state]
    while todo:
        model = todo.pop()
        if model not in needed:
            needed.add(model)
            todo.extend(r for r in _referenced(state[model].get("state", {})) if r in state)
    return needed


def keep_displayed(nb, replaced=None) -> dict[str, int]:
    """Store in `nb` (a notebook dict, changed in place) the models its views need and nothing else.

    A model comes from `nb`'s own state (what the live kernel holds) or, failing that, from `replaced`, the
    notebook this save overwrites. Returns counts: the models stored, those taken from `replaced`, and those
    dropped (no output shows them).
    """
    live, before = _stored_state(nb), _stored_state(replaced or {})
    pool = {**before, **live}
    needed = needed_models(pool, [model for _, model in displayed_models(nb)])
    if not needed and "widgets" not in nb.get("metadata", {}):
        return {"stored": 0, "restored": 0, "dropped": 0}
    widgets = nb.setdefault("metadata", {}).setdefault("widgets", {})
    section = widgets.setdefault(STATE, {"version_major": 2, "version_minor": 0})
    section["state"] = {model: pool[model] for model in sorted(needed)}
    return {"stored": len(needed), "restored": len(needed - set(live)), "dropped": len(set(live) - needed)}


def widgets_without_state(nb) -> list[tuple[int, str]]:
    """(code cell index, model id) of every widget view in `nb`'s outputs whose model the notebook's
    stored widget state lacks. JupyterLab and a static page cannot draw those views."""
    stored = _stored_state(nb)
    return [(i, model) for i, model in displayed_models(nb) if model not in stored]


def _is_note(output) -> bool:
    return output.get("metadata", {}).get("nbhelpers") == "fallback-note"


def _note() -> dict:
    return {"output_type": "display_data", "data": {"text/plain": FALLBACK_NOTE},
            "metadata": {"nbhelpers": "fallback-note"}}


def fall_back_to_pictures(nb) -> list[tuple[int, str]]:
    """Make each widget view of `nb` whose state is gone show its stored picture instead (in place).

    The view's widget entry is removed from its output, so every front-end draws the next richest entry (the
    SVG the series stores beside each view), and a line after it says how to get the live view back.
    Returns (code cell index, model id) of the views that fell back. Applying it twice changes nothing more.
    """
    missing = widgets_without_state(nb)
    gone = {model for _, model in missing}
    for cell in _code_cells(nb):
        outputs = []
        for k, out in enumerate(cell.get("outputs", [])):
            outputs.append(out)
            view = out.get("data", {}).get(VIEW)
            if view is None or view["model_id"] not in gone:
                continue
            if any(p in out["data"] for p in _PICTURES):
                del out["data"][VIEW]
            following = cell["outputs"][k + 1:k + 2]
            if not (following and _is_note(following[0])):
                outputs.append(_note())
        cell["outputs"] = outputs
    return missing
