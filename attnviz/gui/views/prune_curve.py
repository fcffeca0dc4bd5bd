"""The pruning curve under the Head importance grid: the score as heads are switched off cumulatively in three
orders, with a legend (the key under it, which also reads out the point under the pointer) and axis titles in
the metric's unit; a button asks for the curve once heads are scored, another exports it. It draws what
attnviz/state/prune_view.py computed."""

from __future__ import annotations

import html

import pyqtgraph as pg
from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QHBoxLayout, QLabel, QPushButton, QSizePolicy, QSpinBox, QVBoxLayout, QWidget

from ...state.prune_view import CurveReadout, PruneCurveState, curve_readout
from .style import HIGHLIGHT

PLOT_MIN_HEIGHT = 110  # px: three curves and their legend stay readable in a 768-pixel screen's dock
AXIS_FONT = {"font-size": "7pt"}  # a long title ("NLL (nats/token)") fits a low plot
WAITING = "Score the heads first: the pruning curve switches them off in the order of that ranking."


class PruneCurveView(QWidget):
    requested = Signal()  # the "Pruning curve" button
    export_requested = Signal()

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.button = QPushButton("Pruning curve")
        self.button.setToolTip("Switch the heads off one after another, least important first, most important "
                               "first and in a random order, and plot the score")
        self.button.clicked.connect(self.requested)
        self.seed = QSpinBox()
        self.seed.setRange(0, 2**31 - 1)
        self.seed.setPrefix("seed ")
        self.seed.setToolTip("The seed of the random order (attnviz importance --seed); Pruning curve asks again")
        self.export = QPushButton("Export…")
        self.export.setToolTip("Save the pruning curve as PNG or SVG")
        self.export.clicked.connect(self.export_requested)
        self.message = QLabel(WAITING)
        self.message.setWordWrap(True)
        self.plot = pg.PlotWidget()
        self.plot.setMinimumHeight(PLOT_MIN_HEIGHT)
        # a plot's size hint would make the dock scroll the grid away: it takes the room the splitter gives it
        self.plot.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Ignored)
        self.plot.setMenuEnabled(False)
        self.plot.showGrid(x=True, y=True, alpha=0.2)
        self.marker = pg.InfiniteLine(angle=90, pen=pg.mkPen(HIGHLIGHT, width=1, style=Qt.PenStyle.DashLine))
        self.marker.setVisible(False)
        self.plot.addItem(self.marker, ignoreBounds=True)
        self.curves: dict[str, pg.PlotDataItem] = {}
        self.readout = QLabel("")  # the legend: each line's colour and name, and its score under the pointer
        self.readout.setWordWrap(True)
        self.readout.setTextFormat(Qt.TextFormat.RichText)
        # two lines in a narrow dock: a splitter reads a wrapped label's one-line minimum, and the key then covers
        # the plot's axis title
        self.readout.setMinimumHeight(2 * self.readout.fontMetrics().lineSpacing() + 2)
        self.state: PruneCurveState | None = None
        self.plot.scene().sigMouseMoved.connect(self._on_move)
        buttons = QHBoxLayout()
        buttons.addWidget(self.button)
        buttons.addWidget(self.seed)
        buttons.addWidget(self.export)
        buttons.addStretch(1)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addLayout(buttons)
        layout.addWidget(self.message)
        layout.addWidget(self.plot, 1)
        layout.addWidget(self.readout)
        self.clear(WAITING, ready=False)

    def clear(self, message: str, *, ready: bool) -> None:
        """No curve: ``message`` says why; ``ready``: heads are scored, so a curve can be asked for."""
        self.state = None
        for item in self.curves.values():
            self.plot.removeItem(item)
        self.curves = {}
        self.marker.setVisible(False)
        self.readout.setText("")
        self.plot.setVisible(False)
        self.export.setEnabled(False)
        self.button.setEnabled(ready)
        self.show_message(message)

    def show_message(self, text: str) -> None:
        self.message.setText(html.escape(text))

    def show_curves(self, state: PruneCurveState) -> None:
        self.clear(state.summary, ready=True)
        self.state = state
        for line in state.lines:
            self.curves[line.order] = self.plot.plot(range(len(line.scores)), line.scores, name=line.label,
                                                     pen=pg.mkPen(line.colour, width=2), symbol="o", symbolSize=5,
                                                     symbolBrush=line.colour, symbolPen=None)
        self.plot.setLabel("bottom", state.x_title, **AXIS_FONT)
        self.plot.setLabel("left", state.y_title, **AXIS_FONT)
        self.plot.setXRange(0, state.heads, padding=0.03)
        self.plot.enableAutoRange(axis="y")
        self.plot.setVisible(True)
        self.export.setEnabled(True)
        self.show_readout(curve_readout(state))
        self.readout.setToolTip("Point at the plot for each order's score with that many heads off")

    def show_readout(self, readout: CurveReadout) -> None:
        entries = [f"<span style='color:{colour}'>━</span> {html.escape(label)}"
                   + (f" <b>{html.escape(score)}</b>" if score else "") for colour, label, score in readout.entries]
        self.readout.setText(f"{html.escape(readout.heading)} " + " · ".join(entries))

    def _on_move(self, position) -> None:
        if self.state is None or not self.plot.plotItem.vb.sceneBoundingRect().contains(position):
            return
        x = self.plot.plotItem.vb.mapSceneToView(position).x()
        self.marker.setPos(round(min(max(x, 0), self.state.heads)))
        self.marker.setVisible(True)
        self.show_readout(curve_readout(self.state, x))
