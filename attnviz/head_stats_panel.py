"""Wiring of the Head statistics dock (kept out of the main window so that it stays small): asks the worker for
a corpus' statistics, keeps the newest answer and what is chosen in it (run, kind, head), and has the view
draw what attnviz/stats_view.py computes.

Jobs carry an id from the session's one counter. The worker stops a job once a newer statistics job or a newer
model job exists; an answer for any job but the newest is dropped here, and a newly opened model clears the view.
"""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QObject, Signal

from . import stats_view
from .views.head_stats import HeadStatsView


class HeadStatsPanel(QObject):
    requested = Signal(int, str)  # job id, PAIRS.tsv path → worker

    def __init__(self, worker, parent: QObject | None = None):
        super().__init__(parent)
        self.worker = worker
        self.view = HeadStatsView()
        self.stats = None
        self.job = 0
        self.run, self.kind, self.head = "reference", "cross", None
        self.requested.connect(worker.head_stats)
        worker.head_stats_ready.connect(self.accept)
        worker.loaded.connect(self.model_changed)
        self.view.choice_changed.connect(self.choose)
        self.view.head_clicked.connect(self.choose_head)

    def start(self, job_id: int, path: str) -> None:
        """Ask for ``path``'s statistics; any older job still running stops at its next batch."""
        self.job = job_id
        self.worker.latest_stats_job = job_id  # read by the worker between batches
        self.view.show_message(f"Running {Path(path).name} through the model…")
        self.requested.emit(job_id, path)

    def accept(self, job_id: int, answer) -> None:
        """The worker's answer: the statistics, or the line saying why there are none."""
        if job_id != self.job:
            return
        if isinstance(answer, str):
            self.view.show_message(f"No head statistics: {answer}")
            return
        self.stats, self.head = answer, None
        self.refresh()

    def model_changed(self, _job_id: int = 0, _info=None) -> None:
        self.stats, self.head, self.job = None, None, 0
        self.view.show_typical(None)
        self.view.show_message("A new model is open: View → Corpus head statistics… runs a corpus through it.")

    def choose(self, run: str, kind: str) -> None:
        self.run, self.kind, self.head = run, kind, None
        self.refresh()

    def choose_head(self, layer: int, head: int) -> None:
        self.head = (layer, head)
        self.refresh()

    def refresh(self) -> None:
        if self.stats is None:
            return
        state = stats_view.head_stats_state(self.stats, self.run, kind=self.kind, selected=self.head)
        self.run, self.kind = state.run, state.kind
        self.view.show_stats(state)
        self.view.show_typical(None if self.head is None else
                               stats_view.typical_sentences(self.stats, self.run, self.kind, *self.head))
