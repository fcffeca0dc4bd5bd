"""The worker's jobs as plain data (no Qt, no torch): which job of each kind is the newest, why an older one
stopped, and a long job cut into units that the worker thread steps one at a time.

The one rule, newest wins: every job carries an id from the session's one counter; a job is current while
its id is the newest of its kind and no job it depends on (a corpus job depends on the model) is newer,
and until the window closes. The GUI thread posts a job's id before it queues the job; the worker thread
asks before it starts a job and between a long job's units.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

KINDS = ("run", "model", "partner", "stats", "importance")
DEPENDS_ON = {"stats": ("model",), "importance": ("model",)}  # a corpus job scores the model it started with
NEWER = {  # why a job stopped when a newer job of this kind overtook it
    "run": "a newer sentence run was asked for",
    "model": "another model was opened",
    "partner": "another model B was asked for",
    "stats": "newer head statistics were asked for",
    "importance": "a newer head importance job was asked for",
}
WINDOW_CLOSED = "the window closed"


@dataclass(frozen=True)
class Stopped:
    """A job's answer when it was overtaken before it finished: ``reason`` says why (a sentence fragment:
    "another model was opened"), ``by`` is the id of the job that overtook it (0: the window closed)."""

    reason: str
    by: int = 0

    @property
    def line(self) -> str:
        return f"Stopped: {self.reason}."


class JobBoard:
    """Kind → the newest job's id and what it does (written by the GUI thread, read by the worker thread:
    each kind's entry is one tuple, replaced in one assignment, so a reader never sees half of it)."""

    def __init__(self):
        self._newest: dict[str, tuple[int, str]] = {kind: (0, NEWER[kind]) for kind in KINDS}
        self.closing = False

    def post(self, kind: str, job_id: int, because: str = "") -> None:
        """``job_id`` is now the newest job of ``kind``; ``because`` says what it does to older ones when it
        is not the kind's usual ("the model moved to cpu" for a model job that is a device move)."""
        self._newest[kind] = (job_id, because or NEWER[kind])

    def newest(self, kind: str) -> int:
        return self._newest[kind][0]

    def close(self) -> None:
        """The window is closing: no job is current any more."""
        self.closing = True

    def overtaken(self, kind: str, job_id: int) -> Stopped | None:
        """Why the job ``job_id`` of ``kind`` is no longer current, or None while it is."""
        if self.closing:
            return Stopped(WINDOW_CLOSED)
        newest, because = self._newest[kind]
        if newest != job_id:
            return Stopped(because, by=newest)
        for other in DEPENDS_ON.get(kind, ()):
            newest, because = self._newest[other]
            if newest > job_id:
                return Stopped(because, by=newest)
        return None

    def is_current(self, kind: str, job_id: int) -> bool:
        return self.overtaken(kind, job_id) is None


@dataclass(frozen=True)
class Unit:
    """What one step of a long job gave: ``done`` with the work's ``value`` (its result), or the arguments
    its progress callback was called with after a unit."""

    done: bool
    value: Any


class UnitSteps:
    """``work(progress)`` (a function that calls ``progress`` after each unit of its work: a head scored, a
    batch run) run one unit per :meth:`step`, so that whoever steps it can do other things between units.

    The work runs on a helper thread that only ever runs while :meth:`step` waits for it: it and the caller
    never run at once, so the work's model is never touched by two threads together. :meth:`stop` ends the
    work where it waits (its progress callback answers False: the models' convention for "stop").
    """

    def __init__(self, work: Callable[[Callable[..., bool]], Any], name: str = "attnviz-job"):
        self._work = work
        self._resume: queue.Queue[bool] = queue.Queue()  # to the work: go on (True) or stop (False)
        self._units: queue.Queue[tuple[str, Any]] = queue.Queue()  # from the work: "unit", "done" or "error"
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self.finished = False

    def step(self) -> Unit:
        """Run the work's next unit; re-raises what the work raised."""
        if self.finished:
            raise RuntimeError("the job has finished")
        if not self._thread.is_alive():
            self._thread.start()
        self._resume.put(True)
        what, value = self._units.get()
        if what == "unit":
            return Unit(False, value)
        self._finish()
        if what == "error":
            raise value
        return Unit(True, value)

    def stop(self) -> None:
        """End the work between two units (nothing to do once it has finished or before it started)."""
        if self.finished or not self._thread.is_alive():
            self.finished = True
            return
        while True:
            self._resume.put(False)
            what, _ = self._units.get()
            if what != "unit":  # a work that ignored the first False is told again until it ends
                break
        self._finish()

    def _finish(self) -> None:
        self._thread.join()
        self.finished = True

    def _run(self) -> None:
        if not self._resume.get():
            self._units.put(("done", None))
            return
        try:
            result = self._work(self._unit_done)
        except BaseException as failure:  # noqa: BLE001 (handed to the stepping thread, which reports it)
            self._units.put(("error", failure))
            return
        self._units.put(("done", result))

    def _unit_done(self, *progress) -> bool:
        self._units.put(("unit", progress))
        return self._resume.get()
