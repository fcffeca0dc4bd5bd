"""Token labels on a plot's axis: as many as fit, level or upright, in staggered lanes when they crowd (the
heatmap's rows and columns, the decoding panel's bars)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QPointF, QRectF, Qt
from PySide6.QtGui import QFont, QFontMetricsF



LABEL_GAP = 4  # px kept between neighbouring labels along an axis
LANE_GAP = 6  # px between lanes of staggered labels
LEVEL, UPRIGHT = False, True  # a label's direction: level (left to right) or upright (read bottom to top)
# Column labels that do not fit their cells level try these (direction, lanes) in turn; rows are always level.
# Two staggered level lines read more easily than upright text; a character model's labels need three.
COLUMN_LAYOUTS = ((LEVEL, 1), (LEVEL, 2), (UPRIGHT, 1), (UPRIGHT, 2), (LEVEL, 3), (UPRIGHT, 3))
ROW_LAYOUTS = ((LEVEL, 1), (LEVEL, 2), (LEVEL, 3))


@dataclass(frozen=True)
class TokenLabels:
    """An axis' token labels measured once in its font, so a pan or zoom frame only reads numbers."""

    tokens: list[str]
    widths: np.ndarray  # px: each label's width
    line: float  # px: a label's height

    @cached_property
    def widest(self) -> float:
        return float(self.widths.max(initial=0.0))


@dataclass(frozen=True)
class TickLayout:
    """Which tokens an axis labels and how: ``lanes`` parallel lines taken in turn (a label's neighbours sit on
    other lines, so it may be wider than its cell), each ``lane`` px deep; ``upright`` labels read bottom to top."""

    ticks: list[tuple[int, str]]
    lanes: int = 1
    upright: bool = False
    lane: float = 0.0

    @property
    def depth(self) -> float:
        """Pixels the labels take across the axis."""
        return _stacked(self.lanes, self.lane) if self.ticks else 0.0


def _stacked(lanes: int, lane: float) -> float:
    return lanes * lane + (lanes - 1) * LANE_GAP


def lane_depth(labels: TokenLabels, upright: bool, rows: bool) -> float:
    """Pixels one lane of labels takes across its axis: a line for level column labels, else the widest label."""
    return labels.widest if upright or rows else labels.line


def possible_depths(labels: TokenLabels, rows: bool) -> list[float]:
    """Every depth an axis' labels can take (``rows``: a vertical axis), 0 for none."""
    layouts = ROW_LAYOUTS if rows else COLUMN_LAYOUTS
    return sorted({0.0} | {_stacked(lanes, lane_depth(labels, upright, rows=rows)) for upright, lanes in layouts})


def column_ticks(labels: TokenLabels, span: tuple[float, float], cell: float, anchor: int = 0) -> TickLayout:
    """Labels for the columns between ``span``'s ends (``cell``: pixels per token), each in full."""
    shown = _shown(labels, span)
    extents = {LEVEL: (labels.widths[shown.start:shown.stop], lane_depth(labels, LEVEL, rows=False)),
               UPRIGHT: (np.full(len(shown), labels.line), lane_depth(labels, UPRIGHT, rows=False))}
    options = [(direction, lanes, *extents[direction]) for direction, lanes in COLUMN_LAYOUTS]
    return _layout(labels, shown, cell=cell, options=options, anchor=anchor, gap=LABEL_GAP)


def row_ticks(labels: TokenLabels, span: tuple[float, float], cell: float, anchor: int = 0,
              most_lanes: int = 3) -> TickLayout:
    """Labels for the rows between ``span``'s ends: lines of text stacked along the axis need no gap; at most
    ``most_lanes`` lanes (a bar chart's rows read best on one: it thins them instead)."""
    shown = _shown(labels, span)
    lines = np.full(len(shown), labels.line)
    options = [(direction, lanes, lines, lane_depth(labels, direction, rows=True)) for direction, lanes in ROW_LAYOUTS
               if lanes <= most_lanes]
    return _layout(labels, shown, cell=cell, options=options, anchor=anchor, gap=0)


def _layout(labels: TokenLabels, shown: range, *, cell: float, options: list[tuple[bool, int, np.ndarray, float]],
            anchor: int, gap: float) -> TickLayout:
    """The first of ``options`` (direction, lanes, the shown labels' extents along the axis, a lane's depth)
    that labels every token in ``shown``. When none does (zoomed out), every n-th token, in full, counted from
    ``anchor`` (a token that must keep its label), in the direction that needs the least room: zooming in
    shows the rest. A cut label (``_…``) would say nothing. ``gap``: pixels kept between neighbours."""
    for upright, lanes, extents, lane in options:
        if _room_needed(extents, lanes=lanes, gap=gap) <= lanes * cell:
            return TickLayout([(index, labels.tokens[index]) for index in shown], lanes=lanes, upright=upright,
                              lane=lane)
    upright, _, extents, lane = min(options, key=lambda option: option[2].max(initial=0.0))
    every = int(np.ceil((extents.max(initial=0.0) + gap) / max(cell, 1e-6)))
    first = shown.start + (anchor - shown.start) % every
    return TickLayout([(index, labels.tokens[index]) for index in range(first, shown.stop, every)], upright=upright,
                      lane=lane)


def _room_needed(extents: np.ndarray, lanes: int, gap: float) -> float:
    """Pixels between the centres of two labels on one lane (``lanes`` tokens apart) that keep them apart:
    half of each, centred on its cell, and a gap."""
    if len(extents) <= lanes:
        return 0.0
    return float(((extents[:-lanes] + extents[lanes:]) / 2).max()) + gap


def _shown(labels: TokenLabels, span: tuple[float, float]) -> range:
    """The tokens whose cell centres lie in ``span``."""
    low, high = span
    return range(max(0, int(np.ceil(low))), min(len(labels.tokens) - 1, int(np.floor(high))) + 1)


RIGHT_MIDDLE = int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter | Qt.TextFlag.TextDontClip)
CENTRE_TOP = int(Qt.AlignmentFlag.AlignHCenter | Qt.AlignmentFlag.AlignTop | Qt.TextFlag.TextDontClip)


class TokenAxis(pg.AxisItem):
    """An axis of token labels drawn by itself: pyqtgraph writes tick labels level on one line only and drops
    those that overlap, so long tokens were cut or lost. Labels here stay whole: level, staggered over lanes
    or upright (``TickLayout``), and only the tokens in view are drawn. Rows on the left, columns at the bottom.
    """

    def __init__(self, orientation: str, *, most_lanes: int = 3):
        if orientation not in ("left", "bottom"):
            raise ValueError(f"token labels go on the left or at the bottom, not {orientation!r}")
        super().__init__(orientation)
        self.rows = orientation == "left"
        self.most_lanes = most_lanes
        self.setStyle(tickLength=0, autoExpandTextSpace=True)
        # Cell positions are no quantity: a one-row map (a run's first step) spans 1 unit, which pyqtgraph
        # would otherwise scale by an SI prefix, naming the axis "queries (x0.001)".
        self.enableAutoSIPrefix(False)
        self.labels = TokenLabels([], widths=np.zeros(0), line=0.0)
        self.layout = TickLayout([])

    def tick_font(self) -> QFont:
        return self.style["tickFont"] or self.font()

    def resizeEvent(self, ev=None) -> None:  # noqa: N802 (Qt's name)
        super().resizeEvent(ev)
        self._place_name()

    def _updateLabel(self) -> None:  # noqa: N802 (pyqtgraph's name: a new name, placed only at the next resize)
        super()._updateLabel()
        self._place_name()

    def _place_name(self) -> None:
        """pyqtgraph centres the axis' name along it; a row axis shorter than its name (a short window) would
        push the name past the plot's top edge, cut off. It starts at the axis' top there instead and runs on
        into the empty corner under the row labels."""
        if self.orientation != "left" or self.label is None:  # (resized while pyqtgraph builds it, too)
            return
        length = self.label.boundingRect().width()
        centred = int(self.size().height() / 2 + length / 2)  # where the upright name starts, at its bottom
        self.label.setPos(QPointF(self.label.pos().x(), max(centred, int(np.ceil(length)))))

    def name_length(self) -> float:
        """How long the axis' name runs along it, in pixels."""
        return self.label.boundingRect().width() if self.label.isVisible() else 0.0

    def setTickFont(self, font) -> None:  # noqa: N802 (pyqtgraph's name)
        super().setTickFont(font)
        self.set_tokens(self.labels.tokens)  # measured again in the new font

    def set_tokens(self, tokens: list[str]) -> None:
        metrics = QFontMetricsF(self.tick_font())
        self.prepareGeometryChange()  # the first and last labels reach past the axis' ends by their widths
        self.labels = TokenLabels(list(tokens), widths=np.array([metrics.horizontalAdvance(token) for token in tokens]),
                                  line=metrics.height())

    def fit(self, span: tuple[float, float], cell: float, anchor: int = 0) -> None:
        """Label the tokens between ``span``'s ends, ``cell`` pixels apart, keeping ``anchor``'s label."""
        self.show_layout(self.layout_for(span, cell=cell, anchor=anchor))

    def layout_for(self, span: tuple[float, float], cell: float, anchor: int = 0) -> TickLayout:
        if self.rows:
            return row_ticks(self.labels, span, cell=cell, anchor=anchor, most_lanes=self.most_lanes)
        return column_ticks(self.labels, span, cell=cell, anchor=anchor)

    def show_layout(self, layout: TickLayout) -> None:
        """Draw ``layout``, the axis as deep as its labels."""
        self.prepareGeometryChange()  # the bounding rect follows the labels' depth
        self.layout = layout
        self.setTicks([layout.ticks])
        depth = int(np.ceil(layout.depth))
        if self.rows and depth != self.textWidth:
            self.textWidth = depth
            self._updateWidth()
        elif not self.rows and depth != self.textHeight:
            self.textHeight = depth
            self._updateHeight()

    def size_for(self, depth: float) -> float:
        """The axis' size across for labels ``depth`` pixels deep: they, the space before them and the axis'
        name (pyqtgraph's sum)."""
        named = self.label.boundingRect().height() * 0.8 if self.label.isVisible() else 0.0
        return int(np.ceil(depth)) + self.style["tickTextOffset"][0 if self.rows else 1] + named

    def depths(self) -> list[float]:
        """Every depth this axis' labels can take: a few, one per layout (none when it has no labels)."""
        return possible_depths(self.labels, rows=self.rows)

    def boundingRect(self) -> QRectF:  # noqa: N802 (Qt's name)
        """The axis with everything its labels draw: the first and last labels' overhang along it, and across
        it the labels' full depth where the layout gave the axis less room than they take (else what a
        previous layout drew there would stay on screen)."""
        reach = self.labels.widest / 2 + self.labels.line
        rect = super().boundingRect()
        drawn = self.style["tickTextOffset"][0 if self.rows else 1] + self.layout.depth
        if self.rows:
            return rect.adjusted(-max(0.0, drawn - rect.width()), -reach, 0, reach)
        return rect.adjusted(-reach, 0, reach, max(0.0, drawn - rect.height()))

    def generateDrawSpecs(self, p):  # noqa: N802 (pyqtgraph's name)
        """The axis line and, per label, where its lane starts (a point on the axis' text side) and its text."""
        bounds = self.mapRectFromParent(self.geometry())
        if self.rows:
            line = (bounds.topRight() + QPointF(-1, -1), bounds.bottomRight() + QPointF(-1, 1))
        else:
            line = (bounds.topLeft() + QPointF(-1, 1), bounds.topRight() + QPointF(1, 1))
        offset = self.style["tickTextOffset"][0 if self.rows else 1]
        labels = []
        for index, text in self.layout.ticks:
            position = self._pixel(index, bounds)
            into = offset + (index % self.layout.lanes) * (self.layout.lane + LANE_GAP)
            labels.append((QPointF(bounds.right() - into, position) if self.rows
                           else QPointF(position, bounds.top() + into), text))
        return (self.pen(), *line), [], labels

    def _pixel(self, value: float, bounds: QRectF) -> float:
        """Where ``value`` lies along the axis, in the axis' coordinates (pyqtgraph's own mapping)."""
        low, high = self.range
        if high == low:
            return 0.0
        if self.rows:
            return bounds.height() - (value - low) * bounds.height() / (high - low)
        return (value - low) * bounds.width() / (high - low)

    def drawPicture(self, p, axisSpec, tickSpecs, textSpecs) -> None:  # noqa: N802, N803 (pyqtgraph's names)
        pen, start, end = axisSpec
        p.setRenderHint(p.RenderHint.Antialiasing, False)
        p.setRenderHint(p.RenderHint.TextAntialiasing, True)
        p.setPen(pen)
        p.drawLine(start, end)
        p.setFont(self.tick_font())
        p.setPen(self.textPen())
        line, lane = self.labels.line, self.layout.lane
        for point, text in textSpecs:
            if self.rows:
                p.drawText(QRectF(point.x() - lane, point.y() - line / 2, lane, line), RIGHT_MIDDLE, text)
            elif self.layout.upright:  # the text ends at the axis and runs down from it, bottom to top
                p.save()
                p.translate(point)
                p.rotate(-90)
                p.drawText(QRectF(-lane, -line / 2, lane, line), RIGHT_MIDDLE, text)
                p.restore()
            else:
                p.drawText(QRectF(point.x(), point.y(), 0, line), CENTRE_TOP, text)
