"""One line that says what a long cell is doing while it runs, and leaves nothing behind when it ends.

In a Jupyter kernel, `line` opens an empty output with a display id (IPython's `display(display_id=True)`),
rewrites it in place with `update_display_data` messages while the block runs, and empties it again when the
block ends, however it ends. What each reader keeps of that output, and why it is nothing:
- JupyterLab and nbclient (`make execute`) apply an update to the output that carries its display id, so
  what is left is an output with an empty bundle: nothing is drawn, and `make execute` and `make lab`'s
  contents manager drop it before writing (`empty_outputs_dropped`).
- nbval skips `update_display_data` and compares each output's mime keys only: an empty bundle has none.
Outside a kernel (plain Python, pytest, a terminal IPython) `line` shows nothing and prints nothing.

`run` is `subprocess.run` for a long child process, with such a line while it waits.

Example:
    with progress.line("fit") as shown:
        for epoch in range(1, epochs + 1):
            shown.update(f"epoch {epoch}/{epochs}")
"""
from __future__ import annotations

import subprocess
import time
from contextlib import contextmanager
from typing import Iterator

# in_kernel and empty_outputs_dropped serve this package's own tools (make execute, the lab's save hook), not
# a notebook: module attributes, outside __all__.
__all__ = ["Line", "line", "run"]

MIN_INTERVAL_S = 0.5   # a redraw of the line at most this often: each is a message to every front end


class Line:
    """The live line of a `line` block: `update(text)` shows "label: text (N s)" in place of the last."""

    def __init__(self, label: str, handle=None, clock=time.monotonic):
        self.label, self._handle, self._clock = label, handle, clock
        self._start = clock()
        self._shown_at: float | None = None

    @property
    def live(self) -> bool:
        """True when the line is drawn by a front end (in a kernel), False where updates do nothing."""
        return self._handle is not None

    def text(self, detail: str = "") -> str:
        seconds = self._clock() - self._start
        return f"{self.label}: {detail} ({seconds:.0f} s)" if detail else f"{self.label} ({seconds:.0f} s)"

    def update(self, detail: str = "", force: bool = False) -> None:
        """Redraw the line with `detail`; at most every MIN_INTERVAL_S unless `force`."""
        if self._handle is None:
            return
        now = self._clock()
        if not force and self._shown_at is not None and now - self._shown_at < MIN_INTERVAL_S:
            return
        self._shown_at = now
        self._handle.update({"text/plain": self.text(detail)}, raw=True)

    def _close(self) -> None:
        if self._handle is not None:
            self._handle.update({}, raw=True)     # the empty bundle it started as
            self._handle = None


def in_kernel() -> bool:
    """True inside a Jupyter kernel (ipykernel), where some front end may draw a display."""
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    return shell is not None and getattr(shell, "kernel", None) is not None


@contextmanager
def line(label: str) -> Iterator[Line]:
    """A progress line for the block: drawn in a kernel, gone (an empty output) when the block ends."""
    if not isinstance(label, str) or not label:
        raise TypeError(f"progress.line: `label` must be a non-empty str naming the work; got {label!r}")
    handle = None
    if in_kernel():
        from IPython.display import display

        handle = display(display_id=True)        # an empty output with an id: IPython's own idiom
    shown = Line(label, handle)
    shown.update(force=True)
    try:
        yield shown
    finally:
        shown._close()


def run(command: list[str], label: str, timeout_s: float, **popen) -> subprocess.CompletedProcess:
    """`subprocess.run(command, capture_output=True, text=True, timeout=timeout_s, **popen)`, with a line that
    says how long it has waited (redrawn about once a second). Past the timeout the process is killed and
    subprocess.TimeoutExpired raised, as subprocess.run does; a failed process is returned, not raised."""
    with line(label) as shown, subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                                **popen) as proc:
        deadline = time.monotonic() + timeout_s
        while True:
            shown.update()
            try:                                 # a retried communicate loses no output (subprocess docs)
                stdout, stderr = proc.communicate(timeout=min(1.0, max(deadline - time.monotonic(), 0.01)))
                break
            except subprocess.TimeoutExpired:
                if time.monotonic() >= deadline:
                    proc.kill()
                    stdout, stderr = proc.communicate()
                    raise subprocess.TimeoutExpired(command, timeout_s, stdout, stderr) from None
    return subprocess.CompletedProcess(command, proc.returncode, stdout, stderr)


def empty_outputs_dropped(nb) -> int:
    """Remove from `nb` (a notebook dict) the display outputs whose bundle is empty; return how many.

    Such an output draws nothing anywhere; it is what an ended `line` leaves, and a saved notebook need not
    keep it.
    """
    dropped = 0
    for cell in nb.get("cells", []):
        outputs = cell.get("outputs")
        if not outputs:
            continue
        kept = [o for o in outputs if not (o.get("output_type") == "display_data" and not o.get("data"))]
        dropped += len(outputs) - len(kept)
        cell["outputs"] = kept
    return dropped
