"""The comparison: model A, model B and B − A side by side, three HeatmapViews drawing a CompareState."""

from __future__ import annotations

import html

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QHBoxLayout, QLabel, QToolButton, QWidget

from ...state.compare_view import DIVERGING_COLORMAP, ComparePane, CompareState
from .heatmap import HeatmapView


class CompareView(QWidget):
    hovered = Signal(str)  # a cell's description, for the status bar

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        self.a, self.b, self.diff = HeatmapView(), HeatmapView(), HeatmapView()
        for pane in (self.a, self.b, self.diff):
            layout.addWidget(pane, 1)
            pane.title.setWordWrap(True)  # "model B has no …" and the reasons fit a third of the width
            pane.setMinimumWidth(120)
            pane.legend.hide()  # the three maps stay the same height (the single view keeps its legend)
            pane.readout.hide()
        for pane in (self.a, self.b, self.diff):
            pane.hovered.connect(self.hovered)
        self.diff.set_colormap(DIVERGING_COLORMAP)

    def set_colormap(self, name: str) -> None:
        """Model A's and B's colormap; the difference stays on its diverging one."""
        self.a.set_colormap(name)
        self.b.set_colormap(name)

    def set_masks_visible(self, visible: bool) -> None:
        for pane in (self.a, self.b, self.diff):
            pane.set_masks_visible(visible)

    def show_compare(self, state: CompareState) -> None:
        for view, pane in ((self.a, state.a), (self.b, state.b), (self.diff, state.diff)):
            self._show(view, pane)

    @staticmethod
    def _show(view: HeatmapView, pane: ComparePane) -> None:
        if pane.state is None:
            view.clear(html.escape(pane.message, quote=False))  # plain words: a quoted <s> is no strike-through
        else:
            view.show_heatmap(pane.state)

    def clear(self, message: str) -> None:
        for view in (self.a, self.b, self.diff):
            view.clear(message)


class CompareBar(QWidget):
    """"Comparing A with B" and a × that stops comparing; shown only while comparing."""

    stop_requested = Signal()

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(6, 2, 6, 2)
        self.label = QLabel()
        self.close_button = QToolButton()
        self.close_button.setText("×")
        self.close_button.setToolTip("Stop comparing: back to one model")
        self.close_button.setAutoRaise(True)
        layout.addWidget(self.label, 1)
        layout.addWidget(self.close_button)
        self.close_button.clicked.connect(self.stop_requested)
        self.hide()

    def show_text(self, text: str | None) -> None:
        """The bar's line, or None to hide it."""
        self.setVisible(text is not None)
        self.label.setText(text or "")
