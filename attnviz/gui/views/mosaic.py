"""The "All layers × heads" grid: every layer × head of a kind as square thumbnails painted onto one scrolling
surface (state/grid_layout.py lays them out: at least 32 pixels a side, the rest scrolls), the layer names at the
left and the head names at the top staying in view while it scrolls. A thumbnail's colours are computed only when
it is first painted, so a model of 32 layers × 32 heads shows in a fraction of a second (1024 plot widgets took
about 12 s on a 2-core CPU).

Clicking a thumbnail emits ``clicked(layer, head)``; its context menu switches the head (or its layer) off or on;
heads that were off in the run are crossed out; the selected head is outlined and scrolled into view."""

from __future__ import annotations

import numpy as np
from PySide6.QtCore import QEvent, QPoint, QPointF, QRectF, Qt, Signal
from PySide6.QtGui import QColor, QFontMetrics, QImage, QPainter, QPen
from PySide6.QtWidgets import QAbstractScrollArea, QCheckBox, QMenu, QToolTip, QWidget

from ...state import grid_layout
from ...state.viewmodel import LEVELS, GridState
from .style import DEFAULT_COLORMAP, HIGHLIGHT, lookup_table
from .thumbnails import BOUNDARY_LEAST, BOUNDARY_PEN, OFF_COLOUR, heads_menu

HEADER_BACKGROUND = "#f4f4f4"
BAR_HEIGHT = 24  # the line above the grid holding the summary's switch


def coloured(matrix: np.ndarray, lut: np.ndarray, levels: tuple[float, float] = LEVELS) -> QImage:
    """A ``[q, k]`` matrix as an image through ``lut``, ``levels`` its two ends (weights: 0–1; signed maps ± their
    largest magnitude); NaN (not generated yet) transparent."""
    low, high = levels
    values = (np.nan_to_num(matrix, nan=low) - low) / ((high - low) or 1.0)
    index = np.clip(values * (len(lut) - 1), 0, len(lut) - 1).astype(np.intp)
    rgba = np.empty(matrix.shape + (4,), dtype=np.uint8)
    rgba[..., :3] = lut[index][..., :3]
    rgba[..., 3] = np.where(np.isnan(matrix), 0, 255)
    height, width = matrix.shape
    return QImage(rgba.data, width, height, 4 * width, QImage.Format.Format_RGBA8888).copy()


class MosaicGrid(QAbstractScrollArea):
    """``rows × cols`` thumbnails (layers × heads) with the same signals and ``show_grid`` as ThumbnailGrid."""

    clicked = Signal(int, int)
    head_toggled = Signal(int, int)
    layer_toggled = Signal(int)
    summary_toggled = Signal(bool)

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.summary = QCheckBox("One cell per head: how spread its attention is", self)
        self.summary.setToolTip("Each head as one cell: the mean over its rows of the row's entropy divided by the "
                                "log of the keys it may see (0: all weight on one key; 1: spread evenly). "
                                "Click a cell to show its head.")
        self.summary.toggled.connect(self._on_summary)
        self.setViewportMargins(0, BAR_HEIGHT, 0, 0)
        self.shape: tuple[int, int] = (0, 0)
        self.matrices: list[np.ndarray] = []
        self.images: dict[int, QImage] = {}  # colours of the thumbnails painted so far, by index
        self.lut = lookup_table(DEFAULT_COLORMAP)
        self.chosen, self.forced = DEFAULT_COLORMAP, ""  # the user's colormap, a signed grid's own (as ThumbnailGrid)
        self.levels = LEVELS
        self.row_names: list[str] = []
        self.col_names: list[str] = []
        self.selected: tuple[int, int] | None = None
        self.off: list[bool] = []
        self.boundary: float | None = None
        self.group = 0
        self.grid = grid_layout.layout(0, 0, (0, 0))
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAsNeeded)
        self.setVerticalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAsNeeded)
        self.viewport().setMouseTracking(True)

    # --- what is shown --------------------------------------------------------------------------------
    def show_grid(self, state: GridState, images: bool = True) -> None:
        """Draw ``state``; with ``images`` False only the outline of the selected thumbnail moves."""
        if images:
            self.build(state.rows, state.cols, row_names=state.row_names, col_names=state.col_names,
                       group=state.group)
            if (state.colormap or self.chosen) != (self.forced or self.chosen):
                self.lut = lookup_table(state.colormap or self.chosen)
            self.levels, self.forced = state.levels, state.colormap
            self.set_images(state.matrices)
            self.mark_off(state.off)
            self.boundary = state.boundary
        self.select(*(state.selected or (None, None)))

    def build(self, rows: int, cols: int, row_names: list[str], col_names: list[str], group: int = 0) -> None:
        """An empty grid of ``rows × cols`` named thumbnails (``group`` query heads to a key/value head)."""
        if (rows, cols) != self.shape:
            self.selected, self.off, self.matrices, self.images = None, [], [], {}
        self.shape, self.row_names, self.col_names, self.group = (rows, cols), list(row_names), list(col_names), group
        self.relayout()

    def set_images(self, matrices: list[np.ndarray]) -> None:
        """One ``[q, k]`` matrix per thumbnail, row by row; coloured when first painted."""
        self.matrices, self.images = list(matrices), {}
        self.viewport().update()

    def mark_off(self, off: list[bool]) -> None:
        self.off = list(off)
        self.viewport().update()

    def set_colormap(self, name: str) -> None:
        """The user's colormap, drawn unless the grid shows signed maps (their diverging one stays)."""
        self.chosen = name
        self.lut, self.images = lookup_table(self.forced or name), {}
        self.viewport().update()

    def select(self, row: int | None, col: int | None) -> None:
        """Outline the thumbnail the focus view shows (none for an aggregate) and scroll it into view."""
        chosen = None if row is None or col is None else (row, col)
        moved = chosen != self.selected
        self.selected = chosen
        if chosen is not None and moved:
            self.scroll_to(*chosen)
        self.viewport().update()

    def image(self, row: int, col: int) -> np.ndarray:
        return self.matrices[row * self.shape[1] + col]

    # --- geometry -------------------------------------------------------------------------------------
    def relayout(self) -> None:
        """Lay the grid out for the panel's size now and set the scroll bars' ranges."""
        size = self.maximumViewportSize()
        compact = self.summary.isChecked()
        self.grid = grid_layout.layout(*self.shape, (size.width(), size.height()), group=self.group,
                                       least=grid_layout.SUMMARY_SIDE if compact else grid_layout.LEAST_SIDE,
                                       compact=compact)
        width, height = self.grid.size()
        view = self.viewport().size()
        for bar, whole, shown in ((self.horizontalScrollBar(), width, view.width()),
                                  (self.verticalScrollBar(), height, view.height())):
            bar.setRange(0, max(0, int(np.ceil(whole - shown))))
            bar.setPageStep(max(1, shown))
            bar.setSingleStep(int(self.grid.side + self.grid.gap))
        self.viewport().update()

    def offset(self) -> QPointF:
        return QPointF(self.horizontalScrollBar().value(), self.verticalScrollBar().value())

    def cell_rect(self, row: int, col: int) -> QRectF:
        """Where a thumbnail is drawn now, in the viewport's pixels (scrolled out of view: outside it)."""
        return QRectF(*self.grid.rect(row, col)).translated(-self.offset())

    def cell_at(self, point: QPoint | QPointF) -> tuple[int, int] | None:
        """The ``(row, col)`` of the thumbnail under a viewport position (not under the sticky names)."""
        point = QPointF(point)
        if point.x() < self.grid.row_header or point.y() < self.grid.col_header:
            return None
        shifted = point + self.offset()
        return self.grid.cell_at(shifted.x(), shifted.y())

    def scroll_to(self, row: int, col: int) -> None:
        """Scroll just enough that the thumbnail lies in view, clear of the sticky names."""
        left, top, side, _ = self.grid.rect(row, col)
        view = self.viewport().size()
        for bar, start, header, shown in ((self.horizontalScrollBar(), left, self.grid.row_header, view.width()),
                                          (self.verticalScrollBar(), top, self.grid.col_header, view.height())):
            value = bar.value()
            if start - header < value:
                bar.setValue(int(start - header - self.grid.gap))
            elif start + side > value + shown:
                bar.setValue(int(np.ceil(start + side - shown + self.grid.gap)))

    def resizeEvent(self, event) -> None:  # noqa: N802 (Qt's name)
        super().resizeEvent(event)
        self.summary.setGeometry(4, 2, max(0, self.width() - 8), BAR_HEIGHT - 4)
        self.relayout()

    def _on_summary(self, on: bool) -> None:
        self.images = {}
        self.relayout()
        self.summary_toggled.emit(on)

    # --- painting -------------------------------------------------------------------------------------
    def paintEvent(self, event) -> None:  # noqa: N802 (Qt's name)
        painter = QPainter(self.viewport())
        painter.fillRect(self.viewport().rect(), self.palette().base())
        if self.shape[0] and self.shape[1]:
            offset = self.offset()
            view = self.viewport().size()
            layers, heads = self.grid.visible((offset.x(), offset.y(), view.width(), view.height()))
            for layer in layers:
                for head in heads:
                    self._paint_cell(painter, layer, head)
            self._paint_headers(painter, layers, heads)
        painter.end()

    def _colours(self, index: int) -> QImage | None:
        if index >= len(self.matrices):
            return None
        if index not in self.images:
            self.images[index] = coloured(np.asarray(self.matrices[index], dtype=np.float32), self.lut, self.levels)
        return self.images[index]

    def _paint_cell(self, painter: QPainter, layer: int, head: int) -> None:
        index = layer * self.shape[1] + head
        rect = self.cell_rect(layer, head)
        image = self._colours(index)
        if image is None:
            return
        painter.drawImage(rect, image)
        sx, sy = rect.width() / image.width(), rect.height() / image.height()
        if self.boundary is not None and rect.width() >= BOUNDARY_LEAST:
            painter.setPen(QPen(QColor(*BOUNDARY_PEN), 1))
            x, y = rect.left() + self.boundary * sx, rect.top() + self.boundary * sy
            painter.drawLine(QPointF(x, rect.top()), QPointF(x, rect.bottom()))
            painter.drawLine(QPointF(rect.left(), y), QPointF(rect.right(), y))
        if index < len(self.off) and self.off[index]:
            painter.setPen(QPen(QColor(OFF_COLOUR), 2))
            painter.drawLine(rect.topLeft(), rect.bottomRight())
            painter.drawLine(rect.bottomLeft(), rect.topRight())
        if self.selected == (layer, head):
            painter.setPen(QPen(QColor(HIGHLIGHT), 2))
            painter.drawRect(rect.adjusted(-1, -1, 1, 1))

    def _paint_headers(self, painter: QPainter, layers: range, heads: range) -> None:
        """The layer names at the left and the head names at the top, where they stay while the grid scrolls."""
        grid, view = self.grid, self.viewport().rect()
        background = QColor(HEADER_BACKGROUND)
        painter.fillRect(QRectF(0, 0, view.width(), grid.col_header), background)
        painter.fillRect(QRectF(0, 0, grid.row_header, view.height()), background)
        font = painter.font()
        font.setPointSizeF(8)
        painter.setFont(font)
        painter.setPen(QColor("#333333"))
        metrics = QFontMetrics(font)
        every = grid.every(max((metrics.horizontalAdvance(name) for name in self.col_names), default=0))
        painter.setClipRect(QRectF(grid.row_header, 0, view.width(), grid.col_header))
        for head in heads:  # a name whose thumbnail is half scrolled under the layer names is left out
            rect = self.cell_rect(0, head)
            if head % every == 0 and head < len(self.col_names) and rect.center().x() > grid.row_header:
                name = self.col_names[head]  # over its thumbnail; a name wider than it starts at its left edge
                left = rect.left() if metrics.horizontalAdvance(name) > rect.width() else rect.center().x() - 60
                align = Qt.AlignmentFlag.AlignLeft if left == rect.left() else Qt.AlignmentFlag.AlignHCenter
                painter.drawText(QRectF(left, 0, 120, grid.col_header), align | Qt.AlignmentFlag.AlignVCenter, name)
        rows_every = max(1, -(-(metrics.height() + 1) // int(max(grid.side + grid.gap, 1))))
        painter.setClipRect(QRectF(0, grid.col_header, grid.row_header, view.height()))
        for layer in layers:
            rect = self.cell_rect(layer, 0)
            if layer % rows_every == 0 and layer < len(self.row_names) and rect.center().y() > grid.col_header:
                painter.drawText(QRectF(0, rect.center().y() - 10, grid.row_header - 4, 20),
                                 Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter, self.row_names[layer])
        painter.setClipping(False)

    # --- the mouse ------------------------------------------------------------------------------------
    def viewportEvent(self, event) -> bool:  # noqa: N802 (Qt's name)
        """Hovering a thumbnail names its layer and head (the names in view may be thinned out)."""
        if event.type() == QEvent.Type.ToolTip:
            cell = self.cell_at(event.pos())
            if cell is None:
                QToolTip.hideText()
            else:
                row, col = cell
                index = row * self.shape[1] + col
                value = (f" · spread {float(self.matrices[index][0, 0]):.2f}" if self.summary.isChecked()
                         and index < len(self.matrices) and self.matrices[index].size == 1 else "")
                QToolTip.showText(event.globalPos(), f"{self.row_names[row]} · {self.col_names[col]}{value}: "
                                                     "click to show it; right-click to switch it off or on", self)
            return True
        return super().viewportEvent(event)

    def mousePressEvent(self, event) -> None:  # noqa: N802 (Qt's name)
        cell = self.cell_at(event.position())
        if cell is not None and event.button() == Qt.MouseButton.LeftButton:
            self.clicked.emit(*cell)
            event.accept()
            return
        super().mousePressEvent(event)

    def context_menu(self, row: int, col: int) -> QMenu:
        return heads_menu(self, row, col)

    def contextMenuEvent(self, event) -> None:  # noqa: N802 (Qt's name)
        cell = self.cell_at(event.pos())  # the viewport's position (QAbstractScrollArea passes its events on)
        if cell is None:
            super().contextMenuEvent(event)
            return
        self.menu = self.context_menu(*cell)  # kept: a popup menu without an owner would be collected
        self.menu.popup(event.globalPos())
        event.accept()
