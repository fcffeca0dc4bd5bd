"""Presentation mode: full screen, every font larger, the model panel, grids and corpus panels hidden, the decoding
steps beside the heatmap; the arrow keys walk the decoding steps (← →) and the layers (↑ ↓), Esc or F11 ends it."""

from __future__ import annotations

from PySide6.QtCore import QObject, Qt
from PySide6.QtWidgets import QApplication

PRESENTATION_FONT_SCALE = 1.6  # presentation mode: text readable from the back of a classroom


class Presenting(QObject):
    def __init__(self, window):
        super().__init__(window)
        self.window = window
        self.before: dict | None = None  # while presenting: what to restore (window state, fonts, full screen)

    @property
    def on(self) -> bool:
        return self.before is not None

    def toggle(self) -> None:
        self.set_presenting(not self.on)

    def set_presenting(self, on: bool) -> None:
        if on == self.on:
            return
        if on:
            self._start()
        else:
            self._end()
        for action in self.window.named_actions["presenting"]:  # the bare keys act only while presenting
            action.setEnabled(on)
        self.window.named_actions["present"].setChecked(on)
        self.window.viewing.refresh(rebuild=True)

    def _start(self) -> None:
        window, app = self.window, QApplication.instance()
        self.before = {"state": window.saveState(), "font": app.font(), "maximized": window.isMaximized(),
                       "full_screen": window.isFullScreen()}
        font = app.font()
        font.setPointSizeF(font.pointSizeF() * PRESENTATION_FONT_SCALE)
        app.setFont(font)
        window.focus.set_tick_font(app.font())
        # The Decoding dock stays: its steps and next-token chart are what a class follows step by step.
        for dock in (window.model_dock, *window.docks.panel_docks):
            dock.hide()
        window.grids.hide()
        # Beside the heatmap, where the grids were: under it, the dock would take the heatmap's height.
        window.addDockWidget(Qt.DockWidgetArea.RightDockWidgetArea, window.decoding_dock)
        window.showFullScreen()
        window.resizeDocks([window.decoding_dock], [window.width() * 2 // 5], Qt.Orientation.Horizontal)
        window.focus.setFocus()
        window.statusBar().showMessage("Presenting: ← → steps, ↑ ↓ layers, Esc ends", 8000)

    def _end(self) -> None:
        window, saved, self.before = self.window, self.before, None
        QApplication.instance().setFont(saved["font"])
        window.focus.set_tick_font(None)
        window.grids.setVisible(not window.session.comparing)  # the comparison keeps the grids aside
        window.restoreState(saved["state"])
        if not saved["full_screen"]:
            window.showMaximized() if saved["maximized"] else window.showNormal()
