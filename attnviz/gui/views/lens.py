"""The Lens pane: the logit lens of the selected hypothesis as a layers × steps map and DecoderLens as a table
(attnviz/state/lens_view.py ``LensState``).

Left: one cell per decoder layer boundary (rows, the output layer on top, the embeddings at the bottom) and output
step (columns, the output tokens written upright above them); its colour is the chosen token's rank at that layer
(log scale, bright = rank 1), the selected step's column is outlined, and hovering a cell reads out p, rank and the
top tokens at that layer. Right: DecoderLens, one row per encoder layer boundary: the NLL of the model's own output
when the decoder reads that layer, and what it translates from it.
"""

from __future__ import annotations

import numpy as np
from PySide6.QtCore import QPoint, QRect, Qt, Signal
from PySide6.QtGui import QColor, QFontMetrics, QImage, QPainter, QPen
from PySide6.QtWidgets import (
    QAbstractItemView, QHeaderView, QLabel, QScrollArea, QSizePolicy, QSplitter, QTableWidget, QTableWidgetItem,
    QToolTip, QVBoxLayout, QWidget,
)

from ...state.lens_view import LensState

MAX_CELL = 40  # pixels of a cell's side at most
MIN_CELL = 12
MAX_LABEL = 90  # pixels an upright token label may take


class LensMap(QWidget):
    """The drawing: row labels, upright column labels, the cells; ``hovered`` reads out the cell under the mouse,
    ``step_clicked`` says which step's column was clicked."""

    hovered = Signal(str)
    step_clicked = Signal(int)

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.state: LensState | None = None
        self.image: QImage | None = None
        self.setMouseTracking(True)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Expanding)

    def show_state(self, state: LensState | None) -> None:
        self.state = state
        self.image = None
        if state is not None:
            rgb = np.ascontiguousarray(state.rgb)
            rows, cols, _ = rgb.shape
            self.image = QImage(rgb.data, cols, rows, cols * 3, QImage.Format.Format_RGB888).copy()
        rows, cols = state.shape if state is not None else (0, 0)
        self.setMinimumSize(self._left() + cols * MIN_CELL + 4, self._top() + rows * MIN_CELL + 4)
        self.updateGeometry()
        self.update()

    # --- the layout -----------------------------------------------------------------------------------
    def _left(self) -> int:
        if self.state is None:
            return 0
        metrics = QFontMetrics(self.font())
        return max(metrics.horizontalAdvance(label) for label in self.state.row_labels) + 8

    def _top(self) -> int:
        if self.state is None:
            return 0
        metrics = QFontMetrics(self.font())
        return min(MAX_LABEL, max(metrics.horizontalAdvance(label) for label in self.state.col_labels) + 6)

    def _cell(self) -> tuple[int, int]:
        """A cell's width and height in pixels, from the room the widget has."""
        rows, cols = self.state.shape
        width = (self.width() - self._left() - 4) // max(cols, 1)
        height = (self.height() - self._top() - 4) // max(rows, 1)
        return max(MIN_CELL, min(MAX_CELL, width)), max(MIN_CELL, min(MAX_CELL, height))

    def cell_at(self, point: QPoint) -> tuple[int, int] | None:
        """The (row, column) under ``point``, or None."""
        if self.state is None:
            return None
        width, height = self._cell()
        column, row = (point.x() - self._left()) // width, (point.y() - self._top()) // height
        rows, cols = self.state.shape
        if point.x() < self._left() or point.y() < self._top() or not (0 <= row < rows and 0 <= column < cols):
            return None
        return row, column

    # --- drawing and the mouse ------------------------------------------------------------------------
    def paintEvent(self, _event) -> None:  # noqa: N802 (Qt's name)
        if self.state is None or self.image is None:
            return
        painter = QPainter(self)
        rows, cols = self.state.shape
        width, height = self._cell()
        left, top = self._left(), self._top()
        painter.drawImage(QRect(left, top, cols * width, rows * height), self.image)
        painter.setPen(self.palette().windowText().color())
        for row, label in enumerate(self.state.row_labels):
            painter.drawText(QRect(0, top + row * height, left - 6, height),
                             Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter, label)
        metrics = QFontMetrics(self.font())
        for column, label in enumerate(self.state.col_labels):
            painter.save()
            painter.translate(left + column * width + width / 2 + metrics.ascent() / 2 - 1, top - 4)
            painter.rotate(-90)
            painter.drawText(0, 0, metrics.elidedText(label, Qt.TextElideMode.ElideRight, MAX_LABEL - 6))
            painter.restore()
        if self.state.selected is not None:
            painter.setPen(QPen(QColor(230, 30, 30), 2))
            painter.drawRect(QRect(left + self.state.selected * width, top, width, rows * height))
        painter.end()

    def mouseMoveEvent(self, event) -> None:  # noqa: N802 (Qt's name)
        cell = self.cell_at(event.position().toPoint())
        if cell is None:
            QToolTip.hideText()
            return
        tip = self.state.tips[cell[0]][cell[1]]
        QToolTip.showText(event.globalPosition().toPoint(), tip, self)
        self.hovered.emit(tip)

    def mousePressEvent(self, event) -> None:  # noqa: N802 (Qt's name)
        cell = self.cell_at(event.position().toPoint())
        if cell is not None:
            self.step_clicked.emit(cell[1])


class LensView(QWidget):
    """The pane: a line above (the legend, or why there is nothing to show), the map and the DecoderLens table."""

    hovered = Signal(str)
    step_clicked = Signal(int)

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.state: LensState | None = None
        self.message = QLabel()
        self.message.setWordWrap(True)
        self.map = LensMap()
        self.map.hovered.connect(self.hovered)
        self.map.step_clicked.connect(self.step_clicked)
        scroll = QScrollArea()
        scroll.setWidget(self.map)
        scroll.setWidgetResizable(True)
        self.table = QTableWidget(0, 3)
        self.table.setHorizontalHeaderLabels(["encoder layer", "NLL", "greedy output"])
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.verticalHeader().setVisible(False)
        self.table.horizontalHeader().setSectionResizeMode(2, QHeaderView.ResizeMode.Stretch)
        self.table_note = QLabel()
        self.table_note.setWordWrap(True)
        right = QWidget()
        right_layout = QVBoxLayout(right)
        right_layout.setContentsMargins(0, 0, 0, 0)
        self.table_title = QLabel("DecoderLens: the decoder reading each encoder layer")
        right_layout.addWidget(self.table_title)
        right_layout.addWidget(self.table, 1)
        right_layout.addWidget(self.table_note)
        right_layout.addStretch(0)
        self.splitter = QSplitter(Qt.Orientation.Horizontal)
        self.splitter.addWidget(scroll)
        self.splitter.addWidget(right)
        self.splitter.setStretchFactor(0, 3)
        self.splitter.setStretchFactor(1, 2)
        self.splitter.setCollapsible(0, False)
        scroll.setMinimumWidth(240)
        scroll.setMinimumHeight(36)  # the dock may be short: the map scrolls (QScrollArea's own least is 70 px)
        self.sized = False  # the splitter's first sizes are set once there is something to show
        layout = QVBoxLayout(self)
        layout.setContentsMargins(2, 2, 2, 2)
        layout.setSpacing(2)
        layout.addWidget(self.message)
        layout.addWidget(self.splitter, 1)

    def show_lens(self, state: LensState) -> None:
        self.state = state
        self.message.setText(state.legend)
        self.map.show_state(state)
        self.table.setRowCount(len(state.encoder))
        for row, reading in enumerate(state.encoder):
            for column, text in enumerate((str(reading.layer) if reading.layer else "0 (embeddings)",
                                           f"{reading.nll:.3f}", reading.output)):
                item = QTableWidgetItem(text)
                item.setToolTip(text)
                self.table.setItem(row, column, item)
        self.table.resizeColumnsToContents()
        self.table.horizontalHeader().setSectionResizeMode(2, QHeaderView.ResizeMode.Stretch)
        self.table.setVisible(bool(state.encoder))
        self.table_title.setVisible(bool(state.encoder))
        self.table_note.setText(state.encoder_note)
        self.table_note.setVisible(bool(state.encoder_note))
        if not self.sized and self.splitter.width() > 0:  # the map three fifths, whatever the table's texts ask
            self.sized = True
            self.splitter.setSizes([self.splitter.width() * 3 // 5, self.splitter.width() * 2 // 5])

    def clear(self, message: str) -> None:
        self.state = None
        self.message.setText(message)
        self.map.show_state(None)
        self.table.setRowCount(0)
        self.table_note.setText("")
