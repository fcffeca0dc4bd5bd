"""Comparing with a second model (model B): opening it on the worker, its runs beside model A's, the Compare bar
and the three maps (A | B | B − A) in the focus view's place; the Demos menu's pairs open A (the opening feature's
plan), then B here."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtCore import QObject, Signal
from PySide6.QtWidgets import QFileDialog, QMenu, QWidget

from ...state.demos import compare_choices
from ...state.session import ModelInfo, Session
from ..dialogs import CHECKPOINT_FILTER
from ..layout import Views

if TYPE_CHECKING:
    from ..worker import ModelWorker
    from .opening import Opening
    from .viewing import Viewing


class Comparing(QObject):
    partner_requested = Signal(int, str, str)  # job id, path, device → worker (the model to compare with)
    partner_dropped = Signal(int)  # job id: stop comparing
    comparing_changed = Signal(bool)  # whether two models are compared now (File → Stop Comparing, Force B)

    def __init__(self, session: Session, views: Views, worker: ModelWorker, *, viewing: Viewing, opening: Opening,
                 demos: list[Path], parent: QWidget):
        super().__init__(parent)
        self.session, self.views, self.parent_widget = session, views, parent
        self.viewing, self.opening, self.demos = viewing, opening, demos
        self.partner_requested.connect(worker.load_partner)
        self.partner_dropped.connect(worker.drop_partner)
        worker.partner_loaded.connect(self._on_partner_loaded)
        worker.partner_failed.connect(self._on_partner_failed)
        worker.partner_finished.connect(self._on_partner_finished)
        views.compare_bar.stop_requested.connect(self.stop_comparing)
        views.model_panel.compare_chosen.connect(self.compare_with)
        opening.partner_planned.connect(self.compare_with)

    def fill_compare_menu(self, menu: QMenu) -> None:
        """File → Compare With: the demos and the recent files other than the open model, then Browse…."""
        from ..actions import make_action

        menu.clear()
        model = self.session.model.path if self.session.model is not None else None
        for title, paths in compare_choices(model, self.demos, self.opening.recent_files()):
            if paths:
                menu.addSection(title)
            for path in paths:
                menu.addAction(make_action(menu, Path(path).stem if title == "Demos" else str(path),
                                           lambda _=False, p=str(path): self.compare_with(p),
                                           tip=f"Compare the open model with {path}"))
        menu.addSeparator()
        menu.addAction(make_action(menu, "Browse…", lambda _=False: self.compare_dialog(),
                                   tip="Any checkpoint file to compare with"))

    def compare_dialog(self) -> None:
        if self.session.model is None:
            return
        path, _ = QFileDialog.getOpenFileName(self.parent_widget, "Compare with a checkpoint", "", CHECKPOINT_FILTER)
        if path:
            self.compare_with(path)

    def compare_with(self, path: str) -> None:
        """Open ``path`` as model B on the worker; once it is there, the sentence runs on both."""
        if self.session.model is None:
            self.views.show_error("Open a model first, then compare another one with it.")
            return
        # A demo's context menu made model B the Demos list's current item: the list marks the open model, A.
        self.opening.show_open_demo(self.session.model.path)
        job_id = self.session.new_partner_job()
        self.views.status_bar.showMessage(f"Opening {path} to compare…")
        self.partner_requested.emit(job_id, str(path), self.views.model_panel.device_name())

    def force_b_to_a(self) -> None:
        """Run the sentence again forced to model A's output (greedy or beam outputs that differ leave B − A
        empty): A decodes its own output again, B is decoded along it, token by token."""
        result = self.session.result
        if not self.session.comparing or result is None or self.session.model is None:
            return
        bar = self.views.input_bar
        forced = dataclasses.replace(bar.run_settings(), mode="forced", target=result.text)
        bar.show_run_settings(forced, self.session.model.max_len)
        self.viewing.run()

    def stop_comparing(self) -> None:
        self.session.stop_comparing()
        self.partner_dropped.emit(self.session.partner_job)
        self.show_comparing()
        self.viewing.show_output()
        self.viewing.refresh(rebuild=True)

    def _on_partner_loaded(self, job_id: int, info: ModelInfo) -> None:
        if not self.session.accept_partner(job_id, info):
            return
        self.views.status_bar.showMessage(f"Comparing with {info.path}", 5000)
        self.show_comparing()
        self.viewing.run()

    def _on_partner_failed(self, job_id: int, message: str) -> None:
        if job_id != self.session.partner_job:
            return
        self.views.status_bar.clearMessage()
        kept = f" — still showing {self.session.model.path.name}" if self.session.model else ""
        self.views.show_error(f"Cannot compare with it: {message}{kept}")

    def _on_partner_finished(self, request_id: int, result) -> None:
        if self.session.accept_partner_result(request_id, result):
            self.viewing.show_output()

    def show_comparing(self) -> None:
        views, comparing = self.views, self.session.comparing
        model, partner = self.session.model, self.session.partner
        views.compare_bar.show_text(f"Comparing model A ({model.path.stem}) with model B ({partner.path.stem}): "
                                    "one selection drives both" if comparing and model is not None else None)
        self.comparing_changed.emit(comparing)
        views.focus.setVisible(not comparing)
        views.compare_view.setVisible(comparing)
        views.grids.setVisible(not comparing)  # three maps need the width; the grids return with one model
