"""Wiring of the Head importance dock: asks the worker to score a PAIRS.tsv corpus with each head switched off
alone (models/importance.py), keeps the newest answer, and draws it in the Head statistics view's layers × heads
grid (attnviz/stats_view.py computes what it shows). Clicking a head shows it in the window.

Jobs carry an id from the session's one counter (attnviz/jobs.py); the worker stops a job between heads once
a newer importance or model job exists (a device move is one) and answers why, which the view says; an answer
for any other job is dropped here, and a newly opened model clears the view.
"""

from __future__ import annotations

from PySide6.QtCore import QObject, Signal

from . import stats_view
from .jobs import Stopped
from .views.head_stats import HeadStatsView

PAIRS_LIMIT = 50  # every head costs a decoding of every pair: the first fifty say enough in the window


class ImportancePanel(QObject):
    requested = Signal(int, object, int)  # job id, corpus (a PAIRS.tsv path or the pairs), pairs limit → worker
    head_chosen = Signal(str, int, int)  # kind, layer, head: show it in the window

    def __init__(self, worker, parent: QObject | None = None):
        super().__init__(parent)
        self.worker = worker
        self.view = HeadStatsView()
        self.view.set_sentences_visible(False)  # importance has no typical sentences to list
        self.view.show_message("View → Head importance… scores a PAIRS.tsv corpus with each head switched off alone.")
        self.importance = None
        self.job = 0
        self.stopped: Stopped | None = None  # why the newest job stopped before it finished
        self.kind, self.head = "cross", None
        self.requested.connect(worker.head_importance)
        worker.importance_ready.connect(self.accept)
        worker.importance_progress.connect(self.progress)
        worker.loaded.connect(self.model_changed)
        self.view.choice_changed.connect(self.choose)
        self.view.head_clicked.connect(self.choose_head)

    def start(self, job_id: int, corpus: str | list[tuple[str, str]]) -> None:
        self.job, self.stopped = job_id, None
        self.worker.jobs.post("importance", job_id)  # read by the worker between heads
        self.view.show_message(f"Scoring {stats_view.corpus_name(corpus)} (at most {PAIRS_LIMIT} pairs) with "
                               "every head on…")
        self.requested.emit(job_id, corpus, PAIRS_LIMIT)

    def progress(self, job_id: int, done: int, total: int) -> None:
        if job_id == self.job:
            self.view.show_message(f"Scored {done} of {total} heads switched off…")

    def accept(self, job_id: int, answer) -> None:
        if job_id != self.job:
            return
        if isinstance(answer, Stopped):
            self.stopped = answer
            self.view.show_message(f"{answer.line} View → Head importance… scores a corpus again.")
            return
        if isinstance(answer, str):
            self.view.show_message(f"No head importance: {answer}")
            return
        self.importance, self.head = answer, None
        self.refresh()

    def model_changed(self, job_id: int = 0, _info=None) -> None:
        stopped_by_it = self.stopped is not None and self.stopped.by == job_id
        self.importance, self.head, self.job = None, None, 0
        self.view.show_note("")
        self.view.show_message(f"{self.stopped.line} View → Head importance… scores a corpus with it." if stopped_by_it
                               else "A new model is open: View → Head importance… scores a corpus with it.")
        self.stopped = None

    def choose(self, _run: str, kind: str) -> None:
        self.kind, self.head = kind, None
        self.refresh()

    def choose_head(self, layer: int, head: int) -> None:
        self.head = (layer, head)
        self.refresh()
        self.head_chosen.emit(self.kind, layer, head)

    def refresh(self) -> None:
        if self.importance is None:
            return
        state = stats_view.importance_state(self.importance, self.kind, self.head)
        self.kind = state.kind
        self.view.show_stats(state)
        self.view.show_note("" if self.head is None else stats_view.importance_note(self.importance, self.kind, *self.head))
