"""The focus view: one attention matrix, large, with token labels, colour bar, hover readout, crosshair,
the decoding step highlighted and masked cells hatched."""

from __future__ import annotations

import html
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cached_property
from typing import Iterator

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QPointF, QRectF, Qt, Signal
from PySide6.QtGui import QColor, QFont, QFontMetricsF, QPen
from PySide6.QtWidgets import QGraphicsRectItem, QLabel, QVBoxLayout, QWidget

from ...state.viewmodel import HeatmapState, unrevealed
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
PLOT_MARGINS = 20  # px of the heatmap's height above its rows and under its column labels' axis
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


COLOUR_BAR_AXIS_WIDTH = 45  # px: pyqtgraph's ColorBarItem's axis, for the usual font


class HeatmapView(QWidget):
    """Shows ``[query, key]`` weights in [0, 1]; rows are queries (top to bottom), columns keys."""

    hovered = Signal(str)

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.title = QLabel("The attention appears here once a sentence has run.")
        self.title.setObjectName("heatmapTitle")
        self.title.setWordWrap(True)  # a method's long title (ALTI+ rollout's) wraps instead of widening the window
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
        axes = {name: TokenAxis(name) for name in ("left", "bottom")}
        self.plot = self.graphics.addPlot(row=0, col=0, axisItems=axes)
        self.plot.invertY(True)
        self.plot.hideButtons()
        self.plot.setMenuEnabled(False)
        self.plot.getViewBox().setMouseEnabled(x=True, y=True)
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
        for item in (self.image, self.overlay, self.not_a_number, self.unrevealed,
                     self.step_box, self.vline, self.hline):
            self.plot.addItem(item)
        self.vline.hide()
        self.hline.hide()
        self.colorbar = pg.ColorBarItem(values=(0, 1), colorMap=pg.colormap.get(DEFAULT_COLORMAP),
                                        interactive=False, width=14, colorMapMenu=False)
        self.colorbar.axis.enableAutoSIPrefix(False)  # plain weights: B − A's ±0.0009 is not "±900 (x0.001)"
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
        self._fit_colour_bar(font)
        self._keep_room_for_names()
        self._update_ticks()

    def _fit_colour_bar(self, font) -> None:
        """The colour bar's numbers and name in ``font`` (None: the default), its axis as wide as they need: with
        the larger text of a presentation, the name was drawn over the numbers (the axis kept its width)."""
        axis = self.colorbar.axis
        axis.setTickFont(font)
        tick_font = font if font is not None and font.pointSizeF() > 0 else axis.font()
        original = self.__dict__.setdefault("_colour_bar_label_font", axis.label.font())
        named = original if font is None or font.pointSizeF() <= 0 else type(font)(font)
        if named is not original:
            named.setPointSizeF(font.pointSizeF() * 0.8)
        axis.label.setFont(named)
        if named is original:
            axis.setWidth(COLOUR_BAR_AXIS_WIDTH)  # pyqtgraph's ColorBarItem's own
        else:  # as wide as the numbers, the ticks and the name need (pyqtgraph's sum)
            axis.textWidth = QFontMetricsF(tick_font).horizontalAdvance("−0.000") + 2
            axis.setWidth(None)
        axis.resizeEvent()  # the name placed at the new width

    def show_heatmap(self, state: HeatmapState) -> None:
        self.show_matrix(state.matrix, state.mask, query_tokens=state.query_labels, key_tokens=state.key_labels,
                         title=state.title, axis_names=state.axis_names, levels=state.levels)
        self.approximate = state.approximate
        self.revealed = state.revealed
        self.colorbar.setToolTip(state.note)
        self.legend.setText(f"{LEGEND} <span style='color:gray'>· {html.escape(state.note)}</span>" if state.note
                            else LEGEND)
        if self.colorbar.axis.labelText != state.scale_title:
            self.colorbar.axis.setLabel(state.scale_title)
            # pyqtgraph centres an axis' name only when the axis is resized: a new, longer name kept the place
            # of the old one, off centre, and past the bar's top on a short plot ("share of outpu")
            self.colorbar.axis.resizeEvent()
        if state.revealed is not None:
            self.unrevealed.setImage(unrevealed_cells(state.matrix.shape, state.revealed), autoLevels=False)
            self.unrevealed.setRect(QRectF(-0.5, -0.5, state.matrix.shape[1], state.matrix.shape[0]))
        self.set_step(state.step_row)

    def show_matrix(self, matrix: np.ndarray, mask: np.ndarray | None, query_tokens: list[str],
                    key_tokens: list[str], *, title: str = "", axis_names: tuple[str, str] = ("queries", "keys"),
                    levels: tuple[float, float] = (0.0, 1.0)) -> None:
        """Replace the data; items are reused, only images, ticks and ranges change. ``levels``: the weights
        drawn at the two ends of the colormap, shown on the colour bar."""
        rows, cols = matrix.shape
        self.approximate = False  # show_heatmap says when the weights are half precision (the view-model decides)
        self.revealed = None  # and how much of a decoder map is generated yet, step by step
        self.unrevealed.clear()
        self.matrix = np.ascontiguousarray(matrix, dtype=np.float32)
        self._set_tokens(query_tokens, key_tokens)
        self.mask = mask
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
        self._keep_room_for_names()
        self.plot.getViewBox().setLimits(xMin=-0.5, xMax=cols - 0.5, yMin=-0.5, yMax=rows - 0.5)
        self.plot.getViewBox().setRange(rect, padding=0)
        self._update_ticks()
        self.title.setText(title)
        self._update_badge()
        self.clear_hover()  # it described a cell of the matrix shown before

    def _keep_room_for_names(self) -> None:
        """The heatmap never gets shorter than the rows' axis name (which may run on into the corner under the
        rows): the least height a small window leaves it is taken from the docks, not from the name."""
        length = self.plot.getAxis("left").name_length()
        self.graphics.setMinimumHeight(max(FOCUS_MIN_HEIGHT, int(np.ceil(length)) + PLOT_MARGINS))

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

    def _set_tokens(self, query_tokens: list[str], key_tokens: list[str]) -> None:
        self.query_tokens, self.key_tokens = query_tokens, key_tokens
        self.plot.getAxis("left").set_tokens(query_tokens)
        self.plot.getAxis("bottom").set_tokens(key_tokens)

    def _update_ticks(self, *_) -> None:
        """Label the tokens in the visible range, each in full: all of them once zoomed in far enough.

        The two axes share the plot's room: deeper row labels leave the columns narrower cells and deeper
        column labels the rows lower ones. Laid out one axis at a time, each resize changed the other axis'
        labels and the two took turns for ever; so both are chosen together, from the room the view and its
        axes have in all, and the same room always gives the same labels.
        """
        view = self.plot.getViewBox()
        left, bottom = self.plot.getAxis("left"), self.plot.getAxis("bottom")
        (x_low, x_high), (y_low, y_high) = view.viewRange()
        height, width = view.height() + bottom.height(), view.width() + left.width()
        row_span, column_span = max(y_high - y_low, 1e-6), max(x_high - x_low, 1e-6)
        rows = {depth: left.layout_for((y_low, y_high), cell=(height - bottom.size_for(depth)) / row_span)
                for depth in bottom.depths()}  # for each depth the column labels may take
        columns = {depth: bottom.layout_for((x_low, x_high), cell=(width - left.size_for(depth)) / column_span)
                   for depth in left.depths()}
        fitting = [(rows[column_depth], columns[row_depth], row_depth + column_depth)
                   for row_depth in columns for column_depth in rows
                   if rows[column_depth].depth <= row_depth and columns[row_depth].depth <= column_depth]
        most_labels = lambda pair: (len(pair[0].ticks) + len(pair[1].ticks), -pair[2])  # noqa: E731
        row_layout, column_layout, _ = max(fitting, key=most_labels)  # then the least room taken
        left.show_layout(row_layout)
        bottom.show_layout(column_layout)

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
        self.matrix, self.mask = np.zeros((1, 1), np.float32), None
        self._set_tokens([], [])
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
