"""Wiring of the Head statistics dock (kept out of the main window so that it stays small): asks the worker for
a corpus' statistics, keeps the newest answer and what is chosen in it (run, kind, head), and has the view
draw what attnviz/state/stats_view.py computes.

Jobs are posted on the session's job board (attnviz/state/jobs.py). The worker stops a job between batches once
a newer statistics job or a newer model job exists (a device move is one) and answers why, which the view says;
an answer for any job but the newest is dropped here, and a newly opened model clears the view. What the corpus
panels share (a job, its one answer, a new model) is :class:`CorpusPanel`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from PySide6.QtCore import QObject, Qt, Signal
from PySide6.QtWidgets import QFileDialog, QMessageBox, QWidget

from ...state import stats_view
from ...state.demos import demo_reference_pairs
from ...state.jobs import Answer, Stopped
from ...state.session import Session
from ..docks import DockArea
from ..layout import Views
from ..views.head_stats import HeadStatsView

if TYPE_CHECKING:
    from ..worker import ModelWorker
    from .viewing import Viewing

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
    use (most sessions never need it). ``make_panel()`` makes the panel and connects what it asks of the other
    features."""

    def __init__(self, session: Session, docks: DockArea, *, title: str, dock_title: str,
                 make_panel: Callable[[], QObject], parent: QWidget):
        super().__init__(parent)
        self.session, self.docks, self.parent_widget = session, docks, parent
        self.title, self.dock_title, self.make_panel = title, dock_title, make_panel
        self.panel = None

    def open(self, corpus: str | list[tuple[str, str]] | None = None) -> None:
        """Run ``corpus`` (a PAIRS.tsv path, or the pairs; asked for when None) on the worker; the panel shows the
        answer."""
        if self.session.model is None:
            return
        corpus = corpus or choose_corpus(self.parent_widget, self.title, checkpoint=self.session.model.path)
        if not corpus:
            return
        if self.panel is None:
            self.panel = self.make_panel()
            self.panel.dock = self.docks.add(self.dock_title, self.panel.view, Qt.DockWidgetArea.RightDockWidgetArea,
                                             scrolls=True)
        self.docks.show(self.panel.dock)
        self.panel.start(corpus)


def answered(answer: Answer, job_id: int, say: Callable[[str], None], *, again: str, none: str) -> object | None:
    """``answer``'s value when it answers the job ``job_id``; else None, having told ``say`` why there is none
    (``again``: how to ask again after it stopped; ``none``: what an error leaves without, "No head statistics")."""
    if answer.job != job_id:
        return None
    if answer.stopped is not None:
        say(f"{answer.stopped.line} {again}")
    elif answer.error:
        say(f"{none}: {answer.error}")
    return answer.value if answer.line == "" else None


class CorpusPanel(QObject):
    """What a corpus panel does with its jobs: each asks the session's board for a new id of ``KIND``, keeps the
    newest's id and its answer's value (or says why it has none), and a newly opened model clears the panel
    (saying so, or that it stopped the job)."""

    KIND = ""  # its jobs' kind on the board
    MENU = ""  # the menu item that starts a job: "View → Corpus head statistics…"
    AGAIN, WITH_IT, NONE = "", "", ""  # how the panel asks again, asks of a new model, and has no value

    def __init__(self, worker, parent: QObject | None = None, *, new_job: Callable[[str], int]):
        super().__init__(parent)
        self.worker = worker
        self.new_job = new_job  # the session's board: a new id, posted (read by the worker between units)
        self.view = HeadStatsView()
        self.job = 0
        self.stopped: Stopped | None = None  # why the newest job stopped before it finished
        worker.loaded.connect(self.model_changed)

    def _new(self) -> int:
        self.job, self.stopped = self.new_job(self.KIND), None
        return self.job

    def _value(self, answer: Answer) -> object | None:
        if answer.job == self.job and answer.stopped is not None:
            self.stopped = answer.stopped
        return answered(answer, self.job, self.view.show_message, again=f"{self.MENU} {self.AGAIN}", none=self.NONE)

    def model_changed(self, job_id: int = 0, _info=None) -> None:
        stopped_by_it = self.stopped is not None and self.stopped.by == job_id
        self.job = 0
        self.forget()
        self.view.show_message(f"{self.stopped.line} {self.MENU} {self.WITH_IT}" if stopped_by_it else
                               f"A new model is open: {self.MENU} {self.WITH_IT}")
        self.stopped = None

    def forget(self) -> None:
        """What the panel showed belonged to the model open until now."""


def head_stats_tool(session: Session, views: Views, worker: ModelWorker, *, viewing: Viewing,
                    parent: QWidget) -> CorpusTool:
    """View → Corpus head statistics…: a typical sentence clicked in the panel runs in the window."""

    def make_panel() -> HeadStatsPanel:
        panel = HeadStatsPanel(worker, parent, new_job=session.new_job)
        panel.view.sentence_chosen.connect(viewing.run_text)
        return panel

    return CorpusTool(session, views.docks, title="Corpus head statistics", dock_title="Head statistics",
                      make_panel=make_panel, parent=parent)


class HeadStatsPanel(CorpusPanel):
    requested = Signal(int, object)  # job id, corpus (a PAIRS.tsv path or the pairs) → worker
    KIND, MENU, NONE = "stats", "View → Corpus head statistics…", "No head statistics"
    AGAIN, WITH_IT = "runs a corpus again.", "runs a corpus through it."

    def __init__(self, worker, parent: QObject | None = None, *, new_job: Callable[[str], int]):
        super().__init__(worker, parent, new_job=new_job)
        self.stats = None
        self.run, self.kind, self.head = "reference", "cross", None
        self.requested.connect(worker.head_stats)
        worker.head_stats_ready.connect(self.accept)
        self.view.choice_changed.connect(self.choose)
        self.view.head_clicked.connect(self.choose_head)

    def start(self, corpus: str | list[tuple[str, str]]) -> None:
        """Ask for the statistics of ``corpus`` (a PAIRS.tsv path, or the pairs); any older job still running
        stops at its next batch."""
        job_id = self._new()
        self.view.show_message(f"Running {stats_view.corpus_name(corpus)} through the model…")
        self.requested.emit(job_id, corpus)

    def accept(self, answer: Answer) -> None:
        """The worker's answer: the statistics, or the line saying why there are none."""
        stats = self._value(answer)
        if stats is not None:
            self.stats, self.head = stats, None
            self.refresh()

    def forget(self) -> None:
        self.stats, self.head = None, None
        self.view.show_typical(None)
        self.view.clear_maps()  # the maps were the other model's

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
