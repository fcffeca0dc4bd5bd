"""Wiring of the Head importance dock: asks the worker to score a corpus with each head switched off alone
(models/analysis/importance.py) by the method chosen in the panel (the NLL of the references with each head off, its
gradient estimate, or chrF / exact match from decoding again), keeps the newest answer, and draws it in the
Head statistics view's layers × heads grid (attnviz/state/stats_view.py computes what it shows). Choosing another
method scores the same corpus again. Clicking a head shows it in the window. Once heads are scored, "Pruning
curve" switches them off cumulatively in three orders of that ranking, as a job of its own, and plots the score
under the grid (attnviz/state/prune_view.py computes what it shows); its Export… saves the figure.

Jobs are posted on the session's job board (attnviz/state/jobs.py); the worker stops a job between two units
(a head, or a pass) once a newer job of its kind or a model job exists (a device move is one; a pruning curve also
follows its ranking, so scoring heads again stops it) and answers why, which the view says; an answer for any
other job is dropped here, and a newly opened model clears the view.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from PySide6.QtCore import QObject, Signal
from PySide6.QtWidgets import QWidget

from models.analysis.catalogue import DECODE, GRADIENT, NLL
from models.nn.precisions import EXACT

from ...state import stats_view
from ...state.jobs import Answer
from ...state.prune_view import prune_curve_figure, prune_curve_state
from ...state.session import Session
from ...state.settings import SettingsReader
from ..dialogs import IMAGE_FILTER, ask_save_path
from ..layout import Views
from ..views.prune_curve import WAITING, PruneCurveView
from .head_stats import CorpusPanel, CorpusTool, answered

if TYPE_CHECKING:
    from ..worker import ModelWorker
    from .exporting import Exporting
    from .viewing import Viewing

# Pairs scored in the window: decoding again costs a decoding of every pair per head, so the first fifty say
# enough; the NLL methods score hundreds in a minute or less.
PAIRS_LIMITS = {NLL: 200, GRADIENT: 200, DECODE: 50}
DEFAULT_METHOD = NLL  # a corpus always has its references: their NLL is the fast, fine-grained measure
PRUNE_SEED = 0  # the random order's first seed: the CLI's default --seed
CURVE_HEIGHT = 260  # px of the dock the pruning curve starts with, under the grid


class ImportancePanel(CorpusPanel):
    requested = Signal(int, object, int, str)  # job id, corpus (a PAIRS.tsv path or the pairs), pairs limit, method
    head_chosen = Signal(str, int, int)  # kind, layer, head: show it in the window
    curve_requested = Signal(int, object, object, int)  # job id, corpus, HeadImportance, seed
    KIND, MENU, NONE = "importance", "View → Head importance…", "No head importance"
    AGAIN, WITH_IT = "scores a corpus again.", "scores a corpus with it."

    def __init__(self, worker, parent: QObject | None = None, *, new_job: Callable[[str], int],
                 weights: Callable[[], str] = lambda: EXACT):
        super().__init__(worker, parent, new_job=new_job)  # a method chosen here is a new job
        self.weights = weights  # the precision the open model's weights are kept in
        self.view.set_sentences_visible(False)  # importance has no typical sentences to list
        self.method = DEFAULT_METHOD
        self.view.show_run_choices("Method:", list(stats_view.IMPORTANCE_METHODS.items()), self.method)
        self.view.show_message("View → Head importance… scores a PAIRS.tsv corpus with each head switched off alone.")
        self.importance = None
        self.corpus: str | list[tuple[str, str]] | None = None
        self.kind, self.head = "cross", None
        self.requested.connect(worker.head_importance)
        worker.importance_ready.connect(self.accept)
        worker.importance_progress.connect(self.progress)
        self.view.choice_changed.connect(self.choose)
        self.view.head_clicked.connect(self.choose_head)
        self.curve_view = PruneCurveView()
        self.curve_view.seed.setValue(PRUNE_SEED)
        self.view.add_section(self.curve_view, height=CURVE_HEIGHT)
        self.curves = None  # the newest PruneCurves shown
        self.curve_job = 0
        self.curve_view.requested.connect(self.start_curve)
        self.curve_requested.connect(worker.prune_curve)
        worker.prune_ready.connect(self.accept_curves)
        worker.prune_progress.connect(self.curve_progress)

    def start(self, corpus: str | list[tuple[str, str]]) -> None:
        """Score ``corpus`` by the method chosen in the panel."""
        job_id, self.corpus = self._new(), corpus
        limit = PAIRS_LIMITS[self.method]
        self.forget_curves(ready=False)
        self.view.show_message(f"{stats_view.IMPORTANCE_METHODS[self.method]}: scoring "
                               f"{stats_view.corpus_name(corpus)} (at most {limit} pairs)…")
        self.requested.emit(job_id, corpus, limit, self.method)

    def progress(self, job_id: int, done: int, total: int) -> None:
        if job_id == self.job:
            self.view.show_message(f"{stats_view.IMPORTANCE_METHODS[self.method]}: scored {done} of {total} heads…")

    def accept(self, answer: Answer) -> None:
        importance = self._value(answer)
        if importance is None:
            return
        self.importance, self.head = importance, None
        self.curve_view.clear("Pruning curve switches these heads off one after another and plots the score.",
                              ready=True)
        self.refresh()

    def forget(self) -> None:
        self.importance, self.head, self.corpus = None, None, None  # the corpus was the old model's
        self.forget_curves(ready=False)
        self.view.show_note("")
        self.view.clear_maps()  # the tables were the other model's

    def start_curve(self) -> None:
        """The pruning curves of the shown importance, on the pairs it scored (a newer one stops this one)."""
        if self.importance is None or self.corpus is None:
            return
        self.curve_job, self.curves = self.new_job("prune"), None  # read by the worker between units
        heads = sum(table.size for table in self.importance.scores.values())
        self.curve_view.clear(f"Pruning curve: switching the {heads} heads off in three orders…", ready=True)
        self.curve_requested.emit(self.curve_job, self.corpus, self.importance, self.curve_view.seed.value())

    def curve_progress(self, job_id: int, done: int, total: int) -> None:
        if job_id == self.curve_job:
            self.curve_view.show_message(f"Pruning curve: scored {done} of {total} points…")

    def accept_curves(self, answer: Answer) -> None:
        curves = answered(answer, self.curve_job, self.curve_view.show_message, again="Pruning curve asks again.",
                          none="No pruning curve")
        if curves is not None:
            self.curves = curves
            self.curve_view.show_curves(prune_curve_state(curves))

    def forget_curves(self, *, ready: bool) -> None:
        """The curves belonged to the ranking shown until now."""
        self.curves = None
        self.curve_view.clear(WAITING, ready=ready)

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
            self.start(self.corpus)

    def choose_head(self, layer: int, head: int) -> None:
        self.head = (layer, head)
        self.refresh()
        self.head_chosen.emit(self.kind, layer, head)

    def refresh(self) -> None:
        if self.importance is None:
            return
        state = stats_view.importance_state(self.importance, self.kind, self.head, weights=self.weights())
        self.kind = state.kind
        self.view.show_stats(state)
        note = "" if self.head is None else stats_view.importance_note(self.importance, self.kind, *self.head)
        self.view.show_note(note)


class ImportanceTool(CorpusTool):
    """View → Head importance…: a head clicked in the panel is shown in the window; the pruning curve exports."""

    def __init__(self, session: Session, views: Views, worker: ModelWorker, *, viewing: Viewing,
                 exporting: Exporting, parent: QWidget, stored: SettingsReader):
        super().__init__(session, views.docks, title="Head importance", dock_title="Head importance",
                         make_panel=self._make_panel, parent=parent)
        self.worker, self.viewing, self.exporting, self.stored = worker, viewing, exporting, stored

    def _make_panel(self) -> ImportancePanel:
        session = self.session
        panel = ImportancePanel(self.worker, self.parent_widget, new_job=session.new_job,
                                weights=lambda: session.model.weights if session.model else EXACT)
        panel.head_chosen.connect(lambda kind, layer, head: self.viewing.select(kind=kind, layer=layer, head=head))
        panel.curve_view.export_requested.connect(lambda: self.export_curve())
        return panel

    def export_curve(self, path: str | None = None) -> None:
        """The panel's pruning curves as PNG or SVG: the figure ``attnviz importance --prune-curve -o`` draws,
        titled with the model's name."""
        if self.panel is None or self.panel.curves is None:
            return
        model = self.session.model.path.stem
        path = path or ask_save_path(self.parent_widget, self.stored, "Export pruning curve",
                                     name=f"{model}-pruning-curve.png", file_filter=IMAGE_FILTER)
        if path:
            self.exporting.write_figure(prune_curve_figure(prune_curve_state(self.panel.curves), model=model), path)
