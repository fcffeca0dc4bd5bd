"""The Patching pane: a corrupted source to edit, the step and metric, Run, and the patching tables as heatmaps
(attnviz/state/patch_view.py computes what it shows): layers × positions of each residual stream with token labels,
layers × heads of each attention kind. A click on a cell selects it (outlined, as on the grids); the feature focuses
a clicked head in the main view."""

from __future__ import annotations

import html

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QRectF, Qt, Signal
from PySide6.QtWidgets import (QComboBox, QFrame, QGraphicsRectItem, QHBoxLayout, QLabel, QLineEdit, QPushButton,
                               QSpinBox, QVBoxLayout, QWidget)

from ...state.compare_view import DIVERGING_COLORMAP as DIVERGING  # blue (towards the corrupted run), red (clean)
from ...state.patch_view import EMPTY, PatchPanels
from .head_stats import PanelScroll
from .style import HIGHLIGHT
from .token_axis import TokenAxis

AUTO_STEP = -1  # the step box's "auto": where the greedy outputs first differ
PLOT_EXTRA = 60  # px a plot needs beyond its cells (axes, title)
MIN_CELL = 14  # px of a cell's height at the least
SPACING = 8  # px between two tables
MIN_SCROLL = 100  # px the tables keep in the smallest dock


class PatchingView(QWidget):
    run_requested = Signal(str, int, bool)  # corrupted source, step (AUTO_STEP: auto), the NLL metric
    estimate_changed = Signal(str)  # "exact" or "atp"
    cell_clicked = Signal(str, int, int)  # panel name, row (layer), column (position or head)
    hovered = Signal(str)
    export_requested = Signal()  # "Export…": the tables to an NPZ or CSV files

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.corrupt = QLineEdit()
        self.corrupt.setPlaceholderText("the source with one word changed (the same number of tokens)")
        self.corrupt.setToolTip("The corrupted source: the run's source with a word edited. Patching replaces each "
                                "position by the same position of the other run, so both need the same number of "
                                "tokens.")
        self.step = QSpinBox()
        self.step.setRange(AUTO_STEP, 4096)
        self.step.setSpecialValueText("auto")
        self.step.setValue(AUTO_STEP)
        self.step.setToolTip("The output step the logit difference is read at (auto: where the clean and corrupted "
                             "greedy outputs first differ)")
        self.metric = QComboBox()
        self.metric.addItem("logit difference", False)
        self.metric.addItem("NLL of the output", True)
        self.estimate = QComboBox()
        self.estimate.addItem("exact", "exact")
        self.estimate.addItem("AtP estimate", "atp")
        self.run = QPushButton("Run")
        self.run.setDefault(True)
        self.export = QPushButton("Export…")
        self.export.setToolTip("Save the tables: an NPZ holds every table (exact, AtP, raw; named as `attnviz patch "
                               "--json` names them), CSV the tables shown, one file each")
        self.export.setEnabled(False)
        self.export.clicked.connect(self.export_requested)
        bar = QHBoxLayout()
        bar.addWidget(QLabel("Corrupted:"))
        bar.addWidget(self.corrupt, 1)
        for label, widget in (("Step:", self.step), ("", self.metric), ("", self.estimate)):
            if label:
                bar.addWidget(QLabel(label))
            bar.addWidget(widget)
        bar.addWidget(self.run)
        bar.addWidget(self.export)
        self.message = QLabel(EMPTY)
        self.message.setWordWrap(True)
        self.message.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.graphics = pg.GraphicsLayoutWidget()
        self.scroll = PanelScroll()  # a small dock scrolls the tables rather than squeezing their cells unreadable
        self.scroll.setWidgetResizable(True)
        self.scroll.setFrameShape(QFrame.Shape.NoFrame)
        self.scroll.setWidget(self.graphics)
        self.scroll.setMinimumHeight(MIN_SCROLL)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(6, 4, 6, 4)
        layout.addLayout(bar)
        layout.addWidget(self.message)
        layout.addWidget(self.scroll, 1)
        self.state: PatchPanels | None = None
        self.plots: dict[str, tuple[pg.PlotItem, pg.ImageItem, QGraphicsRectItem]] = {}
        self.lut = pg.colormap.get(DIVERGING).getLookupTable(0.0, 1.0, 256)
        self.run.clicked.connect(self._on_run)
        self.corrupt.returnPressed.connect(self._on_run)
        self.estimate.currentIndexChanged.connect(lambda _: self.estimate_changed.emit(self.estimate.currentData()))
        self.graphics.scene().sigMouseClicked.connect(self._on_click)
        self.graphics.scene().sigMouseMoved.connect(self._on_move)

    def _on_run(self) -> None:
        self.run_requested.emit(self.corrupt.text(), self.step.value(), bool(self.metric.currentData()))

    def set_source(self, text: str) -> None:
        """Prefill the corrupted box with the run's source (kept when it is already an edit of another)."""
        self.corrupt.setText(text)

    def clear(self, message: str) -> None:
        self.state = None
        self.export.setEnabled(False)
        self.graphics.clear()
        self.plots = {}
        self.message.setText(html.escape(message))

    def show_patching(self, state: PatchPanels) -> None:
        """Draw ``state``: one heatmap per panel, stacked, each as tall as its layers need."""
        shapes = [(panel.name, panel.values.shape) for panel in state.panels]
        if self.state is None or shapes != [(p.name, p.values.shape) for p in self.state.panels]:
            self._build(state)
        self.state = state
        self.export.setEnabled(True)
        self.message.setText("<br>".join(html.escape(line) for line in state.lines))
        for panel in state.panels:
            plot, image, _ = self.plots[panel.name]
            plot.setTitle(html.escape(panel.title), size="9pt")
            rows, columns = panel.values.shape
            image.setImage(np.nan_to_num(panel.values.astype(np.float32)), levels=(state.low, state.high))
            image.setRect(QRectF(-0.5, -0.5, columns, rows))  # cell (r, c) is centred on (c, r), as on the heatmap
            plot.getAxis("bottom").set_tokens(list(panel.column_labels))
            plot.getAxis("left").set_tokens(list(panel.row_labels))
            self._fit_ticks(plot, columns, rows)
        self.colour_bar.setLevels(values=(state.low, state.high))
        self.select(state.selected)

    def _build(self, state: PatchPanels) -> None:
        """The residual streams' tables stacked in a wide column, the heads' tables in a narrow one beside them, the
        colour bar at the right."""
        self.graphics.clear()
        self.plots = {}
        placed = {0: 0, 1: 0}  # column → tables placed in it
        heights = {0: 0, 1: 0}
        for panel in state.panels:
            column = 0 if panel.kind is None else 1
            axes = {name: TokenAxis(name) for name in ("left", "bottom")}
            plot = self.graphics.addPlot(row=placed[column], col=column, axisItems=axes)
            placed[column] += 1
            plot.setMenuEnabled(False)
            plot.setMouseEnabled(False, False)
            plot.hideButtons()
            plot.invertY(True)
            image = pg.ImageItem(axisOrder="row-major")
            image.setLookupTable(self.lut)
            plot.addItem(image)
            outline = QGraphicsRectItem(0, 0, 1, 1)
            outline.setPen(pg.mkPen(HIGHLIGHT, width=2, cosmetic=True))
            outline.setVisible(False)
            plot.addItem(outline)
            rows, columns = panel.values.shape
            plot.setRange(QRectF(-0.5, -0.5, columns, rows), padding=0)
            plot.setMinimumHeight(PLOT_EXTRA + rows * MIN_CELL)
            heights[column] += PLOT_EXTRA + rows * MIN_CELL + SPACING
            self.plots[panel.name] = (plot, image, outline)
            plot.vb.sigResized.connect(lambda *_, p=plot, c=columns, r=rows: self._fit_ticks(p, c, r))
        bar = pg.ColorBarItem(values=(state.low, state.high), colorMap=pg.colormap.get(DIVERGING), interactive=False,
                              width=10, colorMapMenu=False)
        self.graphics.addItem(bar, row=0, col=2, rowspan=max(placed.values()))
        self.colour_bar = bar
        grid = self.graphics.ci.layout
        grid.setColumnStretchFactor(0, 3)
        grid.setColumnStretchFactor(1, 1)
        self.graphics.setMinimumHeight(max(heights.values()))

    def _fit_ticks(self, plot: pg.PlotItem, columns: int, rows: int) -> None:
        """Label as many tokens as the cells have room for (the token axes' own layout)."""
        box = plot.vb.boundingRect()
        plot.getAxis("bottom").fit((-0.5, columns - 0.5), box.width() / max(columns, 1))
        plot.getAxis("left").fit((-0.5, rows - 0.5), box.height() / max(rows, 1))

    def select(self, cell: tuple[str, int, int] | None) -> None:
        """Outline ``(panel, row, column)`` (None: no cell)."""
        for name, (_, _, outline) in self.plots.items():
            outline.setVisible(cell is not None and cell[0] == name)
            if cell is not None and cell[0] == name:
                outline.setRect(cell[2] - 0.5, cell[1] - 0.5, 1, 1)

    def cell_at(self, scene_position) -> tuple[str, int, int] | None:
        for name, (plot, image, _) in self.plots.items():
            if plot.vb.sceneBoundingRect().contains(scene_position):
                point = plot.vb.mapSceneToView(scene_position)
                row, column = int(np.floor(point.y() + 0.5)), int(np.floor(point.x() + 0.5))
                rows, columns = image.image.shape[:2] if image.image is not None else (0, 0)
                if 0 <= row < rows and 0 <= column < columns:
                    return name, row, column
        return None

    def describe(self, cell: tuple[str, int, int]) -> str:
        name, row, column = cell
        panel = next(panel for panel in self.state.panels if panel.name == name)
        return (f"{panel.title}, {panel.row_labels[row]}, {panel.column_labels[column]}: "
                f"{panel.values[row, column]:.4g}")

    def _on_click(self, event) -> None:
        cell = self.cell_at(event.scenePos())
        if cell is not None:
            self.cell_clicked.emit(*cell)

    def _on_move(self, position) -> None:
        cell = self.cell_at(position)
        if cell is not None and self.state is not None:
            self.hovered.emit(self.describe(cell))
