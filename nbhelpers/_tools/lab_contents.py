"""`make lab`'s contents manager: a notebook opened and saved keeps its views.

JupyterLab's widget manager saves only the widget models with a live kernel connection, and marks a notebook
changed as soon as it restores a stored view, so autosave used to erase the views of every notebook a learner
merely opened (widget_state's docstring says why in full). This manager, the server's default
(`AsyncLargeFileManager`) plus two steps, mends that where the file is written and read:
- every notebook save stores exactly the models the notebook's outputs display (`widget_state.keep_displayed`):
  the live ones from JupyterLab, the others from the file being replaced, none that no output shows;
- a notebook whose views have no state left (saved by another Jupyter) opens with their stored pictures
  (`widget_state.fall_back_to_pictures`) instead of "Error displaying widget: model not found".
A save also drops the empty outputs that ended progress lines leave (`progress.empty_outputs_dropped`).
"""
from __future__ import annotations

import json
import os

from jupyter_server.services.contents.largefilemanager import AsyncLargeFileManager

from nbhelpers import progress
from nbhelpers._tools import widget_state

__all__ = ["ViewKeepingContentsManager", "keep_displayed_widget_state"]


def keep_displayed_widget_state(model: dict, path: str, contents_manager, **kwargs) -> None:
    """A jupyter_server pre-save hook: store what the saved notebook's views need (see the module docstring)."""
    if model.get("type") != "notebook" or not isinstance(model.get("content"), dict):
        return
    os_path = contents_manager._get_os_path(path)
    replaced = None
    if os.path.isfile(os_path):
        with open(os_path, encoding="utf-8") as f:
            replaced = json.load(f)
    progress.empty_outputs_dropped(model["content"])
    counts = widget_state.keep_displayed(model["content"], replaced)
    contents_manager.log.info("%s: widget state of its views: %s", path, counts)


class ViewKeepingContentsManager(AsyncLargeFileManager):
    """The server's default contents manager, whose notebooks keep their views across a save."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.register_pre_save_hook(keep_displayed_widget_state)

    async def get(self, path, content=True, type=None, format=None, require_hash=False):
        model = await super().get(path, content=content, type=type, format=format, require_hash=require_hash)
        if model["type"] == "notebook" and model.get("content") is not None:
            fell_back = widget_state.fall_back_to_pictures(model["content"])
            if fell_back:
                self.log.info("%s: %d view(s) without widget state shown as their pictures", path, len(fell_back))
        return model
