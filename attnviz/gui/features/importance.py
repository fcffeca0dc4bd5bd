"""Wiring of the Head importance dock: asks the worker to score a corpus with each head switched off alone
(models/analysis/importance.py) by the method chosen in the panel (the NLL of the references with each head off, its
gradient estimate, or chrF / exact match from decoding again), keeps the newest answer, and draws it in the
Head statistics view's layers × heads grid (attnviz/state/stats_view.py computes what it shows). Choosing another
method scores the same corpus again. Clicking a head shows it in the window.

Jobs carry an id from the session's one counter (attnviz/state/jobs.py); the worker stops a job between two units (a head, or a pass) once
a newer importance or model job exists (a device move is one) and answers why, which the view says; an answer
for any other job is dropped here, and a newly opened model clears the view.
"""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import QObject, Signal

from ...state import stats_view
from ...state.jobs import Stopped
from ..views.head_stats import HeadStatsView
from .head_stats import CorpusTool

# Pairs scored in the window: decoding again costs a decoding of every pair per head, so the first fifty say
# enough; the NLL methods score hundreds in a minute or less.
PAIRS_LIMITS = {"nll": 200, "gradient": 200, "decode": 50}
DEFAULT_METHOD = "nll"  # a corpus always has its references: their NLL is the fast, fine-grained measure


class ImportancePanel(QObject):
    requested = Signal(int, object, int, str)  # job id, corpus (a PAIRS.tsv path or the pairs), pairs limit, method
    head_chosen = Signal(str, int, int)  # kind, layer, head: show it in the window

    def __init__(self, worker, parent: QObject | None = None, *, next_id: Callable[[], int]):
        super().__init__(parent)
        self.worker = worker
        self.next_id = next_id  # the session's one job counter: a method chosen here is a new job
        self.view = HeadStatsView()
        self.view.set_sentences_visible(False)  # importance has no typical sentences to list
        self.method = DEFAULT_METHOD
        self.view.show_run_choices("Method:", list(stats_view.IMPORTANCE_METHODS.items()), self.method)
        self.view.show_message("View → Head importance… scores a PAIRS.tsv corpus with each head switched off alone.")
        self.importance = None
        self.corpus: str | list[tuple[str, str]] | None = None
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
        """Score ``corpus`` by the method chosen in the panel."""
        self.job, self.stopped, self.corpus = job_id, None, corpus
        self.worker.jobs.post("importance", job_id)  # read by the worker between units
        limit = PAIRS_LIMITS[self.method]
        self.view.show_message(f"{stats_view.IMPORTANCE_METHODS[self.method]}: scoring "
                               f"{stats_view.corpus_name(corpus)} (at most {limit} pairs)…")
        self.requested.emit(job_id, corpus, limit, self.method)

    def progress(self, job_id: int, done: int, total: int) -> None:
        if job_id == self.job:
            self.view.show_message(f"{stats_view.IMPORTANCE_METHODS[self.method]}: scored {done} of {total} heads…")

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
        self.importance, self.head, self.job, self.corpus = None, None, 0, None  # the corpus was the old model's
        self.view.show_note("")
        self.view.show_message(f"{self.stopped.line} View → Head importance… scores a corpus with it." if stopped_by_it
                               else "A new model is open: View → Head importance… scores a corpus with it.")
        self.stopped = None

    def choose(self, method: str, kind: str) -> None:
        self.kind, self.head = kind or self.kind, None
        if method != self.method:
            self.choose_method(method)
            return
        self.refresh()

    def choose_method(self, method: str) -> None:
        """Score the corpus of the last job again by ``method`` (kept for the next one when there is none)."""
        self.method = method
        self.view.show_run_choices("Method:", list(stats_view.IMPORTANCE_METHODS.items()), method)
        if self.corpus is not None:
            self.start(self.next_id(), self.corpus)

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
        note = "" if self.head is None else stats_view.importance_note(self.importance, self.kind, *self.head)
        self.view.show_note(note)


def importance_tool(window) -> CorpusTool:
    """View → Head importance…: a head clicked in the panel is shown in the window."""

    def make_panel(window) -> ImportancePanel:
        panel = ImportancePanel(window.worker, window, next_id=window.session.next_id)
        panel.head_chosen.connect(lambda kind, layer, head: window.viewing.select(kind=kind, layer=layer, head=head))
        return panel

    return CorpusTool(window, title="Head importance", dock_title="Head importance", make_panel=make_panel)
