"""The Lens pane in the window (View → Lens): a dock made on first use, a tab beside the Decoding dock, showing the
logit lens of the selected hypothesis (a layers × steps map, the chosen token's rank as its colour) and DecoderLens
(a table per encoder layer). The worker computes both from the result's traced pass when the pane is first shown for
it (a ``lens`` job: a newer run or model overtakes it); this feature keeps them while that run is the newest and draws
the selected hypothesis with its selected step outlined (attnviz/state/lens_view.py computes what it shows).

The viewing feature calls :meth:`Lens.refresh` after each redraw, so the pane follows the selected hypothesis and
step; a click on a step's column asks viewing to select that step (``step_chosen``, which viewing connects to).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from PySide6.QtCore import QObject, Signal
from PySide6.QtWidgets import QDockWidget

from models.nn.ablation import NO_ABLATION

from ...state.lens_view import WAITING, LensAnswer, LensJob, lens_state
from ...state.session import Session
from ..layout import Views

if TYPE_CHECKING:
    from ..views.lens import LensView
    from ..worker import ModelWorker


class Lens(QObject):
    requested = Signal(object)  # LensJob → worker
    step_chosen = Signal(int)  # a step's column was clicked (viewing selects it)

    def __init__(self, session: Session, views: Views, worker: ModelWorker, parent: QObject | None = None):
        super().__init__(parent)
        self.session, self.views = session, views
        self.answers: dict[tuple, object] = {}  # (request id, hypothesis, run's own) → LensReadings or a line
        self.asked: dict[int, tuple] = {}  # job id → the key it was asked for, until answered
        self.request_id = 0
        self.pane: LensView | None = None  # made on first use, with its dock
        self.dock: QDockWidget | None = None
        self.requested.connect(worker.lens)
        worker.lens_ready.connect(self._on_answer)

    def open(self) -> None:
        """View → Lens: the pane's dock, made on first use as a tab beside the Decoding dock, shown and raised."""
        if self.dock is None:
            from ..views.lens import LensView

            self.pane = LensView()
            self.pane.hovered.connect(lambda text: self.views.status_bar.showMessage(text))
            self.pane.step_clicked.connect(self.step_chosen)
            self.dock = self.views.docks.beside_decoding("Lens", self.pane)
            self.dock.visibilityChanged.connect(lambda _visible: self.refresh())
        self.dock.show()
        self.dock.raise_()
        self.refresh()

    @property
    def shown(self) -> bool:
        return self.pane is not None and self.dock.isVisible() and self.pane.isVisible()

    @property
    def state(self):
        """What the pane shows (a ``LensState``), or None."""
        return None if self.pane is None else self.pane.state

    def _key(self) -> tuple | None:
        session = self.session
        if session.result is None or session.request is None or not getattr(session.result, "token_ids", None):
            return None
        return session.request.id, session.selection.hypothesis, session.result is session.run_result

    def refresh(self) -> None:
        """Draw the pane for the session's result and selection (asking the worker for its readings first)."""
        key = self._key()
        if key is not None and key[0] != self.request_id:  # a newer run: the older runs' readings go
            self.request_id = key[0]
            self.answers = {k: v for k, v in self.answers.items() if k[0] == key[0]}
            self.asked = {job: k for job, k in self.asked.items() if k[0] == key[0]}
        if not self.shown:
            return
        if key is None:
            self.pane.clear("Lens: run a sentence to read what each layer predicts.")
            return
        answer = self.answers.get(key)
        if answer is None:
            if key not in self.asked.values():
                self._ask(key)
            self.pane.clear(WAITING)
        elif isinstance(answer, str):
            self.pane.clear(answer)
        else:
            self.pane.show_lens(lens_state(answer, step=self.session.selection.step))

    def clear(self, message: str) -> None:
        if self.pane is not None:
            self.pane.clear(message)

    def _ask(self, key: tuple) -> None:
        session = self.session
        request, result = session.request, session.result
        run = request.settings
        job = LensJob(session.new_job("lens", of_models=True), request.id, key[1], text=run.text,
                      output=tuple(result.token_ids), src_lang=run.src_lang, tgt_lang=run.tgt_lang,
                      ablation=request.ablation if key[2] else NO_ABLATION, chat=run.chat)
        self.asked[job.id] = key
        self.requested.emit(job)

    def _on_answer(self, answer: LensAnswer) -> None:
        key = self.asked.pop(answer.job.id, None)
        if key is None or key[0] != self.request_id or answer.stopped is not None:
            return  # an older run's, or overtaken: a newer job is on its way
        self.answers[key] = answer.value if not answer.line else answer.line
        self.refresh()
