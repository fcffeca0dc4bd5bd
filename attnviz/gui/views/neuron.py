"""The Neuron pane: how one head computes one query's attention (attnviz/state/neuron_view.py ``NeuronState``).

Top: the query vector q (one row of head_dim cells) over the key vectors k (a row per key). Below: q ⊙ k (a row
per key; each row sums to the dot product), and beside it, per key, the numbers on the way to the weight: q·k,
× scale, the soft-cap and the bias where the model has them, the score the softmax reads and the softmax itself.
Vectors are drawn blue (negative) to red (positive), q, k and q ⊙ k each on its own symmetric scale; hovering a
cell reads it out. The query token is chosen in the box above, or by clicking a row of the focus heatmap.
"""

from __future__ import annotations

import numpy as np
from PySide6.QtCore import QRectF, Qt, Signal
from PySide6.QtGui import QColor, QFont, QFontMetrics, QImage, QPainter, QPalette
from PySide6.QtWidgets import QComboBox, QHBoxLayout, QLabel, QScrollArea, QSizePolicy, QVBoxLayout, QWidget

from ...state.neuron_view import NeuronState, diverging_rgb

NUMBER_WIDTH = 46  # pixels of one per-key number column
GAP = 8


def as_image(rgb: np.ndarray) -> QImage:
    rows, cols, _ = rgb.shape
    image = QImage(rgb.data, cols, rows, cols * 3, QImage.Format.Format_RGB888)
    return image.copy()  # owns its pixels once the array goes


class NeuronCanvas(QWidget):
    """The drawing: blocks laid out from the widget's width; ``hovered`` reads out the cell under the mouse."""

    hovered = Signal(str)

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.state: NeuronState | None = None
        self.images: dict[str, QImage] = {}
        self.visible_rows = (0, 0)  # the widget's exposed pixel rows at the last paint
        self.setMouseTracking(True)
        font = QFont(self.font())
        font.setPointSizeF(max(7.0, font.pointSizeF() * 0.85))
        self.setFont(font)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)

    def show_state(self, state: NeuronState | None) -> None:
        self.state = state
        self.images = {}
        if state is not None:
            self.images = {"q": as_image(diverging_rgb(state.query[None], state.query_limit)),
                           "k": as_image(diverging_rgb(state.keys, state.vector_limit)),
                           "q⊙k": as_image(diverging_rgb(state.products, state.product_limit))}
        self.setMinimumHeight(self._height())
        self.updateGeometry()
        self.update()

    # --- the layout -----------------------------------------------------------------------------------
    def _row(self) -> int:
        return QFontMetrics(self.font()).height() + 1

    def _label_width(self) -> int:
        if self.state is None:
            return 0
        metrics = QFontMetrics(self.font())
        widest = max([metrics.horizontalAdvance(label) for label in [*self.state.key_labels, "q"]])
        return min(widest + 6, 80)

    def _side_by_side(self) -> bool:
        """Whether k and q ⊙ k fit beside each other (and the numbers beside them) at two pixels a dimension."""
        numbers = len(self.state.columns) * NUMBER_WIDTH
        return (self.width() - self._label_width() - numbers - 3 * GAP) / 2 >= 2 * self.state.head_dim

    def _blocks(self) -> dict[str, QRectF]:
        """Where each block is drawn: q, k, q⊙k and the numbers (a row per key in each but q). Side by side where
        the width allows; else stacked, each as wide as the pane, the numbers under q ⊙ k."""
        state, row = self.state, self._row()
        keys, numbers = len(state.key_labels), len(state.columns) * NUMBER_WIDTH
        left = float(self._label_width())
        top = float(row)  # the header row
        if self._side_by_side():
            width = (self.width() - left - numbers - 3 * GAP) / 2
            k = QRectF(left, top + row + 2, width, keys * row)
            product = QRectF(k.right() + GAP, k.top(), width, keys * row)
            return {"q": QRectF(left, top, width, row), "k": k, "q⊙k": product,
                    "numbers": QRectF(product.right() + GAP, k.top(), numbers, keys * row)}
        width = max(float(state.head_dim), self.width() - left - GAP)
        k = QRectF(left, top + row + 2, width, keys * row)
        product = QRectF(left, k.bottom() + 2 * row, width, keys * row)
        return {"q": QRectF(left, top, width, row), "k": k, "q⊙k": product,
                "numbers": QRectF(left, product.bottom() + 2 * row, numbers, keys * row)}

    def _height(self) -> int:
        if self.state is None:
            return 0
        return int(max(self._blocks()["q⊙k"].bottom(), self._blocks()["numbers"].bottom())) + 4

    def resizeEvent(self, event) -> None:  # noqa: N802 (Qt's name)
        super().resizeEvent(event)
        self.setMinimumHeight(self._height())

    # --- drawing --------------------------------------------------------------------------------------
    def paintEvent(self, event) -> None:  # noqa: N802 (Qt's name)
        if self.state is None:
            return
        exposed = event.rect()  # inside a scroll area, only what is in view: the labels and numbers of those rows
        self.visible_rows = (max(0, exposed.top()), exposed.bottom() + 1)
        painter = QPainter(self)
        state, blocks, row = self.state, self._blocks(), self._row()
        text = self.palette().color(QPalette.ColorRole.Text)
        painter.setPen(text)
        for name in ("q", "k", "q⊙k"):
            painter.drawImage(blocks[name], self.images[name])
        header = f"k: {len(state.key_labels)} keys × {state.head_dim} dims" + (" (rotated)" if state.rotated else "")
        painter.drawText(QRectF(blocks["k"].left(), 0, blocks["k"].width(), row), Qt.AlignmentFlag.AlignLeft, header)
        side = self._side_by_side()
        product = blocks["q⊙k"]
        product_header = QRectF(product.left(), (0 if side else product.top() - row - 1), product.width(), row)
        painter.drawText(product_header, Qt.AlignmentFlag.AlignLeft, "q ⊙ k (each row sums to q·k)")
        self._draw_labels(painter, blocks, side=side)
        self._draw_numbers(painter, blocks["numbers"], header_top=blocks["numbers"].top() - row - 1)
        painter.end()

    def _draw_labels(self, painter: QPainter, blocks: dict[str, QRectF], *, side: bool) -> None:
        state, row, width = self.state, self._row(), self._label_width() - 4
        metrics = QFontMetrics(self.font())
        right = Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter
        painter.drawText(QRectF(0, blocks["q"].top(), width, row), right, "q")
        for block in ("k",) if side else ("k", "q⊙k", "numbers"):
            for index in self._rows_in_view(blocks[block]):
                label = state.key_labels[index]
                name = metrics.elidedText(label, Qt.TextElideMode.ElideRight, width)
                painter.drawText(QRectF(0, blocks[block].top() + index * row, width, row), right, name)

    def _draw_numbers(self, painter: QPainter, area: QRectF, *, header_top: float) -> None:
        state, row = self.state, self._row()
        right = Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter
        text = self.palette().color(QPalette.ColorRole.Text)
        for number, column in enumerate(state.columns):
            left = area.left() + number * NUMBER_WIDTH
            painter.setPen(text)
            painter.drawText(QRectF(left, header_top, NUMBER_WIDTH - 3, row), right, column.name)
            softmax = column.name == "softmax"
            for index in self._rows_in_view(area):
                value = column.values[index]
                cell = QRectF(left, area.top() + index * row, NUMBER_WIDTH - 3, row)
                if softmax:
                    shade = int(255 - 150 * float(np.clip(value, 0.0, 1.0)))
                    painter.fillRect(cell, QColor(shade, shade, 255))
                    painter.setPen(QColor(0, 0, 0))
                if not state.allowed[index]:
                    painter.setPen(QColor(150, 150, 150))
                    shown = "masked" if softmax or column.name == "score" else f"{value:.3g}"
                else:
                    painter.setPen(QColor(0, 0, 0) if softmax else text)
                    shown = f"{value:.3f}" if softmax else f"{value:.3g}"
                painter.drawText(cell, right, shown)

    def _rows_in_view(self, block: QRectF) -> range:
        """The key rows of ``block`` that the exposed part of the widget shows."""
        top, bottom = self.visible_rows
        row, keys = self._row(), len(self.state.key_labels)
        first = max(0, int((top - block.top()) // row))
        return range(first, min(keys, int((bottom - block.top()) // row) + 1))

    # --- the readout ----------------------------------------------------------------------------------
    def mouseMoveEvent(self, event) -> None:  # noqa: N802 (Qt's name)
        if self.state is None:
            return
        line = self.describe(event.position().x(), event.position().y())
        if line:
            self.setToolTip(line)
            self.hovered.emit(line)

    def describe(self, x: float, y: float) -> str:
        """The readout of the cell at widget position (x, y), or ""."""
        state, blocks, row = self.state, self._blocks(), self._row()
        for name in ("q", "k", "q⊙k"):
            block = blocks[name]
            if block.contains(x, y):
                dim = min(int((x - block.left()) / block.width() * state.head_dim), state.head_dim - 1)
                key = None if name == "q" else min(int((y - block.top()) / row), len(state.key_labels) - 1)
                return state.readout(name, key, dim)
        area = blocks["numbers"]
        if area.contains(x, y):
            column = state.columns[min(int((x - area.left()) / NUMBER_WIDTH), len(state.columns) - 1)]
            return state.readout(column.name, min(int((y - area.top()) / row), len(state.key_labels) - 1), None)
        return ""


class NeuronView(QWidget):
    """The pane: a title and the query token box, the drawing, the notes (rotated, scale, soft-cap, bias) and the
    readout. ``query_chosen`` says which query row the user picked in the box."""

    query_chosen = Signal(int)
    hovered = Signal(str)

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.title = QLabel()
        self.title.setTextFormat(Qt.TextFormat.RichText)
        self.title.setWordWrap(True)
        self.notes = QLabel()
        self.query_box = QComboBox()
        self.query_box.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        self.query_box.setMinimumContentsLength(4)
        self.query_box.activated.connect(self.query_chosen)
        self.canvas = NeuronCanvas()
        self.canvas.hovered.connect(self._on_hovered)
        scroll = QScrollArea()
        scroll.setWidgetResizable(True)
        scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        scroll.setWidget(self.canvas)
        self.readout = QLabel("Hover over a cell to read it.")
        self.readout.setWordWrap(True)
        top = QHBoxLayout()
        top.addWidget(self.title, 1)
        top.addWidget(QLabel("Query:"))
        top.addWidget(self.query_box)
        self.query_box.setMaximumWidth(240)
        bottom = QHBoxLayout()
        bottom.addWidget(self.notes, 1)
        bottom.addWidget(self.readout, 1)
        self.readout.setAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 2, 4, 2)
        layout.setSpacing(2)
        layout.addLayout(top)
        layout.addWidget(scroll, 1)
        layout.addLayout(bottom)
        self.setMinimumWidth(60)  # the tab never widens the window: a narrow pane scrolls and elides instead
        self.state: NeuronState | None = None
        self.clear("The neuron view shows how the selected head computes a query's attention: run a sentence.")

    def show_neuron(self, state: NeuronState, query_labels: list[str]) -> None:
        self.state = state
        self.title.setText(state.title)
        self.notes.setText(" · ".join(state.notes))
        self._set_queries(query_labels, state.query_row)
        self.query_box.setEnabled(True)
        self.canvas.show_state(state)

    def clear(self, message: str) -> None:
        self.state = None
        self.title.setText(message)
        self.notes.setText("")
        self.query_box.clear()
        self.query_box.setEnabled(False)
        self.canvas.show_state(None)

    def _set_queries(self, labels: list[str], row: int) -> None:
        names = [f"{index}: {label}" for index, label in enumerate(labels)]
        if [self.query_box.itemText(i) for i in range(self.query_box.count())] != names:
            self.query_box.blockSignals(True)
            self.query_box.clear()
            self.query_box.addItems(names)
            self.query_box.blockSignals(False)
        self.query_box.setCurrentIndex(row)

    def _on_hovered(self, line: str) -> None:
        self.readout.setText(line)
        self.hovered.emit(line)
