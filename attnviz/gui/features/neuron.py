"""The Neuron pane in the window (View → Neuron): a dock made on first use, a tab beside the Decoding dock under the
focus heatmap, where its vectors have the window's width. The worker computes the shown result's query and key
vectors when the pane is first shown for it (a ``neuron`` job: a newer run or model overtakes it); this feature
keeps them while that run is the newest and draws the selected head and query row (attnviz/state/neuron_view.py
computes what it shows).

The query row follows a click on a row of the focus heatmap or the pane's own box; until one is chosen it is the
selected decoding step (decoder kinds) or the first token. The viewing feature calls :meth:`Neuron.refresh` after
each redraw, so the pane follows the selected kind, layer, head and hypothesis; it reaches no other feature.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from PySide6.QtCore import QObject, Signal
from PySide6.QtWidgets import QDockWidget

from models.nn.ablation import NO_ABLATION

from ...state.neuron_view import WAITING, NeuronAnswer, NeuronJob, default_row, neuron_state
from ...state.session import Session
from ..layout import Views

if TYPE_CHECKING:
    from ..views.neuron import NeuronView
    from ..worker import ModelWorker


class Neuron(QObject):
    requested = Signal(object)  # NeuronJob → worker

    def __init__(self, session: Session, views: Views, worker: ModelWorker, parent: QObject | None = None):
        super().__init__(parent)
        self.session, self.views = session, views
        self.answers: dict[tuple, object] = {}  # (request id, hypothesis, run's own) → NeuronVectors or a line
        self.asked: dict[int, tuple] = {}  # job id → the key it was asked for, until answered
        self.rows: dict[str, int] = {}  # kind → the query row chosen for the newest run
        self.request_id = 0
        self.pane: NeuronView | None = None  # made on first use, with its dock
        self.dock: QDockWidget | None = None
        self.requested.connect(worker.neuron)
        worker.neuron_ready.connect(self._on_answer)
        views.focus.row_clicked.connect(self.choose_query)

    def open(self) -> None:
        """View → Neuron: the pane's dock, made on first use as a tab beside the Decoding dock, shown and raised."""
        if self.dock is None:
            from ..views.neuron import NeuronView

            self.pane = NeuronView()
            self.pane.query_chosen.connect(self.choose_query)
            self.pane.hovered.connect(lambda text: self.views.status_bar.showMessage(text))
            self.dock = self.views.docks.beside_decoding("Neuron", self.pane)
            self.dock.visibilityChanged.connect(lambda _visible: self.refresh())
        self.dock.show()
        self.dock.raise_()
        self.refresh()

    @property
    def shown(self) -> bool:
        return self.pane is not None and self.dock.isVisible() and self.pane.isVisible()

    @property
    def state(self):
        """What the pane shows (a ``NeuronState``), or None."""
        return None if self.pane is None else self.pane.state

    def choose_query(self, row: int) -> None:
        if self.session.trace is not None:
            self.rows[self.session.selection.kind] = row
            self.refresh()

    def _key(self) -> tuple | None:
        session = self.session
        if session.result is None or session.request is None:
            return None
        return session.request.id, session.selection.hypothesis, session.result is session.run_result

    def refresh(self) -> None:
        """Draw the pane for the session's result and selection (asking the worker for its vectors first)."""
        key = self._key()
        if key is not None and key[0] != self.request_id:  # a newer run: the older runs' vectors and rows go
            self.request_id = key[0]
            self.answers = {k: v for k, v in self.answers.items() if k[0] == key[0]}
            self.asked = {job: k for job, k in self.asked.items() if k[0] == key[0]}
            self.rows = {}
        if not self.shown or key is None or self.session.trace is None or not self.session.trace.kinds:
            return
        answer = self.answers.get(key)
        if answer is None:
            if key not in self.asked.values():
                self._ask(key)
            self.pane.clear(WAITING)
            return
        if isinstance(answer, str):
            self.pane.clear(answer)
            return
        self._draw(answer)

    def clear(self, message: str) -> None:
        if self.pane is not None:
            self.pane.clear(message)

    def _draw(self, vectors) -> None:
        trace, selection = self.session.trace, self.session.selection
        row = self.rows.get(selection.kind, default_row(selection.kind, selection))
        state = neuron_state(vectors, trace, selection, query_row=row)
        if isinstance(state, str):
            self.pane.clear(state)
        else:
            self.pane.show_neuron(state, trace.query_tokens(selection.kind))

    def _ask(self, key: tuple) -> None:
        session = self.session
        request, result = session.request, session.result
        run = request.settings
        job = NeuronJob(session.new_job("neuron", of_models=True), request.id, key[1], text=run.text,
                        output=tuple(getattr(result, "token_ids", ()) or ()), src_lang=run.src_lang,
                        tgt_lang=run.tgt_lang, ablation=request.ablation if key[2] else NO_ABLATION, chat=run.chat)
        self.asked[job.id] = key
        self.requested.emit(job)

    def _on_answer(self, answer: NeuronAnswer) -> None:
        key = self.asked.pop(answer.job.id, None)
        if key is None or key[0] != self.request_id:
            return
        if answer.stopped is not None:
            return  # a newer job is on its way
        self.answers[key] = answer.value if not answer.line else answer.line
        self.refresh()
