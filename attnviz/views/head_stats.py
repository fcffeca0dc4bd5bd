"""The Head statistics view: one small layers × heads heatmap per statistic (heads across, layers down), a
run and kind to choose, and the sentences where a clicked head is most and least typical (double-click one
to run it). It draws what attnviz/stats_view.py computed."""

from __future__ import annotations

import html

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QRectF, Qt, Signal
from PySide6.QtWidgets import (QComboBox, QGraphicsRectItem, QHBoxLayout, QLabel, QListWidget, QListWidgetItem,
                               QSplitter, QVBoxLayout, QWidget)

from ..stats_view import HeadStatsState, TypicalState
from .style import DEFAULT_COLORMAP, HIGHLIGHT, lookup_table

COLUMNS = 3  # panels per row
SENTENCE_ROLE = Qt.ItemDataRole.UserRole


class HeadStatsView(QWidget):
    head_clicked = Signal(int, int)  # layer, head
    choice_changed = Signal(str, str)  # run, kind
    sentence_chosen = Signal(str)  # a corpus sentence's source text

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.run = QComboBox()
        self.kind = QComboBox()
        for combo in (self.run, self.kind):
            combo.currentIndexChanged.connect(self._on_choice)
        self.summary = QLabel("View → Corpus head statistics… runs a PAIRS.tsv corpus through the model.")
        self.summary.setWordWrap(True)
        self.panels = pg.GraphicsLayoutWidget()
        self.panels.setMinimumHeight(160)
        self.panels.scene().sigMouseClicked.connect(self._on_click)
        self.sentences = QListWidget()
        self.sentences.itemDoubleClicked.connect(self._on_double_click)
        self.head_title = QLabel("")
        self.head_title.setWordWrap(True)
        self.plots: list[tuple[pg.PlotItem, pg.ImageItem, QGraphicsRectItem]] = []
        self.shape = (0, 0)
        self.names: list[str] = []
        self.lut = lookup_table(DEFAULT_COLORMAP)
        choices = QHBoxLayout()
        choices.addWidget(QLabel("Run:"))
        choices.addWidget(self.run, 1)
        choices.addWidget(QLabel("Attention:"))
        choices.addWidget(self.kind, 1)
        lower = QWidget()
        lower_layout = QVBoxLayout(lower)
        lower_layout.setContentsMargins(0, 0, 0, 0)
        lower_layout.addWidget(self.head_title)
        lower_layout.addWidget(self.sentences, 1)
        splitter = QSplitter(Qt.Orientation.Vertical)
        splitter.addWidget(self.panels)
        splitter.addWidget(lower)
        splitter.setSizes([360, 200])
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.addLayout(choices)
        layout.addWidget(self.summary)
        layout.addWidget(splitter, 1)

    # --- drawing ------------------------------------------------------------------------------------
    def show_message(self, text: str) -> None:
        self.summary.setText(html.escape(text))

    def show_stats(self, state: HeadStatsState) -> None:
        self._fill(self.run, state.runs, state.run)
        self._fill(self.kind, state.kinds, state.kind)
        self.summary.setText(html.escape(state.summary))
        self._build(state)
        for (plot, image, _), panel in zip(self.plots, state.panels):
            plot.setTitle(f"{panel.name} <span style='font-size:7pt'>({panel.levels[1]:.2g} max)</span>"
                          if panel.name == "entropy" else panel.name, size="9pt")
            plot.setToolTip(panel.description)
            image.setImage(np.ascontiguousarray(panel.matrix, dtype=np.float32), autoLevels=False, levels=panel.levels)
            image.setRect(QRectF(0, 0, state.heads, state.layers))
        self.select(state.selected)

    def _fill(self, combo: QComboBox, items: list[tuple[str, str]], current: str) -> None:
        combo.blockSignals(True)
        if [combo.itemData(i) for i in range(combo.count())] != [value for value, _ in items]:
            combo.clear()
            for value, label in items:
                combo.addItem(label, value)
        combo.setCurrentIndex(combo.findData(current))
        combo.blockSignals(False)

    def _build(self, state: HeadStatsState) -> None:
        """Panels are made again only when their number or shape changes."""
        names = [panel.name for panel in state.panels]
        if ((state.layers, state.heads), names) == (self.shape, self.names):
            return
        self.panels.clear()
        self.plots, self.shape, self.names = [], (state.layers, state.heads), names
        for index in range(len(state.panels)):
            plot = self.panels.addPlot(row=index // COLUMNS, col=index % COLUMNS)
            plot.setMenuEnabled(False)
            plot.setMouseEnabled(False, False)
            plot.hideButtons()
            plot.invertY(True)
            plot.getAxis("bottom").setTicks([[(h + 0.5, str(h)) for h in range(state.heads)]])
            plot.getAxis("left").setTicks([[(layer + 0.5, f"L{layer}") for layer in range(state.layers)]])
            image = pg.ImageItem(axisOrder="row-major")
            image.setLookupTable(self.lut)
            plot.addItem(image)
            outline = QGraphicsRectItem(0, 0, 1, 1)
            outline.setPen(pg.mkPen(HIGHLIGHT, width=2, cosmetic=True))
            outline.setVisible(False)
            plot.addItem(outline)
            plot.setRange(QRectF(0, 0, state.heads, state.layers), padding=0)
            self.plots.append((plot, image, outline))

    def select(self, head: tuple[int, int] | None) -> None:
        """Outline the chosen (layer, head) on every panel."""
        for _, _, outline in self.plots:
            outline.setVisible(head is not None)
            if head is not None:
                outline.setRect(head[1], head[0], 1, 1)

    def show_typical(self, state: TypicalState | None) -> None:
        self.sentences.clear()
        self.head_title.setText("" if state is None else html.escape(state.title))
        if state is None:
            return
        for heading, entries in (("Most typical", state.most), ("Least typical", state.least)):
            header = QListWidgetItem(heading)
            header.setFlags(Qt.ItemFlag.ItemIsEnabled)  # a heading: not selectable, not greyed out
            font = header.font()
            font.setBold(True)
            header.setFont(font)
            self.sentences.addItem(header)
            for entry in entries:
                item = QListWidgetItem(f"#{entry.index + 1}  {entry.source}  →  {entry.target}   (entropy {entry.value:.3f})")
                item.setData(SENTENCE_ROLE, entry.source)
                item.setToolTip("Double-click to run this sentence")
                self.sentences.addItem(item)

    def show_note(self, text: str) -> None:
        """One line about the clicked head, in place of its typical sentences (head importance has none)."""
        self.sentences.clear()
        self.head_title.setText(html.escape(text))

    def set_sentences_visible(self, visible: bool) -> None:
        self.sentences.setVisible(visible)

    def set_colormap(self, name: str) -> None:
        self.lut = lookup_table(name)
        for _, image, _ in self.plots:
            image.setLookupTable(self.lut)

    # --- input --------------------------------------------------------------------------------------
    def head_at(self, scene_position) -> tuple[int, int] | None:
        """The (layer, head) under a point of the scene, on any panel."""
        for plot, _, _ in self.plots:
            if plot.vb.sceneBoundingRect().contains(scene_position):
                point = plot.vb.mapSceneToView(scene_position)
                layer, head = int(np.floor(point.y())), int(np.floor(point.x()))
                if 0 <= layer < self.shape[0] and 0 <= head < self.shape[1]:
                    return layer, head
        return None

    def _on_click(self, event) -> None:
        head = self.head_at(event.scenePos())
        if head is not None:
            self.head_clicked.emit(*head)

    def _on_choice(self) -> None:
        if self.run.currentData() is not None and self.kind.currentData() is not None:
            self.choice_changed.emit(self.run.currentData(), self.kind.currentData())

    def _on_double_click(self, item: QListWidgetItem) -> None:
        source = item.data(SENTENCE_ROLE)
        if source:
            self.sentence_chosen.emit(source)
