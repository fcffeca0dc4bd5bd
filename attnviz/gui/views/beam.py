"""The beam: its final hypotheses, and a drawn tree of every hypothesis it kept — tokens as nodes, steps
left to right, the chosen hypothesis' path highlighted, probability and score on hover. Readable at
width 8 and depth 60: the view scrolls and zooms (wheel), and a double-click fits it all."""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QBrush, QColor, QFont, QFontMetricsF, QPainter, QPainterPath, QPen
from PySide6.QtWidgets import (QApplication, QGraphicsScene, QGraphicsSimpleTextItem, QGraphicsView, QLabel,
                               QListWidget, QListWidgetItem, QSplitter, QVBoxLayout, QWidget)

from ...state.viewmodel import BeamState
from .style import HIGHLIGHT

STEP_WIDTH = 92.0  # scene units between steps
SLOT_HEIGHT = 22.0  # between leaves
NODE_TEXT = 11  # px


class BeamGraph(QGraphicsView):
    """Nodes and edges of a ``BeamState``; ``highlight(rank)`` marks one hypothesis' path; a click on a node emits
    its index (``node_clicked``)."""

    node_clicked = Signal(int)

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.setScene(QGraphicsScene(self))
        self.setRenderHint(QPainter.RenderHint.Antialiasing)
        self.setDragMode(QGraphicsView.DragMode.ScrollHandDrag)
        self.setTransformationAnchor(QGraphicsView.ViewportAnchor.AnchorUnderMouse)
        self.state: BeamState | None = None
        self.labels: list[QGraphicsSimpleTextItem] = []
        self.edges: list[tuple[int, object]] = []  # (child node, its edge item)
        self.chosen: set[int] = set()

    def show_beam(self, state: BeamState) -> None:
        scene = self.scene()
        scene.clear()
        self.state, self.labels, self.edges = state, [], []
        font = QFont(self.font())
        font.setPixelSize(NODE_TEXT)
        for index, node in enumerate(state.nodes):
            x, y = node.depth * STEP_WIDTH, node.slot * SLOT_HEIGHT
            if node.parent >= 0:
                parent = state.nodes[node.parent]
                path = QPainterPath()
                start_x = parent.depth * STEP_WIDTH + self._width(parent.token, font)
                start_y = parent.slot * SLOT_HEIGHT
                path.moveTo(start_x + 2, start_y)
                path.cubicTo(x - 20, start_y, start_x + 22, y, x - 2, y)
                self.edges.append((index, scene.addPath(path, QPen(QColor(150, 150, 150), 1))))
            label = QGraphicsSimpleTextItem(node.token or "∅")
            label.setFont(font)
            label.setPos(x, y - NODE_TEXT * 0.7)
            label.setToolTip(f"{node.token}\np = {node.probability:.3f}\nscore {node.score:.3f}"
                             + ("\nfinished" if node.finished else ""))
            scene.addItem(label)
            self.labels.append(label)
        scene.setSceneRect(scene.itemsBoundingRect().adjusted(-10, -10, 10, 10))
        self.highlight(0)

    @staticmethod
    def _width(token: str, font: QFont) -> float:
        from PySide6.QtGui import QFontMetricsF

        return QFontMetricsF(font).horizontalAdvance(token or "∅")

    def highlight(self, rank: int) -> None:
        """Draw hypothesis ``rank``'s path in the highlight colour (bold), every other node plain."""
        if self.state is None:
            return
        self.chosen = set(self.state.paths[rank]) if 0 <= rank < len(self.state.paths) else set()
        for index, label in enumerate(self.labels):
            node = self.state.nodes[index]
            on_path = index in self.chosen
            font = label.font()
            font.setBold(on_path or node.finished)
            label.setFont(font)
            colour = QColor(HIGHLIGHT) if on_path else self.palette().text().color()
            if node.finished and not on_path:
                colour.setAlpha(170)
            label.setBrush(QBrush(colour))
        for child, edge in self.edges:
            on_path = child in self.chosen
            edge.setPen(QPen(QColor(HIGHLIGHT) if on_path else QColor(150, 150, 150), 2.2 if on_path else 1))
            edge.setZValue(1 if on_path else 0)
        if self.chosen:
            self.centerOn(self.labels[self.state.paths[rank][-1]])

    def fit(self) -> None:
        self.fitInView(self.scene().sceneRect(), Qt.AspectRatioMode.KeepAspectRatio)

    def wheelEvent(self, event) -> None:  # noqa: N802 (Qt's name)
        factor = 1.15 if event.angleDelta().y() > 0 else 1 / 1.15
        self.scale(factor, factor)

    def mouseDoubleClickEvent(self, event) -> None:  # noqa: N802
        self.fit()

    def mousePressEvent(self, event) -> None:  # noqa: N802 (Qt's name)
        super().mousePressEvent(event)
        item = self.itemAt(event.position().toPoint())
        if event.button() == Qt.MouseButton.LeftButton and item in self.labels:
            self.node_clicked.emit(self.labels.index(item))


class BeamPanel(QWidget):
    """Final hypotheses with scores, and the beam graph; picking a hypothesis emits its index."""

    hypothesis_chosen = Signal(int)

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.hypotheses = QListWidget()
        self.hypotheses.setToolTip("Final hypotheses, best first: pick one to see its own attention")
        self.hypotheses.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAsNeeded)
        self.graph = BeamGraph()
        self.graph.setToolTip("Every hypothesis the beam kept, step by step (wheel: zoom, drag: pan, double-click: "
                              "all); the picked hypothesis is highlighted. Click a sibling of its token to explain "
                              "why its token and not that one (contrastive methods)")
        split = QSplitter(Qt.Orientation.Vertical)
        split.addWidget(self.hypotheses)
        split.addWidget(self.graph)
        split.setSizes([60, 140])
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(QLabel("Hypotheses"))
        layout.addWidget(split, 1)
        for view in (self.hypotheses, self.graph):  # showing the beam must not grow the window
            view.setMinimumHeight(40)
        self.hypotheses.currentRowChanged.connect(self._on_row)

    def set_text_scale(self, scale: float) -> None:
        """Presentation mode's larger text (1: the usual): the list shows three hypotheses at least, the tree four
        rows of tokens high (they were one row and a 60-pixel strip)."""
        line = QFontMetricsF(QApplication.font()).lineSpacing()  # the list's own font follows it only later
        self.hypotheses.setMinimumHeight(40 if scale <= 1 else int(3.5 * line + 8))
        self.graph.setMinimumHeight(40 if scale <= 1 else int(4 * line))

    def _on_row(self, row: int) -> None:
        if row >= 0:
            self.graph.highlight(row)
            self.hypothesis_chosen.emit(row)

    def show_beam(self, state: BeamState, chosen: int = 0) -> None:
        """Show the hypotheses with ``chosen`` (a rank, best first) picked and its path highlighted."""
        chosen = chosen if 0 <= chosen < len(state.hypotheses) else 0
        self.hypotheses.blockSignals(True)
        self.hypotheses.clear()
        for line, tooltip in state.hypotheses:
            item = QListWidgetItem(line)
            item.setToolTip(f"{line}\n{tooltip}")
            self.hypotheses.addItem(item)
        self.hypotheses.setCurrentRow(chosen if state.hypotheses else -1)
        self.hypotheses.blockSignals(False)
        self.graph.show_beam(state)
        if chosen:
            self.graph.highlight(chosen)
