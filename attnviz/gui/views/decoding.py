"""Step-by-step decoding: the step slider and player, the decoder prefix, the cross-attention row of
the step as bars over the source, the top-k next-token chart, and the beam (hypotheses and tree)."""

from __future__ import annotations

import html

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtGui import QFontMetricsF
from PySide6.QtWidgets import QHBoxLayout, QLabel, QPushButton, QSlider, QSplitter, QStyle, QVBoxLayout, QWidget

from ...state.charts import bars_that_fit
from ...state.viewmodel import BarsState, BeamState, StepState
from .beam import BeamPanel
from .token_axis import TokenAxis
from .style import HIGHLIGHT

BAR = (90, 140, 220)
CHART_MIN_HEIGHT = 100  # px: readable, and with the step controls and a tab bar the window fits 650 pixels
TITLE_POINTS = 9  # a chart's title, in points (times the text scale while presenting)
PREFIX_WINDOW = 24  # decoder input tokens shown before the current step; earlier ones are counted
LABEL_CHARS = 14  # a longer next-token label is cut, with "…" (the tooltip and the result line say it all)


class StepControls(QWidget):
    """Slider plus previous / play / next; emits the chosen step."""

    step_changed = Signal(int)

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        style = self.style()
        icon = lambda name: style.standardIcon(getattr(QStyle.StandardPixmap, name))  # noqa: E731
        self.first = QPushButton(icon("SP_MediaSkipBackward"), "")
        self.previous = QPushButton(icon("SP_ArrowBack"), "")
        self.play = QPushButton(icon("SP_MediaPlay"), "")
        self.next = QPushButton(icon("SP_ArrowForward"), "")
        self.last = QPushButton(icon("SP_MediaSkipForward"), "")
        self.first.setToolTip("First step (Alt+Home)")
        self.previous.setToolTip("Previous step (Alt+Left)")
        self.play.setToolTip("Play the decoding step by step")
        self.next.setToolTip("Next step (Alt+Right)")
        self.last.setToolTip("Last step (Alt+End)")
        self.slider = QSlider(Qt.Orientation.Horizontal)
        self.slider.setToolTip("Decoding step")
        self.label = QLabel("step –")
        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        for widget in (self.first, self.previous, self.play, self.next, self.last, self.slider, self.label):
            layout.addWidget(widget)
        self.timer = QTimer(self)
        self.timer.setInterval(600)
        self.timer.timeout.connect(self._advance)
        self.previous.clicked.connect(lambda: self.slider.setValue(self.slider.value() - 1))
        self.next.clicked.connect(lambda: self.slider.setValue(self.slider.value() + 1))
        self.first.clicked.connect(lambda: self.slider.setValue(0))
        self.last.clicked.connect(lambda: self.slider.setValue(self.slider.maximum()))
        self.play.clicked.connect(self.toggle_play)
        self.slider.valueChanged.connect(self._on_value)
        self.set_count(0)

    def set_count(self, count: int, current: int | None = None) -> None:
        self.slider.blockSignals(True)
        self.slider.setRange(0, max(0, count - 1))
        self.slider.setValue(count - 1 if current is None else current)
        self.slider.blockSignals(False)
        self.setEnabled(count > 0)
        self._show_label()

    def set_step(self, step: int) -> None:
        self.slider.setValue(step)

    def toggle_play(self) -> None:
        if self.timer.isActive():
            self.stop()
            return
        if self.slider.value() >= self.slider.maximum():
            self.slider.setValue(0)
        self.play.setIcon(self.style().standardIcon(QStyle.StandardPixmap.SP_MediaPause))
        self.timer.start()

    def stop(self) -> None:
        self.timer.stop()
        self.play.setIcon(self.style().standardIcon(QStyle.StandardPixmap.SP_MediaPlay))

    def _advance(self) -> None:
        if self.slider.value() >= self.slider.maximum():
            self.stop()
        else:
            self.slider.setValue(self.slider.value() + 1)

    def _on_value(self, value: int) -> None:
        self._show_label()
        self.step_changed.emit(value)

    def _show_label(self) -> None:
        total = self.slider.maximum() + 1
        self.label.setText(f"step {self.slider.value() + 1} / {total}" if self.isEnabled() else "step –")


class BarChart(pg.PlotWidget):
    """Bars with token labels; ``horizontal`` puts tokens on the vertical axis (top-k chart, its long labels
    cut); the source strip labels every source token in full, like the heatmap's columns. A click on a bar of a
    horizontal chart emits its token's label (``bar_clicked``)."""

    bar_clicked = Signal(str)

    labels: tuple[str, ...] = ()  # a class default: Qt may resize the chart before __init__ ends
    state: BarsState | None = None  # what was asked to be drawn (a chart of tokens down the side draws what fits)
    horizontal = False
    text_scale = 1.0
    title_text = ""

    def __init__(self, horizontal: bool, parent: QWidget | None = None):
        side = "left" if horizontal else "bottom"
        axis = TokenAxis(side, most_lanes=1) if horizontal else TokenAxis(side)  # one column of bar labels
        super().__init__(parent, axisItems={side: axis})
        self.token_axis = axis  # kept: the plot item is gone while a closing chart is resized
        self.horizontal = horizontal
        self.highlight: int | None = None
        self.setMenuEnabled(False)
        self.hideButtons()
        self.setMouseEnabled(x=False, y=False)
        self.getPlotItem().getAxis("bottom" if horizontal else "left").enableAutoSIPrefix(False)  # the values' own
        self.bars = pg.BarGraphItem(x=[], height=[], width=0.8)
        self.addItem(self.bars)
        if horizontal:
            self.getPlotItem().invertY(True)
        self.values = np.zeros(0)
        self.brush, self.highlight_brush = pg.mkBrush(BAR), pg.mkBrush(HIGHLIGHT)

    def show_bars(self, state: BarsState) -> None:
        """Draw ``state``; a chart with its tokens down the side draws as many bars as it can label."""
        self.state = state
        if self.horizontal:
            state = bars_that_fit(state, self.rows_that_fit())
        self.set_bars(state.labels, state.values, highlight=state.highlight, title=html.escape(state.title),
                      top=state.top, bottom=state.bottom)
        if not self.horizontal:  # the value axis named in the values' unit (the focus map's colour bar's)
            self.setLabel("left", state.unit or None)

    def rows_that_fit(self) -> int:
        """How many bars the chart's height labels, one line of text each: the token axis' height, or before the
        plot is laid out, the chart's less its title and value axis (their lines, and a margin)."""
        line = max(QFontMetricsF(self.token_axis.tick_font()).lineSpacing(), 1.0)
        estimate = self.height() - 4.5 * line - 8
        height = min(self.token_axis.height(), estimate) if self.token_axis.height() > 0 else estimate
        return int(height // line)

    def set_bars(self, labels: list[str], values: np.ndarray, highlight: int | None = None,
                 *, title: str = "", top: float = 1.0, bottom: float = 0.0) -> None:
        self.values = np.asarray(values, dtype=float)
        positions = np.arange(len(self.values))
        brushes = [self.highlight_brush if index == highlight else self.brush for index in positions]
        self.labels, self.highlight = tuple(labels), highlight
        self.token_axis.set_tokens([short_label(label) for label in labels] if self.horizontal else list(labels))
        if self.horizontal:
            self.bars.setOpts(x0=0, y=positions, width=self.values, height=0.7, x=None, brushes=brushes)
            self.setXRange(0, top, padding=0.02)
            self.setYRange(-0.5, max(len(positions), 1) - 0.5, padding=0)
        else:
            self.bars.setOpts(x=positions, height=self.values, width=0.8, brushes=brushes)
            self.setYRange(bottom, top, padding=0.02)
            self.setXRange(-0.5, max(len(positions), 1) - 0.5, padding=0)
        self._place_labels()
        self.title_text = title
        self._fit_title()

    def set_text_scale(self, scale: float) -> None:
        """The title's size relative to its usual 9 points (presentation mode: larger, like every other text)."""
        self.text_scale = scale
        self._fit_title()

    def mousePressEvent(self, event) -> None:  # noqa: N802 (Qt's name)
        super().mousePressEvent(event)
        if not self.horizontal or not self.labels or event.button() != Qt.MouseButton.LeftButton:
            return
        point = self.getPlotItem().vb.mapSceneToView(self.mapToScene(event.position().toPoint()))
        index = int(round(point.y()))
        if 0 <= index < len(self.labels) and 0 <= point.x() <= max(float(self.values[index]), 0.0) + 0.05:
            self.bar_clicked.emit(self.labels[index])

    def _fit_title(self) -> None:
        """The title at 9 points times the text scale, less where it would be wider than the chart (a title sets
        the chart's least width: in a narrow dock the chart was cut), never under 9."""
        points = TITLE_POINTS * self.text_scale
        self.setTitle(self.title_text, size=f"{points:g}pt")
        # The title spans the plot's column only, beside the token axis; a chart widened by its title is wider than
        # the splitter that shows it
        parent = self.parentWidget()
        side = self.getPlotItem().getAxis("left").width()
        room = min(self.width(), parent.width() if parent is not None else self.width()) - side - 16
        for _ in range(4):  # the label's width is not quite proportional to its size: a few steps down
            wide = self.getPlotItem().titleLabel.boundingRect().width()
            if points <= TITLE_POINTS or not self.title_text or wide <= room:
                return
            points = round(max(TITLE_POINTS, points * room / wide - 0.3), 1)
            self.setTitle(self.title_text, size=f"{points:g}pt")

    def _place_labels(self) -> None:
        """Labels laid out like the heatmap's: all when they fit, else evenly thinned around the highlighted bar
        (the chosen token, the source token with the most weight), which always keeps its label."""
        axis = self.token_axis
        pixels = ((axis.height() if self.horizontal else axis.width())
                  or (self.height() if self.horizontal else self.width()))
        axis.fit((-0.5, len(self.labels) - 0.5), cell=pixels / max(len(self.labels), 1), anchor=self.highlight or 0)

    def resizeEvent(self, event) -> None:  # noqa: N802 (Qt's name)
        super().resizeEvent(event)
        if not self._refit() and self.labels:  # none yet while the chart is being built
            self._place_labels()
        if self.text_scale > 1 and not self.closed:
            self._fit_title()

    def _refit(self) -> bool:
        """Draw the bars again where the token axis' height now labels more or fewer of them."""
        if (self.horizontal and self.state is not None and not self.closed  # (a closing chart has no plot)
                and len(self.labels) != min(len(self.state.labels), max(1, self.rows_that_fit()))):
            self.show_bars(self.state)
            return True
        return False


def short_label(label: str) -> str:
    return label if len(label) <= LABEL_CHARS else label[: LABEL_CHARS - 1] + "…"


class DecodingPanel(QWidget):
    """Everything about one decoding step, drawn from the view-model's ``StepState`` and ``BeamState``."""

    step_changed = Signal(int)
    hypothesis_chosen = Signal(int)
    top_k_clicked = Signal(str)  # a top-k entry's label: contrast with it (attnviz/state/contrast_view.py)
    beam_node_clicked = Signal(int)  # a node of the beam tree: contrast with it where it is a sibling

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.controls = StepControls()
        self.prefix = QLabel()
        self.prefix.setWordWrap(True)
        self.prefix.setTextFormat(Qt.TextFormat.RichText)
        self.source_strip = BarChart(horizontal=False)
        self.source_strip.setToolTip("Cross-attention of this step over the source tokens")
        self.top_k = BarChart(horizontal=True)
        self.top_k.setToolTip("The most likely next tokens at this step; the chosen one is highlighted. Click "
                              "another to explain why the chosen one and not it (contrastive methods)")
        self.beam = BeamPanel()
        self.beam.hide()  # shown for beam search only
        charts = QSplitter(Qt.Orientation.Horizontal)
        for widget in (self.source_strip, self.top_k, self.beam):
            widget.setMinimumHeight(CHART_MIN_HEIGHT)  # readable at 1000×650; never taller than that needs
            charts.addWidget(widget)
        charts.setSizes([500, 260, 300])
        layout = QVBoxLayout(self)
        layout.addWidget(self.controls)
        layout.addWidget(self.prefix)
        layout.addWidget(charts, 1)
        self.controls.step_changed.connect(self.step_changed)
        self.beam.hypothesis_chosen.connect(self.hypothesis_chosen)
        self.top_k.bar_clicked.connect(self.top_k_clicked)
        self.beam.graph.node_clicked.connect(self.beam_node_clicked)

    def show_state(self, state: StepState) -> None:
        self.controls.set_count(state.count, state.step)
        self.show_prefix(state.tokens, state.step, produced=state.produced, probability=state.probability,
                         offset=state.offset, input_name=state.input_name)
        self.source_strip.setToolTip("Attention of this step over the prompt's tokens" if state.offset
                                     else "Cross-attention of this step over the source tokens")
        if state.caption:
            self.prefix.setText(state.caption)
        if state.top_k is not None:
            self.top_k.show_bars(state.top_k)
        self.source_strip.show_bars(state.source_bars)

    def show_beam(self, state: BeamState | None, chosen: int = 0) -> None:
        """The beam's hypotheses and tree with hypothesis ``chosen`` picked (``None``: not a beam search, the
        panel hides)."""
        self.beam.setVisible(state is not None)  # first: the graph scrolls to the chosen path once it has a size
        self.beam.show_beam(state or BeamState([], [], []), chosen)

    def stop(self) -> None:
        self.controls.stop()

    def show_prefix(self, tokens: list[str], step: int, produced: str | None, probability: float | None, *,
                    offset: int = 0, input_name: str = "decoder input") -> None:
        """The decoder's input up to ``step`` (its last token, the query, emphasised) and what it produced;
        ``offset``: the position of step 0 in ``tokens`` (a decoder-only model's prompt comes first).

        Only the last ``PREFIX_WINDOW`` tokens before the step are written out, so a long prefix keeps
        the current step in view; the earlier ones are counted.
        """
        query = step + offset
        first = max(0, query - PREFIX_WINDOW)
        parts = [f"<i>… {first} earlier</i>"] if first else []
        for index in range(first, min(query + 1, len(tokens))):
            text = html.escape(tokens[index])
            parts.append(f"<b style='color:{HIGHLIGHT}'>{text}</b>" if index == query else text)
        tail = (f"&nbsp; → &nbsp;<b>{html.escape(produced)}</b> (p = {probability:.3f})"
                if produced is not None and probability is not None else "")
        self.prefix.setText(f"Step {step + 1}, {input_name}: " + " ".join(parts) + tail)

    def clear(self) -> None:
        """Nothing of a run: another model is being opened."""
        self.stop()
        self.controls.set_count(0)
        self.prefix.clear()
        for chart in (self.source_strip, self.top_k):
            chart.state = None
            chart.set_bars([], np.zeros(0))
        self.show_beam(None)

    def set_text_scale(self, scale: float) -> None:
        """Presentation mode's larger text (1: the usual): the charts' titles, and the beam's list and tree tall
        enough for it (in a column beside the heatmap, the beam gets half of the charts' height)."""
        for chart in (self.source_strip, self.top_k):
            chart.set_text_scale(scale)
        self.beam.set_text_scale(scale)
        charts = self.findChild(QSplitter, options=Qt.FindChildOption.FindDirectChildrenOnly)
        if scale > 1 and charts.orientation() == Qt.Orientation.Vertical and self.beam.isVisibleTo(self):
            total = max(sum(charts.sizes()), 3 * CHART_MIN_HEIGHT)
            charts.setSizes([total // 4, total // 4, total // 2])

    def set_stacked(self, stacked: bool) -> None:
        """The charts one above the other (the panel in a tall, narrow dock beside the views) or side by side."""
        charts = self.findChild(QSplitter, options=Qt.FindChildOption.FindDirectChildrenOnly)
        charts.setOrientation(Qt.Orientation.Vertical if stacked else Qt.Orientation.Horizontal)
