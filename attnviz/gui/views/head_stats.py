"""The Head statistics view: one small layers × heads heatmap per statistic (heads across, layers down), a
run and kind to choose, and the sentences where a clicked head is most and least typical (double-click one
to run it). It draws what attnviz/state/stats_view.py computed."""

from __future__ import annotations

import html

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QRectF, QSize, Qt, Signal
from PySide6.QtGui import QFont, QFontMetrics
from PySide6.QtWidgets import (QComboBox, QFrame, QGraphicsRectItem, QHBoxLayout, QLabel, QListWidget,
                               QListWidgetItem, QScrollArea, QSplitter, QVBoxLayout, QWidget)

from ...state.stats_view import HeadStatsState, StatPanel, TypicalState
from .style import DEFAULT_COLORMAP, HIGHLIGHT, lookup_table

SENTENCE_ROLE = Qt.ItemDataRole.UserRole
CELL_FONT_POINTS = 7
CELL_PADDING = 3  # px kept free around a cell's number
COLOUR_BAR_HEIGHT = 30  # px: the bar and its tick labels
PLOT_EXTRA = 44  # px a panel spends above and below its cells: title, head numbers
PANEL_ROW_EXTRA = PLOT_EXTRA + COLOUR_BAR_HEIGHT + 12  # and its colour bar, and the spacing between rows
PANEL_COLUMN_EXTRA = 36  # px a panel spends on its layer names and the spacing
MIN_CELL_HEIGHT = 16  # px: a layer's row stays tall enough for its numbers (the panels scroll instead)
PANEL_MIN_WIDTH = 120  # px: a panel's title and its colour bar's numbers need about this much
PLAIN_UNITS = ("weight",)  # attention weight, 0–1 like every map of the window: the bar says enough


def panel_title(panel: StatPanel) -> str:
    """The statistic's name, and its unit where it is not a plain attention weight (entropy's nats)."""
    if not panel.unit or panel.unit in PLAIN_UNITS or panel.unit == panel.name:
        return html.escape(panel.name)
    return f"{html.escape(panel.name)} <span style='font-size:7pt'>· {html.escape(panel.unit)}</span>"


def panel_columns(count: int, shape: tuple[int, int], size: tuple[float, float]) -> int:
    """How many panels per row give the largest cells (``shape``: layers, heads) in ``size`` (width, height)
    px: a wide, low dock lays them in one row, a tall, narrow one stacks them."""
    layers, heads = shape
    width, height = size

    def cell(columns: int) -> float:
        rows = -(-count // columns)
        return min((width / columns - PANEL_COLUMN_EXTRA) / max(heads, 1),
                   (height / rows - PANEL_ROW_EXTRA) / max(layers, 1))

    fitting = [columns for columns in range(2, count + 1) if width / columns >= PANEL_MIN_WIDTH]
    return max([1, *fitting], key=cell)


class PanelScroll(QScrollArea):
    """Holds the panels' canvas, scrolling it when a small dock cannot give every row readable cells; says
    when its size changes, so the panels can be laid out again."""

    resized = Signal()

    def sizeHint(self) -> QSize:
        """No taller than its minimum: the maps scroll here, not the whole panel in its dock (which would scroll
        what lies under them, the importance panel's pruning curve, out of a small screen)."""
        hint = super().sizeHint()
        return QSize(hint.width(), self.minimumHeight())

    def resizeEvent(self, event) -> None:
        super().resizeEvent(event)
        self.resized.emit()


def text_colour(lut: np.ndarray, fraction: float) -> tuple[int, int, int]:
    """Black on a light cell, white on a dark one: ``fraction`` is where the cell's colour sits in ``lut``."""
    index = int(np.clip(np.nan_to_num(fraction), 0.0, 1.0) * (len(lut) - 1))
    red, green, blue = (float(channel) for channel in lut[index][:3])
    return (0, 0, 0) if 0.299 * red + 0.587 * green + 0.114 * blue > 140 else (255, 255, 255)


def fitting_texts(texts: tuple[list[list[str]], ...], cell: tuple[float, float],
                  metrics: QFontMetrics) -> list[list[str]] | None:
    """The first (longest) writing of the cells whose every text fits a cell of ``cell`` (width, height) px."""
    width, height = cell
    if metrics.height() > height:
        return None
    for candidate in texts:
        widest = max((metrics.horizontalAdvance(text) for row in candidate for text in row), default=0)
        if widest + 2 * CELL_PADDING <= width:
            return candidate
    return None


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
            # a long choice ("chrF / exact match, decoding again") elides instead of widening a narrow dock
            combo.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
            combo.setMinimumContentsLength(8)
        self.summary = QLabel("View → Corpus head statistics… runs a PAIRS.tsv corpus through the model.")
        self.summary.setWordWrap(True)
        self.summary.setTextFormat(Qt.TextFormat.RichText)  # escaped text: an apostrophe shows as itself, not &#x27;
        self.panels = pg.GraphicsLayoutWidget()
        self.panel_scroll = PanelScroll()
        self.panel_scroll.setWidget(self.panels)
        self.panel_scroll.setWidgetResizable(True)
        self.panel_scroll.setFrameShape(QFrame.Shape.NoFrame)
        self.panel_scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.panel_scroll.setMinimumHeight(120)
        self.panel_scroll.resized.connect(self._relayout)
        self.panels.scene().sigMouseClicked.connect(self._on_click)
        self.sentences = QListWidget()
        self.sentences.itemDoubleClicked.connect(self._on_double_click)
        self.head_title = QLabel("")
        self.head_title.setWordWrap(True)
        self.head_title.setTextFormat(Qt.TextFormat.RichText)
        self.plots: list[tuple[pg.PlotItem, pg.ImageItem, QGraphicsRectItem]] = []
        self.colour_bars: list[pg.ColorBarItem] = []
        self.cell_labels: list[list[pg.TextItem]] = []  # per panel, row by row
        self.shape = (0, 0)
        self.names: list[str] = []
        self.columns = 0
        self.state: HeadStatsState | None = None
        self.colormap = DEFAULT_COLORMAP
        self.lut = lookup_table(DEFAULT_COLORMAP)
        self.cell_font = QFont()
        self.cell_font.setPointSize(CELL_FONT_POINTS)
        choices = QHBoxLayout()
        self.run_label = QLabel("Run:")
        choices.addWidget(self.run_label)
        choices.addWidget(self.run, 1)
        choices.addWidget(QLabel("Attention:"))
        choices.addWidget(self.kind, 1)
        lower = QWidget()
        lower_layout = QVBoxLayout(lower)
        lower_layout.setContentsMargins(0, 0, 0, 0)
        lower_layout.addWidget(self.head_title)
        lower_layout.addWidget(self.sentences, 1)
        self.splitter = splitter = QSplitter(Qt.Orientation.Vertical)
        splitter.addWidget(self.panel_scroll)
        splitter.addWidget(lower)
        splitter.setSizes([400, 140])  # the maps come first in a small dock
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.addLayout(choices)
        layout.addWidget(self.summary)
        layout.addWidget(splitter, 1)

    # --- drawing ------------------------------------------------------------------------------------
    def show_message(self, text: str) -> None:
        self.summary.setText(html.escape(text))

    def clear_maps(self) -> None:
        """No maps: the ones shown were of another model."""
        self.panel_scroll.setVisible(False)

    def show_stats(self, state: HeadStatsState) -> None:
        self.panel_scroll.setVisible(True)
        self._fill(self.run, state.runs, state.run)
        self._fill(self.kind, state.kinds, state.kind)
        self.summary.setText(html.escape(state.summary))
        self._draw_panels(state)

    def _draw_panels(self, state: HeadStatsState) -> None:
        self.state = state
        self._build(state)
        for (plot, image, _), bar, panel in zip(self.plots, self.colour_bars, state.panels):
            plot.setTitle(panel_title(panel), size="9pt")
            plot.setToolTip(panel.description)
            image.setImage(np.ascontiguousarray(panel.matrix, dtype=np.float32), autoLevels=False, levels=panel.levels)
            image.setRect(QRectF(0, 0, state.heads, state.layers))
            bar.setLevels(values=panel.levels)
            bar.setToolTip(f"{panel.description}: colours {panel.levels[0]:.3g} to {panel.levels[1]:.3g} {panel.unit}")
        self._write_cells()
        self.select(state.selected)

    def _write_cells(self, *_) -> None:
        """Each cell's value in it, in a colour that reads on the cell's own, with as many digits as fit."""
        metrics = QFontMetrics(self.cell_font)
        if self.state is None:
            return
        for (plot, _, _), labels, panel in zip(self.plots, self.cell_labels, self.state.panels):
            box = plot.vb.boundingRect()
            cell = (box.width() / max(self.shape[1], 1), box.height() / max(self.shape[0], 1))
            texts = fitting_texts(panel.texts, cell, metrics) if panel.texts else None
            low, high = panel.levels
            for index, label in enumerate(labels):
                layer, head = divmod(index, self.shape[1])
                label.setVisible(texts is not None)
                if texts is not None:
                    label.setText(texts[layer][head])
                    label.setColor(text_colour(self.lut, (panel.matrix[layer, head] - low) / max(high - low, 1e-12)))

    def _fill(self, combo: QComboBox, items: list[tuple[str, str]], current: str) -> None:
        combo.blockSignals(True)
        if [combo.itemData(i) for i in range(combo.count())] != [value for value, _ in items]:
            combo.clear()
            for value, label in items:
                combo.addItem(label, value)
        combo.setCurrentIndex(combo.findData(current))
        combo.blockSignals(False)

    def show_run_choices(self, label: str, items: list[tuple[str, str]], current: str) -> None:
        """The first choice under another name, before any state is shown (the Head importance panel's methods:
        one is chosen before the first result exists)."""
        self.run_label.setText(label)
        self._fill(self.run, items, current)

    def _columns(self, state: HeadStatsState) -> int:
        size = self.panel_scroll.viewport().size()
        return panel_columns(len(state.panels), (state.layers, state.heads), size=(size.width(), size.height()))

    def _relayout(self) -> None:
        if self.state is not None and self._columns(self.state) != self.columns:
            self._draw_panels(self.state)

    def _build(self, state: HeadStatsState) -> None:
        """Panels are made again only when their number, shape or arrangement changes."""
        names, columns = [panel.name for panel in state.panels], self._columns(state)
        if ((state.layers, state.heads), names, columns) == (self.shape, self.names, self.columns):
            return
        self.panels.clear()
        self.plots, self.shape, self.names, self.columns = [], (state.layers, state.heads), names, columns
        rows = -(-len(state.panels) // columns)
        self.panels.setMinimumHeight(rows * (PANEL_ROW_EXTRA + state.layers * MIN_CELL_HEIGHT))
        self.panels.ci.setSpacing(4)
        self.colour_bars, self.cell_labels = [], []
        for index, panel in enumerate(state.panels):
            row, col = 2 * (index // columns), index % columns  # each panel's colour bar in the row under it
            plot = self.panels.addPlot(row=row, col=col)
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
            plot.setMinimumHeight(PLOT_EXTRA + state.layers * MIN_CELL_HEIGHT)
            self.plots.append((plot, image, outline))
            self.cell_labels.append(self._cell_labels(plot, state.layers, heads=state.heads))
            plot.vb.sigResized.connect(self._write_cells)
            bar = pg.ColorBarItem(values=panel.levels, colorMap=pg.colormap.get(self.colormap), interactive=False,
                                  orientation="horizontal", width=8, colorMapMenu=False)
            bar.setFixedHeight(COLOUR_BAR_HEIGHT)  # the maps, not their bars, get the room a small dock has
            self.panels.addItem(bar, row=row + 1, col=col)
            self.colour_bars.append(bar)

    def _cell_labels(self, plot: pg.PlotItem, layers: int, heads: int) -> list[pg.TextItem]:
        labels = []
        for layer in range(layers):
            for head in range(heads):
                label = pg.TextItem(anchor=(0.5, 0.5))
                label.setFont(self.cell_font)
                label.setPos(head + 0.5, layer + 0.5)
                plot.addItem(label)
                labels.append(label)
        return labels

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
                item = QListWidgetItem(f"#{entry.index + 1}  {entry.source}  →  {entry.target}"
                                       f"   (entropy {entry.value:.3f})")
                item.setData(SENTENCE_ROLE, entry.source)
                item.setToolTip("Double-click to run this sentence")
                self.sentences.addItem(item)

    def show_note(self, text: str) -> None:
        """One line about the clicked head, in place of its typical sentences (head importance has none)."""
        self.sentences.clear()
        self.head_title.setText(html.escape(text))

    def add_section(self, widget: QWidget, height: int) -> None:
        """Another view under the maps (the importance panel's pruning curve), ``height`` px of the splitter."""
        self.splitter.addWidget(widget)
        self.splitter.setSizes(self.splitter.sizes()[:-1] + [height])

    def set_sentences_visible(self, visible: bool) -> None:
        self.sentences.setVisible(visible)

    def set_colormap(self, name: str) -> None:
        self.colormap, self.lut = name, lookup_table(name)
        for _, image, _ in self.plots:
            image.setLookupTable(self.lut)
        for bar in self.colour_bars:
            bar.setColorMap(pg.colormap.get(name))
        self._write_cells()

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
        if self.run.currentData() is not None:  # no kind yet: nothing is shown, the run alone was chosen
            self.choice_changed.emit(self.run.currentData(), self.kind.currentData() or "")

    def _on_double_click(self, item: QListWidgetItem) -> None:
        source = item.data(SENTENCE_ROLE)
        if source:
            self.sentence_chosen.emit(source)
