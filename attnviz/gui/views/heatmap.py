"""The focus view: one attention matrix, large, with token labels, colour bar, hover readout, crosshair,
the decoding step highlighted and masked cells hatched."""

from __future__ import annotations

import html
from contextlib import contextmanager
from typing import Iterator

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QPointF, QRectF, Qt, Signal
from PySide6.QtGui import QColor, QFontMetricsF, QPen
from PySide6.QtWidgets import QGraphicsRectItem, QLabel, QMenu, QVBoxLayout, QWidget

from ...state.readout import ATTENTION_UNIT, cell_readout, hover_hint
from ...state.viewmodel import HeatmapState, unrevealed
from .style import DEFAULT_COLORMAP, HIGHLIGHT, hatch, lookup_table
from .token_axis import TokenAxis

LEGEND = (f"<span style='color:gray'>▨ masked: not allowed to attend · <span style='color:{HIGHLIGHT}'>▭</span> "
          "current decoding step · <span style='color:#c62828'>⚠</span> weight on a masked cell</span>")
HOVER_HINT = hover_hint()
BOUNDARY_COLOUR = "#ff9800"  # the line where a decoder-only model's prompt ends
BOUNDARY_LEGEND = f"<span style='color:gray'> · <span style='color:{BOUNDARY_COLOUR}'>┃</span> prompt end</span>"
MASK_HINT = " Right-click a token to mask it."
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
COLOUR_BAR_AXIS_WIDTH = 45  # px: pyqtgraph's ColorBarItem's axis, for the usual font


class HeatmapView(QWidget):
    """Shows ``[query, key]`` weights in [0, 1]; rows are queries (top to bottom), columns keys."""

    hovered = Signal(str)
    row_clicked = Signal(int)  # a query row clicked (the Neuron pane follows it)
    mask_requested = Signal(int)  # "Mask this token" chosen on a sentence position (an encoder-only model's map)
    chosen_colormap = drawn_colormap = DEFAULT_COLORMAP  # the window's choice; the one drawn
    forced_colormap = ""  # the shown map's own (a signed map's diverging one), over the window's choice

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
        self.legend.setToolTip("Hatched cells: the mask forbids attending there (padding, the future for the "
                               "decoder, the keys beyond a local layer's sliding window). The outlined row: the query "
                               "of the current decoding step. The orange lines: where a language model's prompt "
                               "ends.")
        self.readout.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(6, 4, 6, 4)
        for widget in (self.title, self.badge, self.graphics, self.legend, self.readout):
            layout.addWidget(widget)
        self._build_plot()
        self.matrix = np.zeros((1, 1), dtype=np.float32)
        self.approximate = False
        self.quantity, self.unit = "", ATTENTION_UNIT  # what the hover names a cell's number (state/readout.py)
        self.revealed: tuple[int, int] | None = None
        self.mask: np.ndarray | None = None
        self.query_tokens: list[str] = []
        self.key_tokens: list[str] = []
        self.maskable = False  # the key tokens are a sentence whose tokens a right-click offers to mask

    def set_maskable(self, maskable: bool) -> None:
        """Offer "Mask this token" on a right-click of a key token (an encoder-only model fills masks)."""
        self.maskable = maskable
        self.readout.setText(hover_hint(self.quantity, self.unit) + (MASK_HINT if maskable else ""))

    def token_at(self, scene_position: QPointF) -> int | None:
        """The key token under a point of a cell or of the key axis; a query token of the left axis where the
        queries are the same tokens (self-attention)."""
        point = self.plot.getViewBox().mapSceneToView(scene_position)
        row, col = int(np.floor(point.y() + 0.5)), int(np.floor(point.x() + 0.5))
        if 0 <= col < len(self.key_tokens) and point.y() > -0.5:
            return col
        if 0 <= row < len(self.query_tokens) and self.query_tokens == self.key_tokens:
            return row
        return None

    def token_menu(self, index: int) -> QMenu | None:
        """The right-click menu of key token ``index``: "Mask this token" (emits ``mask_requested``)."""
        if not self.maskable or not 0 <= index < len(self.key_tokens):
            return None
        menu = QMenu(self)
        menu.addAction(f"Mask this token ‘{self.key_tokens[index]}’ and fill it",
                       lambda: self.mask_requested.emit(index))
        return menu

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
        boundary_pen = pg.mkPen(BOUNDARY_COLOUR, width=2)
        self.boundary = (pg.InfiniteLine(angle=90, movable=False, pen=boundary_pen),
                         pg.InfiniteLine(angle=0, movable=False, pen=boundary_pen))
        for line in self.boundary:
            line.setZValue(9)
            line.hide()
        for item in (self.image, self.overlay, self.not_a_number, self.unrevealed,
                     self.step_box, self.vline, self.hline, *self.boundary):
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
        """The window's chosen colormap, drawn where the map shown has none of its own (a signed map's)."""
        self.chosen_colormap = name
        self._draw_colormap(self.forced_colormap or name)

    def _draw_colormap(self, name: str) -> None:
        if name != self.drawn_colormap:
            self.drawn_colormap = name
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
        self.forced_colormap = state.colormap
        self.quantity, self.unit = state.quantity, state.scale_title
        self._draw_colormap(state.colormap or self.chosen_colormap)
        self.show_matrix(state.matrix, state.mask, query_tokens=state.query_labels, key_tokens=state.key_labels,
                         title=state.title, axis_names=state.axis_names, levels=state.levels)
        self.approximate = state.approximate
        self.revealed = state.revealed
        self.colorbar.setToolTip(state.note)
        legend = LEGEND + (BOUNDARY_LEGEND if state.boundary is not None else "")
        self.legend.setText(f"{legend} <span style='color:gray'>· {html.escape(state.note)}</span>" if state.note
                            else legend)
        self.set_boundary(state.boundary)
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
        self.readout.setText(hover_hint(self.quantity, self.unit) + (MASK_HINT if self.maskable else ""))

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
        self.set_boundary(None)
        self.matrix, self.mask = np.zeros((1, 1), np.float32), None
        self._set_tokens([], [])
        self._update_ticks()
        self.badge.hide()
        self.clear_hover()
        self.title.setText(message)

    def set_boundary(self, boundary: int | None) -> None:
        """A line before row and key ``boundary`` on both axes (a decoder-only map's prompt end), or none."""
        for line in self.boundary:
            line.setVisible(boundary is not None)
            if boundary is not None:
                line.setValue(boundary - 0.5)

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
        return cell_readout(self.matrix, row, col, labels=(self.query_tokens, self.key_tokens), mask=self.mask,
                            revealed=self.revealed, approximate=self.approximate, quantity=self.quantity,
                            unit=self.unit)

    def _on_mouse_clicked(self, event) -> None:
        if event.button() == Qt.MouseButton.RightButton:
            index = self.token_at(event.scenePos())
            menu = self.token_menu(index) if index is not None else None
            if menu is not None:
                menu.popup(event.screenPos().toPoint())
            return
        if event.double():
            self.reset_zoom()
            return
        cell = self.cell_at(event.scenePos())
        if cell is not None:
            self.row_clicked.emit(cell[0])

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
