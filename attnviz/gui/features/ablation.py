"""Switching heads off (models/nn/ablation.py): the grids' toggles, the Ablation bar's restore and "show the
original", and the run of the same input with every head on that arrives beside each ablated run."""

from __future__ import annotations

from typing import TYPE_CHECKING

from PySide6.QtCore import QObject

from ...state import viewmodel
from ...state.session import Session
from ..layout import Views

if TYPE_CHECKING:
    from ..worker import ModelWorker
    from .viewing import Viewing


class Ablation(QObject):
    def __init__(self, session: Session, views: Views, worker: ModelWorker, *, viewing: Viewing,
                 parent: QObject | None = None):
        super().__init__(parent)
        self.session, self.views, self.viewing = session, views, viewing
        views.head_grid.head_toggled.connect(lambda _, head: self.toggle_head(self.session.selection.layer, head))
        views.head_grid.layer_toggled.connect(lambda _: self.toggle_layer(self.session.selection.layer))
        views.model_view.head_toggled.connect(self.toggle_head)
        views.model_view.layer_toggled.connect(self.toggle_layer)
        views.ablation_bar.restore_requested.connect(self.restore_heads)
        views.ablation_bar.compare_toggled.connect(self.show_original)
        worker.original.connect(self._on_original)
        viewing.run_arrived.connect(self.show_ablation)  # a whole layer's entry is counted in heads once known

    def toggle_head(self, layer: int, head: int) -> None:
        """Switch a head of the selected kind off or on, and run again."""
        if self.session.trace is None:
            return
        self.session.toggle_head(self.session.selection.kind, layer, head)
        self.show_ablation()
        self.viewing.run()

    def toggle_layer(self, layer: int) -> None:
        """Switch every head of a layer of the selected kind off (or on again), and run again."""
        if self.session.trace is None:
            return
        self.session.toggle_layer(self.session.selection.kind, layer)
        self.show_ablation()
        self.viewing.run()

    def restore_heads(self) -> None:
        self.session.restore_heads()
        self.show_ablation()
        self.viewing.run()

    def show_original(self, on: bool) -> None:
        """Show the same input's run with every head on in every view (or this run's again)."""
        self.session.show_original = on
        self.session.clamp()
        self.viewing.show_output()  # its source contribution is the shown run's
        self.viewing.refresh(rebuild=True)

    def show_ablation(self) -> None:
        self.views.ablation_bar.show_state(viewmodel.ablation_state(self.session.ablation, self.session.trace),
                                           self.session.show_original)

    def _on_original(self, request_id: int, result) -> None:
        if self.session.accept_original(request_id, result):
            self.viewing.show_output()
