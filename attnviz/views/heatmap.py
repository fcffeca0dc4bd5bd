"""The focus view: one attention matrix, large, with token labels, colour bar, hover readout, crosshair,
the decoding step highlighted and masked cells hatched."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Callable, Iterator

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QPointF, QRectF, Qt, Signal
from PySide6.QtGui import QColor, QFontMetrics, QPen
from PySide6.QtWidgets import QGraphicsRectItem, QLabel, QVBoxLayout, QWidget

from ..viewmodel import HeatmapState, unrevealed
from .style import DEFAULT_COLORMAP, HIGHLIGHT, hatch, lookup_table

LEGEND = (f"<span style='color:gray'>▨ masked: not allowed to attend · <span style='color:{HIGHLIGHT}'>▭</span> "
          "current decoding step · <span style='color:#c62828'>⚠</span> weight on a masked cell</span>")
HOVER_HINT = "Hover over a cell to read its weight; double-click to reset the zoom."
MASS_ON_MASKED = 1e-6  # more weight than this on a blocked cell means the model ignored its mask
NOT_A_NUMBER_RGBA = (255, 0, 255, 255)  # NaN or infinite cells: a colour no colour map uses


def not_a_number_cells(matrix: np.ndarray) -> np.ndarray:
    """An RGBA image ``[q, k, 4]``, opaque magenta where ``matrix`` is NaN or infinite, clear elsewhere."""
    image = np.zeros(matrix.shape + (4,), dtype=np.ubyte)
    image[~np.isfinite(matrix)] = NOT_A_NUMBER_RGBA
    return image


def unrevealed_cells(shape: tuple[int, int], revealed: tuple[int, int] | None) -> np.ndarray:
    """An RGBA image ``[q, k, 4]``: cells not generated yet (step by step) as flat blank paper, a shade off
    the plot's background, so they read neither as hatched masked cells nor as low weights."""
    background = pg.mkColor(pg.getConfigOption("background"))
    foreground = pg.mkColor(pg.getConfigOption("foreground"))
    paper = [round(0.93 * getattr(background, part)() + 0.07 * getattr(foreground, part)())
             for part in ("red", "green", "blue")]
    image = np.zeros(tuple(shape) + (4,), dtype=np.ubyte)
    image[unrevealed(shape, revealed)] = (*paper, 255)
    return image


FOCUS_MIN_HEIGHT = 150  # px: in a small window the docks and the result line give way, not the heatmap
SHORT_INPUT = 40  # up to this many tokens in view, every one is labelled (cut with "…" to its cell if need be)


def visible_ticks(tokens: list[str], low: float, high: float, cell: float,
                  size: Callable[[str], float], gap: float = 4) -> list[tuple[int, str]]:
    """Ticks for the tokens between ``low`` and ``high`` (``size``: a label's extent in pixels along the
    axis, ``cell``: pixels per token). Labels that fit all show. When they do not: a short stretch still
    labels every token, each cut with "…" to its cell (when a cut label fits: along a vertical axis a label's
    height cannot be cut); a long one labels every n-th token, evenly, and zooming in reveals the rest.
    ``gap``: pixels kept between labels (text lines stacked along a vertical axis carry their leading: 0)."""
    first, last = max(0, int(np.ceil(low))), min(len(tokens) - 1, int(np.floor(high)))
    if last < first:
        return []
    shown = range(first, last + 1)
    widest = max(size(tokens[index]) for index in shown) + gap
    if widest <= cell:
        return [(index, tokens[index]) for index in shown]
    if len(shown) <= SHORT_INPUT and size(tokens[first][:1] + "…") + gap <= cell:
        return [(index, _cut(tokens[index], cell - gap, size)) for index in shown]
    every = int(np.ceil(widest / max(cell, 1e-6)))
    return [(index, tokens[index]) for index in shown if index % every == 0]


def _cut(label: str, room: float, size: Callable[[str], float]) -> str:
    """``label`` shortened with "…" until it fits ``room`` pixels (at least its first character)."""
    if size(label) <= room:
        return label
    for length in range(len(label) - 1, 0, -1):
        if size(label[:length] + "…") <= room:
            return label[:length] + "…"
    return label[:1] + "…" if len(label) > 1 else label


class HeatmapView(QWidget):
    """Shows ``[query, key]`` weights in [0, 1]; rows are queries (top to bottom), columns keys."""

    hovered = Signal(str)

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.title = QLabel("The attention appears here once a sentence has run.")
        self.title.setObjectName("heatmapTitle")
        self.badge = QLabel()
        self.badge.setStyleSheet("color: white; background: #c62828; padding: 2px 6px; border-radius: 3px;")
        self.badge.hide()
        self.graphics = pg.GraphicsLayoutWidget()
        self.graphics.setMinimumHeight(FOCUS_MIN_HEIGHT)
        self.readout = QLabel(HOVER_HINT)
        self.legend = QLabel(LEGEND)
        self.legend.setObjectName("heatmapLegend")
        self.legend.setToolTip("Hatched cells: the mask forbids attending there (padding, or the future for the "
                               "decoder). The outlined row: the query of the current decoding step.")
        self.readout.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(6, 4, 6, 4)
        for widget in (self.title, self.badge, self.graphics, self.legend, self.readout):
            layout.addWidget(widget)
        self._build_plot()
        self.matrix = np.zeros((1, 1), dtype=np.float32)
        self.approximate = False
        self.revealed: tuple[int, int] | None = None
        self.mask: np.ndarray | None = None
        self.query_tokens: list[str] = []
        self.key_tokens: list[str] = []

    def _build_plot(self) -> None:
        self.plot = self.graphics.addPlot(row=0, col=0)
        self.plot.invertY(True)
        self.plot.hideButtons()
        self.plot.setMenuEnabled(False)
        self.plot.getViewBox().setMouseEnabled(x=True, y=True)
        for name in ("left", "bottom"):
            axis = self.plot.getAxis(name)
            axis.setStyle(tickLength=0, autoExpandTextSpace=True)
        self.image = pg.ImageItem(axisOrder="row-major")
        self.image.setLookupTable(lookup_table(DEFAULT_COLORMAP))
        self.image.setLevels((0.0, 1.0))
        self.overlay = pg.ImageItem(axisOrder="row-major")
        self.overlay.setZValue(5)
        self.not_a_number = pg.ImageItem(axisOrder="row-major")
        self.not_a_number.setZValue(6)
        self.unrevealed = pg.ImageItem(axisOrder="row-major")
        self.unrevealed.setZValue(7)
        self.step_box = QGraphicsRectItem()
        self.step_box.setPen(QPen(QColor(HIGHLIGHT), 0))
        self.step_box.setZValue(10)
        self.step_box.hide()
        crosshair_pen = pg.mkPen((255, 255, 255, 110), width=1, style=Qt.PenStyle.DashLine)
        self.vline = pg.InfiniteLine(angle=90, movable=False, pen=crosshair_pen)
        self.hline = pg.InfiniteLine(angle=0, movable=False, pen=crosshair_pen)
        for item in (self.image, self.overlay, self.not_a_number, self.unrevealed, self.step_box, self.vline, self.hline):
            self.plot.addItem(item)
        self.vline.hide()
        self.hline.hide()
        self.colorbar = pg.ColorBarItem(values=(0, 1), colorMap=pg.colormap.get(DEFAULT_COLORMAP),
                                        interactive=False, width=14, colorMapMenu=False)
        self.graphics.addItem(self.colorbar, row=0, col=1)
        self.graphics.scene().sigMouseMoved.connect(self._on_mouse_moved)
        self.graphics.scene().sigMouseClicked.connect(self._on_mouse_clicked)
        self.plot.getViewBox().sigRangeChanged.connect(self._update_ticks)
        self.plot.getViewBox().sigResized.connect(self._update_ticks)  # same range, new pixels per cell

    def lut(self) -> np.ndarray:
        """The colormap's lookup table ``[256, 3 or 4]`` (for figures drawn outside the widget)."""
        return self.image.lut if self.image.lut is not None else lookup_table(DEFAULT_COLORMAP)

    def set_colormap(self, name: str) -> None:
        self.image.setLookupTable(lookup_table(name))
        self.colorbar.setColorMap(pg.colormap.get(name))

    def set_masks_visible(self, visible: bool) -> None:
        self.overlay.setVisible(visible)

    def set_tick_font(self, font) -> None:
        """The token labels' font (a QFont; None: the default): presentation mode makes them larger."""
        for name in ("left", "bottom"):
            axis = self.plot.getAxis(name)
            axis.setTickFont(font)
            original = self.__dict__.setdefault(f"_{name}_label_font", axis.label.font())
            if font is None or font.pointSizeF() <= 0:
                axis.label.setFont(original)
            else:  # the axis names grow with the labels, a little smaller than them
                named = type(font)(font)
                named.setPointSizeF(font.pointSizeF() * 0.8)
                axis.label.setFont(named)
            axis.resizeEvent()  # room for the larger name
        self._update_ticks()

    def show_heatmap(self, state: HeatmapState) -> None:
        self.show_matrix(state.matrix, state.mask, query_tokens=state.query_labels, key_tokens=state.key_labels,
                         title=state.title, axis_names=state.axis_names, levels=state.levels)
        self.approximate = state.approximate
        self.revealed = state.revealed
        if state.revealed is not None:
            self.unrevealed.setImage(unrevealed_cells(state.matrix.shape, state.revealed), autoLevels=False)
            self.unrevealed.setRect(QRectF(-0.5, -0.5, state.matrix.shape[1], state.matrix.shape[0]))
        self.set_step(state.step_row)

    def show_matrix(self, matrix: np.ndarray, mask: np.ndarray | None, query_tokens: list[str],
                    key_tokens: list[str], title: str = "", axis_names: tuple[str, str] = ("queries", "keys"),
                    levels: tuple[float, float] = (0.0, 1.0)) -> None:
        """Replace the data; items are reused, only images, ticks and ranges change. ``levels``: the weights
        drawn at the two ends of the colormap, shown on the colour bar."""
        rows, cols = matrix.shape
        self.approximate = False  # show_heatmap says when the weights are half precision (the view-model decides)
        self.revealed = None  # and how much of a decoder map is generated yet, step by step
        self.unrevealed.clear()
        self.matrix = np.ascontiguousarray(matrix, dtype=np.float32)
        self.mask, self.query_tokens, self.key_tokens = mask, query_tokens, key_tokens
        self.image.setImage(self.matrix, autoLevels=False, levels=levels)
        if self.image.getLevels() is None or tuple(self.image.getLevels()) != tuple(levels):
            # the first image applies the levels set before it existed (0–1) over the ones given here
            self.image.setLevels(levels)
        if tuple(self.colorbar.levels()) != tuple(levels):  # redrawing the bar costs a layout pass
            self.colorbar.setLevels(values=levels)
        rect = QRectF(-0.5, -0.5, cols, rows)  # cell (r, c) is centred on (c, r)
        self.image.setRect(rect)
        if mask is not None and not mask.all():
            self.overlay.setImage(hatch(mask), autoLevels=False)
            self.overlay.setRect(rect)
        else:
            self.overlay.clear()
        if not np.isfinite(self.matrix).all():
            self.not_a_number.setImage(not_a_number_cells(self.matrix), autoLevels=False)
            self.not_a_number.setRect(rect)
        else:
            self.not_a_number.clear()
        self.plot.setLabel("left", axis_names[0])
        self.plot.setLabel("bottom", axis_names[1])
        self.plot.getViewBox().setLimits(xMin=-0.5, xMax=cols - 0.5, yMin=-0.5, yMax=rows - 0.5)
        self.plot.getViewBox().setRange(rect, padding=0)
        self._update_ticks()
        self.title.setText(title)
        self._update_badge()
        self.clear_hover()  # it described a cell of the matrix shown before

    def clear_hover(self) -> None:
        self.vline.hide()
        self.hline.hide()
        self.readout.setText(HOVER_HINT)

    def reset_zoom(self) -> None:
        rows, cols = self.matrix.shape
        self.plot.getViewBox().setRange(QRectF(-0.5, -0.5, cols, rows), padding=0)

    @contextmanager
    def exporting(self) -> Iterator[None]:
        """Hide what belongs to the pointer (crosshair, readout) while the view is drawn into a file."""
        crosshair = self.vline.isVisible()
        self.vline.hide()
        self.hline.hide()
        self.readout.hide()
        try:
            yield
        finally:
            self.readout.show()
            self.vline.setVisible(crosshair)
            self.hline.setVisible(crosshair)

    def _update_ticks(self, *_) -> None:
        """Label as many tokens as fit in the visible range: all of them once zoomed in far enough.

        Laying out hundreds of overlapping labels on every paint is what made long inputs slow.
        """
        (x_low, x_high), (y_low, y_high) = self.plot.getViewBox().viewRange()
        left, bottom = self.plot.getAxis("left"), self.plot.getAxis("bottom")
        metrics = QFontMetrics(bottom.style.get("tickFont") or self.font())
        row_height = left.height() / max(y_high - y_low, 1e-6)
        column_width = bottom.width() / max(x_high - x_low, 1e-6)
        left.setTicks([visible_ticks(self.query_tokens, y_low, high=y_high, cell=row_height,
                                     size=lambda _: metrics.height(), gap=0)])
        bottom.setTicks([visible_ticks(self.key_tokens, x_low, high=x_high, cell=column_width,
                                       size=metrics.horizontalAdvance)])

    def _update_badge(self) -> None:
        if self.mask is None or self.mask.shape != self.matrix.shape:
            self.badge.hide()
            return
        leaked = np.where(self.mask, 0.0, self.matrix)
        if leaked.max(initial=0.0) > MASS_ON_MASKED:
            row, col = np.unravel_index(int(leaked.argmax()), leaked.shape)
            self.badge.setText(f"⚠ attention on masked cells: up to {leaked.max():.3g} "
                               f"(query {row}, key {col}) — the model does not respect its mask")
            self.badge.show()
        else:
            self.badge.hide()

    def clear(self, message: str) -> None:
        """Show nothing but ``message`` (no model, or a model without attention)."""
        self.image.clear()
        self.overlay.clear()
        self.unrevealed.clear()
        self.step_box.hide()
        self.matrix, self.mask, self.query_tokens, self.key_tokens = np.zeros((1, 1), np.float32), None, [], []
        self._update_ticks()
        self.badge.hide()
        self.clear_hover()
        self.title.setText(message)

    def set_step(self, row: int | None) -> None:
        """Outline query row ``row`` (the current decoding step), or nothing."""
        if row is None or not 0 <= row < self.matrix.shape[0]:
            self.step_box.hide()
            return
        self.step_box.setRect(QRectF(-0.5, row - 0.5, self.matrix.shape[1], 1))
        self.step_box.show()

    def cell_at(self, scene_position: QPointF) -> tuple[int, int] | None:
        point = self.plot.getViewBox().mapSceneToView(scene_position)
        row, col = int(np.floor(point.y() + 0.5)), int(np.floor(point.x() + 0.5))
        if 0 <= row < self.matrix.shape[0] and 0 <= col < self.matrix.shape[1]:
            return row, col
        return None

    def describe_cell(self, row: int, col: int) -> str:
        query = self.query_tokens[row] if row < len(self.query_tokens) else str(row)
        key = self.key_tokens[col] if col < len(self.key_tokens) else str(col)
        if self.revealed is not None and not (row < self.revealed[0] and col < self.revealed[1]):
            return f"query {row} → key {col}: not generated yet at this step"
        masked = self.mask is not None and not bool(self.mask[row, col])
        value = self.matrix[row, col]
        shown = f"≈{value:.3g}" if self.approximate else f"{value:.4f}"  # half precision: three digits
        return (f"query {row} ‘{query}’ → key {col} ‘{key}’: {shown}"
                + ("  (masked: not allowed to attend)" if masked else "")
                + ("" if np.isfinite(value) else "  (not a number: the model's computation broke down here)"))

    def _on_mouse_clicked(self, event) -> None:
        if event.double():
            self.reset_zoom()

    def _on_mouse_moved(self, position: QPointF) -> None:
        cell = self.cell_at(position)
        if cell is None:
            return
        row, col = cell
        self.vline.setPos(col)
        self.hline.setPos(row)
        self.vline.show()
        self.hline.show()
        text = self.describe_cell(row, col)
        self.readout.setText(text)
        self.hovered.emit(text)
