"""Wiring of the Head statistics dock (kept out of the main window so that it stays small): asks the worker for
a corpus' statistics, keeps the newest answer and what is chosen in it (run, kind, head), and has the view
draw what attnviz/state/stats_view.py computes.

Jobs carry an id from the session's one counter (attnviz/state/jobs.py). The worker stops a job between batches once
a newer statistics job or a newer model job exists (a device move is one) and answers why, which the view says;
an answer for any job but the newest is dropped here, and a newly opened model clears the view.
"""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import QObject, Qt, Signal
from PySide6.QtWidgets import QFileDialog, QMessageBox, QWidget

from ...state import stats_view
from ...state.demos import demo_reference_pairs
from ...state.jobs import Stopped
from ..views.head_stats import HeadStatsView

PAIRS_FILTER = "Sentence pairs (*.tsv *.txt);;All files (*)"


def choose_corpus(parent: QWidget, title: str, checkpoint) -> str | list[tuple[str, str]] | None:
    """Ask which corpus a corpus tool runs: a bundled demo offers its own examples with their references
    (the default: nothing to prepare), any model a PAIRS.tsv file. None when the user cancels."""
    pairs = demo_reference_pairs(checkpoint)
    if pairs:
        box = QMessageBox(QMessageBox.Icon.Question, title, f"{title}: which sentence pairs?", parent=parent)
        box.setInformativeText("This demo comes with example sentences and their reference translations; "
                               "a PAIRS.tsv file has one source and target per line, separated by a tab.")
        examples = box.addButton(f"This demo's {len(pairs)} examples", QMessageBox.ButtonRole.AcceptRole)
        file_button = box.addButton("A PAIRS.tsv file…", QMessageBox.ButtonRole.ActionRole)
        box.addButton(QMessageBox.StandardButton.Cancel)
        box.setDefaultButton(examples)
        box.exec()
        if box.clickedButton() is examples:
            return pairs
        if box.clickedButton() is not file_button:
            return None
    return QFileDialog.getOpenFileName(parent, f"{title}: sentence pairs", "", PAIRS_FILTER)[0] or None


class CorpusTool(QObject):
    """A corpus tool of the View menu: asks which corpus, then runs it in its panel, whose dock is made on first
    use (most sessions never need it). ``make_panel(window)`` makes the panel and connects what it asks of the
    window."""

    def __init__(self, window, *, title: str, dock_title: str, make_panel: Callable[[QWidget], QObject]):
        super().__init__(window)
        self.window, self.title, self.dock_title, self.make_panel = window, title, dock_title, make_panel
        self.panel = None

    def open(self, corpus: str | list[tuple[str, str]] | None = None) -> None:
        """Run ``corpus`` (a PAIRS.tsv path, or the pairs; asked for when None) on the worker; the panel shows the
        answer."""
        window = self.window
        if window.session.model is None:
            return
        corpus = corpus or choose_corpus(window, self.title, checkpoint=window.session.model.path)
        if not corpus:
            return
        if self.panel is None:
            self.panel = self.make_panel(window)
            self.panel.dock = window.docks.add(self.dock_title, self.panel.view, Qt.DockWidgetArea.RightDockWidgetArea,
                                               scrolls=True)
        window.docks.show(self.panel.dock)
        self.panel.start(window.session.next_id(), corpus)


def head_stats_tool(window) -> CorpusTool:
    """View → Corpus head statistics…: a typical sentence clicked in the panel runs in the window."""

    def make_panel(window) -> HeadStatsPanel:
        panel = HeadStatsPanel(window.worker, window)
        panel.view.sentence_chosen.connect(window.viewing.run_text)
        return panel

    return CorpusTool(window, title="Corpus head statistics", dock_title="Head statistics", make_panel=make_panel)


class HeadStatsPanel(QObject):
    requested = Signal(int, object)  # job id, corpus (a PAIRS.tsv path or the pairs) → worker

    def __init__(self, worker, parent: QObject | None = None):
        super().__init__(parent)
        self.worker = worker
        self.view = HeadStatsView()
        self.stats = None
        self.job = 0
        self.stopped: Stopped | None = None  # why the newest job stopped before it finished
        self.run, self.kind, self.head = "reference", "cross", None
        self.requested.connect(worker.head_stats)
        worker.head_stats_ready.connect(self.accept)
        worker.loaded.connect(self.model_changed)
        self.view.choice_changed.connect(self.choose)
        self.view.head_clicked.connect(self.choose_head)

    def start(self, job_id: int, corpus: str | list[tuple[str, str]]) -> None:
        """Ask for the statistics of ``corpus`` (a PAIRS.tsv path, or the pairs); any older job still running
        stops at its next batch."""
        self.job, self.stopped = job_id, None
        self.worker.jobs.post("stats", job_id)  # read by the worker between batches
        self.view.show_message(f"Running {stats_view.corpus_name(corpus)} through the model…")
        self.requested.emit(job_id, corpus)

    def accept(self, job_id: int, answer) -> None:
        """The worker's answer: the statistics, or the line saying why there are none."""
        if job_id != self.job:
            return
        if isinstance(answer, Stopped):
            self.stopped = answer
            self.view.show_message(f"{answer.line} View → Corpus head statistics… runs a corpus again.")
            return
        if isinstance(answer, str):
            self.view.show_message(f"No head statistics: {answer}")
            return
        self.stats, self.head = answer, None
        self.refresh()

    def model_changed(self, job_id: int = 0, _info=None) -> None:
        stopped_by_it = self.stopped is not None and self.stopped.by == job_id
        self.stats, self.head, self.job = None, None, 0
        self.view.show_typical(None)
        self.view.clear_maps()  # the maps were the other model's
        self.view.show_message(f"{self.stopped.line} View → Corpus head statistics… runs a corpus through it."
                               if stopped_by_it else
                               "A new model is open: View → Corpus head statistics… runs a corpus through it.")
        self.stopped = None

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
