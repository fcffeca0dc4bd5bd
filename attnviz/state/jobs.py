"""The worker's jobs as plain data (no Qt, no torch): which job of each kind is the newest, why an older one
stopped, and a long job's generator of units that the worker thread steps one at a time.

The one rule, newest wins: every job carries an id from the board's one counter (:meth:`JobBoard.new`, owned
by the session; the worker holds the same board); a job is current while its id is the newest of its kind and no
job it depends on (a corpus job depends on the model) is newer, and until the window closes. A job that explains
a model's results also names the model it was asked for (and model B's, for B's): the worker says on the board
which models it holds (:meth:`JobBoard.hold`), and a job of a model it no longer holds is stale whatever the ids'
order. The GUI thread posts a job before it queues it; the worker thread asks before it starts a job and
between a long job's units. Every long job answers one :class:`Answer`: a value, an error line, or why it stopped.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Any

from models.nn.ablation import NO_ABLATION, Ablation

KINDS = ("run", "model", "partner", "stats", "importance", "prune", "contributions", "partner_contributions",
         "coverage", "neuron", "lens", "patching")
DEPENDS_ON = {"stats": ("model",), "importance": ("model",),  # a corpus job scores the model it started with
              "prune": ("model", "importance"),  # a pruning curve follows the ranking of the importance it started from
              # contributions explain one run's results: a newer run or model leaves nothing to explain
              "contributions": ("model", "run"), "partner_contributions": ("model", "run", "partner"),
              "coverage": ("model", "run"), "neuron": ("model", "run"), "lens": ("model", "run"),
              "patching": ("model",)}
NEWER = {  # why a job stopped when a newer job of this kind overtook it
    "run": "a newer sentence run was asked for",
    "model": "another model was opened",
    "partner": "another model B was asked for",
    "stats": "newer head statistics were asked for",
    "importance": "a newer head importance job was asked for",
    "prune": "a newer pruning curve was asked for",
    "contributions": "another contribution method or result was asked for",
    "partner_contributions": "model B's contributions of another method or result were asked for",
    "coverage": "a newer run's source contribution was asked for",
    "neuron": "the neuron view of another result was asked for",
    "lens": "the lens of another result was asked for",
    "patching": "another patching was asked for",
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


@dataclass(frozen=True)
class ResultJob:
    """A pane's job of one result of one run (``request_id``, ``hypothesis``): its source ``text`` in the run's
    languages (laid out by the chat template where the run was: ``chat``), its ``output`` token ids, the heads it
    ran with switched off (``ablation``)."""

    id: int
    request_id: int
    hypothesis: int
    text: str
    output: tuple[int, ...]
    src_lang: str = ""
    tgt_lang: str = ""
    ablation: Ablation = NO_ABLATION
    chat: bool = False

    @property
    def key(self) -> tuple[int, int]:
        return self.request_id, self.hypothesis


@dataclass(frozen=True)
class Answer:
    """What a long job answers, in one form for every kind: its ``value``, or ``error`` (the one line saying why
    it has none), or ``stopped`` (it was overtaken before it finished). ``job``: the id it answers."""

    job: Any
    value: Any = None
    error: str = ""
    stopped: Stopped | None = None

    @property
    def line(self) -> str:
        """Why there is no value ("" when there is one)."""
        return self.stopped.line if self.stopped is not None else self.error


HELD = ("model", "partner")  # the kinds whose job puts a model in the worker's hands


class JobBoard:
    """Kind → the newest job's id and what it does, and the jobs whose models the worker holds (written by the
    GUI thread and the worker thread, read by both: each entry is one value, replaced in one assignment, so a
    reader never sees half of it)."""

    def __init__(self):
        self._newest: dict[str, tuple[int, str]] = {kind: (0, NEWER[kind]) for kind in KINDS}
        self._asked_of: dict[tuple[str, int], dict[str, int]] = {}  # (kind, id) → the models it was asked for
        self._held: dict[str, int] = {kind: 0 for kind in HELD}
        self._last_id = 0
        self.closing = False

    def new(self, kind: str, because: str = "", *, of: dict[str, int] | None = None) -> int:
        """A new job of ``kind``, posted: its id, from the one counter (a newer job has a larger id; see
        :meth:`post`)."""
        self._last_id += 1
        self.post(kind, self._last_id, because, of=of)
        return self._last_id

    def post(self, kind: str, job_id: int, because: str = "", *, of: dict[str, int] | None = None) -> None:
        """``job_id`` is now the newest job of ``kind``; ``because`` says what it does to older ones when it
        is not the kind's usual ("the model moved to cpu" for a model job that is a device move); ``of``: the
        models it was asked for (``{"model": id of the model job that opened it}``, and ``"partner"``)."""
        if of:  # the dict is replaced whole: the worker thread reads it meanwhile
            self._asked_of = {**{key: held for key, held in self._asked_of.items() if key[0] != kind},
                              (kind, job_id): dict(of)}
        self._newest[kind] = (job_id, because or NEWER[kind])

    def hold(self, kind: str, job_id: int) -> None:
        """The worker now holds the model that job ``job_id`` of ``kind`` (``model``, ``partner``) opened (0:
        none): every job asked for another model of that kind is stale."""
        self._held[kind] = job_id

    def held(self, kind: str) -> int:
        return self._held[kind]

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
        asked_of = self._asked_of.get((kind, job_id), {})
        for other in DEPENDS_ON.get(kind, ()):
            newest, because = self._newest[other]
            if newest > job_id:
                return Stopped(because, by=newest)
            if other in asked_of and asked_of[other] != self._held[other]:  # asked of a model the worker let go
                return Stopped(NEWER[other], by=self._held[other])
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
    """A long job's generator (models/analysis/steps.py: each ``yield`` ends one unit of work with its progress, the
    return value is the result) stepped one unit per :meth:`step` on the caller's thread, so that the caller
    can do other things between units: nothing else runs the job, and its model is touched by one thread.
    ``start`` makes the generator at the first step, so that what making it raises (a corpus that cannot be
    read) is the first step's error."""

    def __init__(self, start: Callable[[], Generator]):
        self._start = start
        self._steps: Generator | None = None
        self.finished = False

    def step(self) -> Unit:
        """Run the job's next unit; re-raises what the job raised."""
        if self.finished:
            raise RuntimeError("the job has finished")
        try:
            if self._steps is None:
                self._steps = self._start()
            return Unit(False, next(self._steps))
        except StopIteration as end:
            self.finished = True
            return Unit(True, end.value)
        except BaseException:
            self.finished = True
            raise

    def stop(self) -> None:
        """End the job between two units (nothing to do once it has finished)."""
        if not self.finished and self._steps is not None:
            self._steps.close()
        self.finished = True


@dataclass
class LongJob:
    """A long job under way on the worker: its kind and id on the board, its units, and where its answers go
    (``answer``: an :class:`Answer`; ``report``: job id and what the work's progress callback was given after a
    unit)."""

    kind: str
    id: int
    units: UnitSteps
    answer: Callable[[Answer], None]
    report: Callable[..., None] | None = None
