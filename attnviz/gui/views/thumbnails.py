"""Grids of bare attention thumbnails (no token labels: on 48 small plots they are unreadable and make
drawing about 3× slower; labels belong to the one large focus view). This class draws the head grid (all
heads of a layer: one grid row, drawn in as many rows of near-square thumbnails as its panel needs, each under
its heads' names: state/head_rows.py); every layer × head is painted by gui/views/mosaic.py, which scrolls and
colours only what is in view (a plot per thumbnail made 32 × 32 heads take 12 s). Plots are rebuilt only when
the grid's shape (or the number of heads a row holds) changes; new data only calls ``setImage``.

A right-click offers to switch the head (or its whole layer) off or on; heads that were off in the run are
crossed out."""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QEvent, QPoint, QRectF, Qt, QTimer, Signal
from PySide6.QtWidgets import QMenu, QToolTip, QWidget

from ...state import head_rows
from ...state.viewmodel import LEVELS, GridState, thumbnail_menu
from .style import DEFAULT_COLORMAP, HIGHLIGHT, lookup_table

OFF_COLOUR = "#e53935"  # the cross over a switched-off head
BOUNDARY_PEN = (255, 152, 0, 150)  # where a decoder-only model's prompt ends: the focus view's orange, see-through
BOUNDARY_LEAST = 24  # pixels a thumbnail needs for its boundary lines: on smaller ones they hide the weights
GROUP_GAP = 9  # pixels between key/value groups of heads (the grid's usual spacing is 3)
RELAYOUT_DELAY_MS = 150  # a wrapped grid is laid out again once its panel stops being resized (a rebuild takes ~0.3 s)
ROOM = head_rows.Room(row_header=24.0, col_header=16.0, gap=3.0, group_gap=GROUP_GAP)  # what a wrapped grid spends


class HeaderLabel(pg.LabelItem):
    """A row or column header that asks for no room of its own: a header as wide as "H10" on each of 16 heads
    (or as tall as a line on each of 24 layers) made the grid wider than its panel, and the panel cut off the
    last heads. The grid shows as many headers as fit (``ThumbnailGrid.thin_headers``)."""

    def updateMin(self) -> None:  # noqa: N802 (pyqtgraph's name)
        super().updateMin()
        self.setMinimumSize(0, 0)
        self._sizeHint[Qt.SizeHint.MinimumSize] = (0, 0)


def heads_menu(grid, row: int, col: int) -> QMenu:
    """A heads grid's menu at head ``(row, col)`` (``ThumbnailGrid``, ``MosaicGrid``): switch the head off/on, and
    switch the whole row's layer off (or on, when all its heads are off)."""
    menu = QMenu(grid)
    for text, action in thumbnail_menu(grid.off, grid.shape[1], row=row, col=col):
        menu.addAction(text, (lambda: grid.head_toggled.emit(row, col)) if action == "head"
                       else (lambda: grid.layer_toggled.emit(row)))
    return menu


class ThumbnailGrid(pg.GraphicsLayoutWidget):
    """``rows × cols`` thumbnails; clicking one emits ``(row, col)``; its context menu emits
    ``head_toggled(row, col)`` or ``layer_toggled(row)``. A wrapped grid (one row of heads) draws head ``col`` at
    ``head_rows.place(col, per_row)``; every signal and ``cells`` keep the grid's own ``(row, col)`` order."""

    clicked = Signal(int, int)
    head_toggled = Signal(int, int)
    layer_toggled = Signal(int)
    cells: tuple = ()  # a class default: Qt resizes the view before __init__ ends
    boundaries: tuple = ()
    boundary: float | None = None
    wrap = False
    per_row = 0
    relayout_timer: QTimer | None = None

    def __init__(self, max_columns: int = 8, parent: QWidget | None = None):
        super().__init__(parent)
        self.max_columns = max_columns
        self.shape: tuple[int, int] = (0, 0)
        self.cells: list[tuple[pg.ViewBox, pg.ImageItem]] = []
        self.lut = lookup_table(DEFAULT_COLORMAP)
        self.chosen = DEFAULT_COLORMAP  # the user's colormap
        self.forced = ""  # a signed grid's own (GridState.colormap), drawn instead of the user's
        self.colormap = DEFAULT_COLORMAP  # the one drawn
        self.levels = LEVELS
        self.selected: tuple[int, int] | None = None
        self.row_labels: list[pg.LabelItem] = []
        self.col_labels: list[pg.LabelItem] = []
        self.crosses: list[pg.PlotCurveItem] = []  # one per thumbnail, shown when its head was off
        self.boundaries: list[pg.PlotCurveItem] = []  # one per thumbnail: the prompt's end on both axes
        self.group = 0
        self.boundary: float | None = None
        self.off: list[bool] = []
        self.wrap = False  # one row of heads drawn ``per_row`` to a row (head_rows.heads_per_row)
        self.per_row = 0
        self.relayout_timer = QTimer(self, singleShot=True, interval=RELAYOUT_DELAY_MS)
        self.relayout_timer.timeout.connect(self.relayout)
        self.ci.setSpacing(3)

    def show_grid(self, state: GridState, images: bool = True) -> None:
        """Draw ``state``; with ``images`` False only the outline of the selected thumbnail moves."""
        if images:
            self.wrap = state.wrap and state.rows == 1
            self.levels, self.forced = state.levels, state.colormap
            self._draw_colormap(self.forced or self.chosen)
            self.build(state.rows, state.cols, row_names=state.row_names, col_names=state.col_names,
                       group=state.group)
            self.set_images(state.matrices)
            self.mark_off(state.off)
            self.mark_boundary(state.boundary)
            self.mark_groups(state.group)
        self.select(*(state.selected or (None, None)))

    def mark_off(self, off: list[bool]) -> None:
        """Cross out the thumbnails of heads that were switched off."""
        self.off = list(off) + [False] * (len(self.cells) - len(off))
        for cross, is_off in zip(self.crosses, self.off):
            cross.setVisible(is_off)

    def mark_boundary(self, boundary: float | None) -> None:
        """A line on both axes of every thumbnail where a decoder-only model's prompt ends (in its cells), on
        thumbnails large enough for it (``show_boundaries``)."""
        self.boundary = boundary
        for line, (_, image) in zip(self.boundaries, self.cells):
            if boundary is not None and image.image is not None:
                height, width = image.image.shape[:2]
                line.setData(x=np.array([boundary, boundary, np.nan, 0, width], dtype=float),
                             y=np.array([0, height, np.nan, boundary, boundary], dtype=float))
        self.show_boundaries()

    def show_boundaries(self) -> None:
        """The prompt's lines where there is a boundary and the thumbnails are at least ``BOUNDARY_LEAST`` a side."""
        side = min(self.cells[0][0].sceneBoundingRect().size().toTuple()) if self.cells else 0.0
        for line, (_, image) in zip(self.boundaries, self.cells):
            line.setVisible(self.boundary is not None and image.image is not None and side >= BOUNDARY_LEAST)

    def mark_groups(self, group: int) -> None:
        """A wider gap after every ``group`` heads: the query heads that share one key/value head (0: none)."""
        self.group = group
        layout = self.ci.layout
        for col in range(1, self.per_row):
            wide = head_rows.wide_gap_before(col, self.per_row, group)
            layout.setColumnSpacing(col, GROUP_GAP if wide else 3)  # the gap before head col (column col + 1)

    def heads_per_row(self, cols: int, group: int) -> int:
        """How many thumbnails a row holds: every column, or, wrapped, what suits the panel's size now."""
        if not self.wrap:
            return cols
        return head_rows.heads_per_row(cols, self.size().toTuple(), group=group, room=ROOM)

    def build(self, rows: int, cols: int, row_names: list[str], col_names: list[str], group: int = 0) -> None:
        """Make ``rows × cols`` empty thumbnails with row and column headers (``group``: query heads per key/value
        head, which a wrapped row holds whole). Only a new shape rebuilds; new names just relabel the headers."""
        per_row = self.heads_per_row(cols, group)
        if (rows, cols) == self.shape and per_row == self.per_row:
            for label, name in zip(self.row_labels + self.col_labels, row_names + col_names):
                label.setText(name, size="8pt")
                label.name = name
            self.thin_headers()
            return
        self.clear()
        self.cells, self.shape, self.selected, self.crosses, self.off = [], (rows, cols), None, [], []
        self.boundaries, self.boundary, self.per_row = [], None, per_row
        where = (lambda row, col: (2 * (col // per_row) + 1, col % per_row + 1)) if self.wrap else (
            lambda row, col: (row + 1, col + 1))
        self.col_labels = [self._header(name, row=where(0, col)[0] - 1, col=where(0, col)[1])
                           for col, name in enumerate(col_names)]
        self.row_labels = []
        for row in range(rows):
            self.row_labels.append(self._header(row_names[row], row=row + 1, col=0))
            for col in range(cols):
                at_row, at_col = where(row, col)
                view = self.addViewBox(row=at_row, col=at_col, lockAspect=False, enableMouse=False,
                                       invertY=True, enableMenu=False)
                image = pg.ImageItem(axisOrder="row-major")
                image.setLookupTable(self.lut)
                view.addItem(image)
                cross = pg.PlotCurveItem(pen=pg.mkPen(OFF_COLOUR, width=2), connect="finite")
                cross.setZValue(10)
                cross.setVisible(False)
                view.addItem(cross)
                self.crosses.append(cross)
                line = pg.PlotCurveItem(pen=pg.mkPen(BOUNDARY_PEN, width=1), connect="finite")
                line.setZValue(9)
                line.setVisible(False)
                view.addItem(line)
                self.boundaries.append(line)
                self.cells.append((view, image))
        self.ci.layout.activate()  # the cells' geometry now, to thin the headers by
        self.thin_headers()

    def _header(self, name: str, row: int, col: int) -> HeaderLabel:
        label = HeaderLabel(name, size="8pt")
        label.name = name
        self.addItem(label, row=row, col=col)
        return label

    def relayout(self) -> None:
        """Draw a wrapped grid again with as many heads to a row as its panel's new size suits (nothing to do
        when that number stays): its images, marks and outline as they were."""
        if not self.wrap or not self.cells or self.heads_per_row(self.shape[1], self.group) == self.per_row:
            return
        images = [image.image for _, image in self.cells]
        names = ([label.name for label in self.row_labels], [label.name for label in self.col_labels])
        off, boundary, group, selected = self.off, self.boundary, self.group, self.selected
        self.build(*self.shape, row_names=names[0], col_names=names[1], group=group)
        if all(image is not None for image in images):
            self.set_images(images)
        self.mark_off(off)
        self.mark_boundary(boundary)
        self.mark_groups(group)
        self.select(*(selected or (None, None)))

    def thin_headers(self) -> None:
        """Every header whose cells leave it room; where they are narrower (16 heads in a side panel, 24 layers),
        every n-th, counted from the first: each one shown stays whole and readable, the tooltip names the rest."""
        if not self.cells:
            return
        first = self.cells[0][0].sceneBoundingRect()
        for labels, cell, along in ((self.col_labels, first.width(), "width"), (self.row_labels, first.height(),
                                                                                  "height")):
            needed = max((getattr(label.item.boundingRect(), along)() for label in labels), default=0.0)
            every = max(1, int(np.ceil((needed + 2) / max(cell + 3, 1.0))))  # 3: the grid's spacing
            for index, label in enumerate(labels):  # counted from each row's first head when wrapped
                label.item.setVisible((index % self.per_row if self.wrap and along == "width" else index) % every == 0)

    def resizeEvent(self, event) -> None:  # noqa: N802 (Qt's name)
        super().resizeEvent(event)
        if self.wrap and self.relayout_timer is not None:
            self.relayout_timer.start()
        self.thin_headers()
        self.show_boundaries()

    def event(self, event) -> bool:
        """Hovering a thumbnail names its layer and head (its header may be one of those thinned out)."""
        if event.type() == QEvent.Type.ToolTip:
            cell = self.cell_at(event.pos())
            if cell is None:
                QToolTip.hideText()
            else:
                row, col = cell
                QToolTip.showText(event.globalPos(), f"{self.row_labels[row].name} · {self.col_labels[col].name}: "
                                                     "click to show it; right-click to switch it off or on", self)
            return True
        return super().event(event)

    def set_images(self, matrices: list[np.ndarray]) -> None:
        """One ``[q, k]`` matrix per thumbnail, row by row."""
        for (view, image), matrix in zip(self.cells, matrices):
            data = np.ascontiguousarray(matrix, dtype=np.float32)
            image.setImage(data, autoLevels=False, levels=self.levels)
            rect = QRectF(0, 0, data.shape[1], data.shape[0])
            image.setRect(rect)
            view.setRange(rect, padding=0)
        for cross, (_, image) in zip(self.crosses, self.cells):
            height, width = image.image.shape[:2] if image.image is not None else (1, 1)
            cross.setData(x=np.array([0, width, np.nan, 0, width], dtype=float),
                          y=np.array([0, height, np.nan, height, 0], dtype=float))

    def set_colormap(self, name: str) -> None:
        """The user's colormap, drawn unless the grid shows signed maps (their diverging one stays)."""
        self.chosen = name
        self._draw_colormap(self.forced or name)

    def _draw_colormap(self, name: str) -> None:
        if name == self.colormap:
            return
        self.colormap, self.lut = name, lookup_table(name)
        for _, image in self.cells:
            image.setLookupTable(self.lut)

    def select(self, row: int | None, col: int | None) -> None:
        """Outline the thumbnail the focus view shows (none when it shows an aggregate)."""
        self.selected = None if row is None or col is None else (row, col)
        for index, (view, _) in enumerate(self.cells):
            chosen = self.selected == divmod(index, self.shape[1])
            view.setBorder(pg.mkPen(HIGHLIGHT, width=2) if chosen else None)

    def image(self, row: int, col: int) -> np.ndarray:
        return self.cells[row * self.shape[1] + col][1].image

    def cell_at(self, point: QPoint) -> tuple[int, int] | None:
        """The ``(row, col)`` of the thumbnail under a widget position."""
        position = self.mapToScene(point)
        for index, (view, _) in enumerate(self.cells):
            if view.sceneBoundingRect().contains(position):
                return divmod(index, self.shape[1])
        return None

    def context_menu(self, row: int, col: int) -> QMenu:
        return heads_menu(self, row, col)

    def mousePressEvent(self, event) -> None:  # noqa: N802 (Qt's name)
        cell = self.cell_at(event.position().toPoint())
        if cell is not None and event.button() == Qt.MouseButton.LeftButton:
            self.clicked.emit(*cell)
            event.accept()
            return
        super().mousePressEvent(event)

    def contextMenuEvent(self, event) -> None:  # noqa: N802 (Qt's name)
        cell = self.cell_at(event.pos())
        if cell is None:
            super().contextMenuEvent(event)
            return
        self.menu = self.context_menu(*cell)  # kept: a popup menu without an owner would be collected
        self.menu.popup(event.globalPos())
        event.accept()
