"""The input bar (what to run) and the selector bar (which heatmap to show); the model panel is in
model_panel.py."""

from __future__ import annotations

import html

from PySide6.QtCore import QSize, Qt, QTimer, Signal
from PySide6.QtGui import QAction, QTextOption
from PySide6.QtWidgets import (QCheckBox, QComboBox, QFrame, QHBoxLayout, QLabel, QLineEdit, QMenu, QProgressBar,
                               QPushButton, QSizePolicy, QSlider, QSpinBox, QStyle, QTextBrowser, QToolButton,
                               QVBoxLayout, QWidget)

from models.analysis.catalogue import CONTRIBUTION_METHODS, WEIGHTS
from models.inference.modes import MAX_BEAM, MIN_BEAM_SEARCH, Mode

from ...state.contributions import ShowChoice
from ...state.prompt_view import SENTENCE_WORDS, InputWords
from ...state.session import RunSettings, ViewOptions
from ...state.viewmodel import KIND_LABELS, AblationState, ResultLine, SelectorState, SnapshotBarState
from .style import COLORMAPS

DEBOUNCE_MS = 350
OUTPUT_LINES = 5  # the result line grows to this many lines of text (fewer in a small window); then it scrolls
NOTICE_LINES = 3  # the notices under it likewise (one line per 250 px of window height, at least one)
MISSING_STYLE = "QLineEdit { border: 2px solid #c62828; border-radius: 3px; }"  # a box a run still needs


class OutputArea(QTextBrowser):
    """The result line: as tall as its text up to :data:`OUTPUT_LINES` lines, then scrolling, so a 1,000-token
    output never squeezes the heatmaps under it; a word longer than the line (a character model's output
    without spaces) wraps anywhere instead of running out of sight. Selectable, read-only."""

    def __init__(self, text: str = "", parent: QWidget | None = None, *,
                 lines: tuple[int, int, int] = (2, OUTPUT_LINES, 200)):
        super().__init__(parent)
        self.lines = lines  # at least, at most, and one line per this many pixels of window height
        self.setOpenLinks(False)
        self.setFocusPolicy(Qt.FocusPolicy.ClickFocus)  # as a selectable label: not a Tab stop
        self.setFrameShape(QFrame.Shape.NoFrame)
        self.viewport().setAutoFillBackground(False)  # the window's own background, as a label has
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setWordWrapMode(QTextOption.WrapMode.WrapAtWordBoundaryOrAnywhere)
        # as tall as its text (up to the cap) where the window has room; in a window at its least height one line
        # of it, scrolling, so that the notices of a run never push the window past a 650-pixel screen
        self.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Maximum)
        self.document().setDocumentMargin(0)
        self._html = ""
        self.set_text(text)

    def text(self) -> str:
        """The rich text last set (as ``QLabel.text`` gives it)."""
        return self._html

    def set_text(self, text: str) -> None:
        self._html = text
        self.setHtml(text)
        self.verticalScrollBar().setValue(0)  # new text is read from its start
        self.updateGeometry()

    def cap(self) -> int:
        """``lines``: so many lines of text at most, one per so many pixels of window height, never fewer than
        the least (the result line: 2 to 5, one per 200 px)."""
        least, most, pixels = self.lines
        lines = max(least, min(most, self.window().height() // pixels))
        return lines * self.fontMetrics().lineSpacing() + 4

    def sizeHint(self) -> QSize:
        height = self.document().size().height()  # laid out at the viewport's width (the text edit keeps it so)
        return QSize(super().sizeHint().width(), min(int(height) + 2, self.cap()))

    def minimumSizeHint(self) -> QSize:
        hint = self.sizeHint()
        return QSize(hint.width(), min(hint.height(), self.fontMetrics().lineSpacing() + 4))

    def resizeEvent(self, event) -> None:
        super().resizeEvent(event)
        if event.size().width() != event.oldSize().width():  # a new width wraps the text anew
            self.updateGeometry()
        if event.size().height() != event.oldSize().height():
            self.verticalScrollBar().setValue(0)  # laid out at a new size, the text is read from its start again


TEXT_TIP = "Type a sentence; Enter runs it"
MODE_TIP = "Greedy: the likeliest token each step. Beam: K hypotheses. Forced: your target."
MAX_LEN_TIP = "Stop after this many output tokens"


class InputBar(QWidget):
    """Source text (Enter runs; typing re-runs after a pause), decoding mode, and the result line."""

    run_requested = Signal()

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.text = QLineEdit()
        self.text_label = QLabel()  # "Prompt" for a decoder-only model, hidden for the others
        self.text_label.setBuddy(self.text)
        self.text.setPlaceholderText(TEXT_TIP)
        self.fill_reason = ""  # why the decoding options do not apply (an encoder-only model), "" when they do
        self.text.setClearButtonEnabled(True)
        self.examples = QToolButton()
        self.examples.setText("Examples")
        self.examples.setToolTip("Example sentences recorded for this model")
        self.examples.setPopupMode(QToolButton.ToolButtonPopupMode.InstantPopup)
        self.examples.setMenu(QMenu(self.examples))
        self.examples.setEnabled(False)
        self.mode = QComboBox()
        for mode in Mode:
            self.mode.addItem(mode.label, mode.value)
        self.mode.setToolTip(MODE_TIP)
        self.beam = QSpinBox()
        self.beam.setRange(MIN_BEAM_SEARCH, MAX_BEAM)
        self.beam.setValue(4)
        self.beam.setPrefix("K = ")
        self.beam.setToolTip("Beam width")
        self.source_language = QComboBox()
        self.source_language.setToolTip("The language of the sentence (a multilingual model)")
        self.target_language = QComboBox()
        self.target_language.setToolTip("The language to write: its code is forced as the first output token")
        self.target = QLineEdit()
        self.target.setPlaceholderText("Target to force")
        self.chat = QCheckBox("Chat template")
        self.chat.setToolTip("Lay the prompt out with the model's chat template: your text as the user's turn, the "
                             "output as the assistant's answer")
        self.chat.hide()  # shown for a model that has one (set_chat_available)
        self.max_len = QSpinBox()
        self.max_len.setRange(1, 4096)
        self.max_len.setValue(100)
        self.max_len.setPrefix("max ")
        self.max_len.setToolTip(MAX_LEN_TIP)
        self.run = QPushButton("Run")
        self.busy = QProgressBar()
        self.busy.setRange(0, 0)  # indeterminate: a decode's length is unknown in advance
        self.busy.setMaximumWidth(90)
        self.busy.setTextVisible(False)
        self.busy.hide()
        self.output = self.output_area = OutputArea("Open a model and type a sentence.")
        row = QHBoxLayout()
        for widget, stretch in ((self.text_label, 0), (self.text, 3), (self.examples, 0), (self.source_language, 0),
                                (self.target_language, 0), (self.mode, 0), (self.beam, 0), (self.target, 2),
                                (self.chat, 0), (self.max_len, 0), (self.run, 0), (self.busy, 0)):
            row.addWidget(widget, stretch)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(6, 6, 6, 0)
        layout.addLayout(row)
        # Truncation, unknown characters, half precision: apart from the output, so a long one never scrolls
        # them out of view; capped too, so four of them in a small window leave the heatmap its room.
        self.notices = OutputArea(lines=(1, NOTICE_LINES, 250))
        self.notices.hide()
        layout.addWidget(self.output_area)
        layout.addWidget(self.notices)
        self.debounce = QTimer(self)
        self.debounce.setSingleShot(True)
        self.debounce.setInterval(DEBOUNCE_MS)
        self.debounce.timeout.connect(self.run_requested)
        self.text.returnPressed.connect(self._run_now)
        self.asked = False  # True while a run asked for with Enter or Run is being started
        self.target.returnPressed.connect(self._run_now)
        self.run.clicked.connect(self._run_now)
        self.text.textEdited.connect(lambda _: self.debounce.start())
        self.target.textEdited.connect(lambda _: self.debounce.start())
        self.target.textChanged.connect(lambda _: self.target.setStyleSheet(""))
        for signal in (self.mode.currentIndexChanged, self.beam.valueChanged, self.max_len.valueChanged,
                       self.source_language.currentIndexChanged, self.target_language.currentIndexChanged,
                       self.chat.toggled):
            signal.connect(lambda *_: self.debounce.start())
        self.set_languages(())
        self.set_words(SENTENCE_WORDS)
        self.mode.currentIndexChanged.connect(self._show_mode_options)
        self._show_mode_options()

    def _run_now(self) -> None:
        self.debounce.stop()
        self.asked = True
        try:
            self.run_requested.emit()
        finally:
            self.asked = False

    def ask_for_target(self) -> None:
        """Forced decoding without a target: the target box is marked and says what it needs. It takes the
        cursor unless the run started by itself while the sentence was being typed (keys would land in the
        wrong box)."""
        self.show_message("Type the target to force (the box marked in red), then press Enter.")
        self.target.setStyleSheet(MISSING_STYLE)
        if self.asked or not self.text.hasFocus():
            self.target.setFocus()

    def _show_mode_options(self) -> None:
        mode = None if self.fill_reason else self.mode.currentData()
        self.beam.setVisible(mode == Mode.BEAM)
        self.target.setVisible(mode == Mode.FORCED)

    def set_words(self, words: InputWords) -> None:
        """Name the boxes as the open model reads them (a decoder-only model's prompt and continuation)."""
        self.words = words
        self.text_label.setText(f"<b>{words.label}</b>")
        self.text_label.setVisible(bool(words.label))
        self.text.setPlaceholderText(words.placeholder)
        self.target.setPlaceholderText(words.forced)
        self.mode.setToolTip(words.modes)
        self.max_len.setToolTip(words.max_len)

    def set_fill_reason(self, reason: str) -> None:
        """An encoder-only model fills its masks and decodes nothing: the mode and the length limit are disabled,
        ``reason`` their tooltip ("" offers them again, named as :meth:`set_words` last named them)."""
        self.fill_reason = reason
        for widget in (self.mode, self.max_len):
            widget.setEnabled(not reason)
        if reason:
            self.mode.setToolTip(reason)
            self.max_len.setToolTip(reason)
            self.text.setPlaceholderText("Type a sentence with masks; Enter fills them")
        else:
            self.set_words(self.words)
        self._show_mode_options()

    def set_busy(self, busy: bool) -> None:
        self.busy.setVisible(busy)

    def set_languages(self, codes: tuple[str, ...] | list[str]) -> None:
        """Offer a multilingual model's language codes (source → target); hidden for other models."""
        for box in (self.source_language, self.target_language):
            box.blockSignals(True)
            box.clear()
            box.addItems(list(codes))
            box.setVisible(bool(codes))
            box.blockSignals(False)

    def set_chat_available(self, available: bool) -> None:
        """Offer the "Chat template" option for a model that has one; hidden (and off) for other models."""
        self.chat.setVisible(available)
        if not available:
            self.chat.blockSignals(True)
            self.chat.setChecked(False)
            self.chat.blockSignals(False)

    def _show_languages(self, source: str, target: str) -> None:
        for box, code in ((self.source_language, source), (self.target_language, target)):
            if code and box.findText(code) >= 0:
                box.setCurrentIndex(box.findText(code))

    def set_options(self, mode: str, beam: int, max_len: int) -> None:
        self.mode.setCurrentIndex(max(0, self.mode.findData(mode)))
        self.beam.setValue(beam)
        self.max_len.setValue(max_len)

    def run_settings(self) -> RunSettings:
        """What the bar holds: the next run's settings."""
        return RunSettings(text=self.text.text(), mode=self.mode.currentData(), beam=self.beam.value(),
                           target=self.target.text(), max_len=self.max_len.value(),
                           src_lang=self.source_language.currentText(), tgt_lang=self.target_language.currentText(),
                           chat=self.chat.isChecked() and not self.chat.isHidden())

    def show_run_settings(self, settings: RunSettings, limit: int) -> None:
        """Show one model's input (``limit``: the longest output that model can make); runs nothing."""
        widgets = (self.text, self.target, self.mode, self.beam, self.max_len, self.source_language,
                   self.target_language, self.chat)
        for widget in widgets:
            widget.blockSignals(True)
        self.chat.setChecked(settings.chat and not self.chat.isHidden())
        self.max_len.setMaximum(limit)
        self.text.setText(settings.text)
        self.target.setText(settings.target)
        self.set_options(settings.mode, settings.beam, min(settings.max_len, limit))
        self._show_languages(settings.src_lang, settings.tgt_lang)
        for widget in widgets:
            widget.blockSignals(False)
        self._show_mode_options()

    def set_examples(self, examples: list[str]) -> None:
        """Offer ``examples`` in the Examples menu; picking one runs it."""
        menu = self.examples.menu()
        menu.clear()
        for example in examples:
            menu.addAction(example, lambda text=example: self._use_example(text))
        self.examples.setEnabled(bool(examples))

    def _use_example(self, text: str) -> None:
        self.text.setText(text)
        self._run_now()

    def line_edits(self) -> list[QLineEdit]:
        return [self.text, self.target]

    def text_value(self) -> str:
        return self.text.text()

    def set_text(self, text: str) -> None:
        self.text.setText(text)

    def set_limits(self, max_len: int) -> None:
        """The longest output the open model can make."""
        self.max_len.setMaximum(max_len)

    def follow_window_height(self) -> None:
        """The window's height changed: the output's line cap follows it."""
        self.output_area.updateGeometry()

    def stop(self) -> None:
        self.debounce.stop()

    def show_message(self, text: str) -> None:
        self.output_area.set_text(html.escape(text))
        self.notices.hide()

    def show_error(self, message: str) -> None:
        """Errors are said here, under the input, never in a blocking dialog."""
        self.output_area.set_text(f"<span style='color:#c62828'>{html.escape(message)}</span>")
        self.notices.hide()

    def show_result(self, line: ResultLine) -> None:
        """The output (scrolling when long) and under it, always in view, the notices."""
        comparison = ""
        if line.original is not None:
            comparison = (f"<br>with every head on: {html.escape(line.original) or '(empty)'}"
                          f"{coverage_html(line.original_coverage)} &nbsp; changes: {diff_html(line.diff)}")
        partner = f"<br>{html.escape(line.partner)}" if line.partner is not None else ""
        named = "model A: " if line.partner is not None else ""
        coverage = coverage_html(line.coverage)
        self.output_area.set_text(f"{named}<b>{html.escape(line.text) or '(empty)'}</b> &nbsp; "
                                  f"{html.escape(line.details)}{coverage}{partner}{comparison}")
        self.notices.set_text("<br>".join(f"<span style='color:#e65100'>⚠ {html.escape(notice)}</span>"
                                         for notice in line.notices))
        self.notices.setVisible(bool(line.notices))

    def result_text(self) -> str:
        """What the result line says (rich text): the output, then the notices."""
        return self.output.text() + ("<br>" + self.notices.text() if self.notices.isVisibleTo(self) else "")


def coverage_html(coverage: str) -> str:
    """The hallucination signal after an output, as one unit: on the output's line where it fits, else whole on
    the next, never split."""
    if not coverage:
        return ""
    return f" · <span style='color:#1565c0; white-space: nowrap'>{html.escape(coverage)}</span>"


DIFF_STYLES = {"same": "{}", "inserted": "<span style='color:#2e7d32;background:#e8f5e9'><u>{}</u></span>",
               "deleted": "<span style='color:#c62828;background:#ffebee'><s>{}</s></span>"}


def diff_html(diff: list[tuple[str, str]]) -> str:
    """Tokens of a diff: inserted ones underlined in green, deleted ones struck through in red."""
    if all(change == "same" for _, change in diff):
        return "none"
    return " ".join(DIFF_STYLES[change].format(html.escape(token)) for token, change in diff)


class AblationBar(QWidget):
    """"N heads off — Restore": shown while the run switches heads off; the button switches them all on."""

    restore_requested = Signal()
    compare_toggled = Signal(bool)  # show the run with every head on instead of this one

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.label = QLabel()
        self.label.setStyleSheet("color:#c62828; font-weight:bold")
        self.restore = QPushButton("Restore")
        self.restore.setToolTip("Switch every head on again and run")
        self.restore.clicked.connect(self.restore_requested)
        self.compare = QCheckBox("Show the run with every head on")
        self.compare.setToolTip("Every view shows the same input decoded with every head on, for comparison")
        self.compare.toggled.connect(self.compare_toggled)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(6, 0, 6, 0)
        layout.addWidget(self.label)
        layout.addWidget(self.restore)
        layout.addWidget(self.compare)
        layout.addStretch(1)
        self.hide()

    def show_state(self, state: AblationState, showing_original: bool = False) -> None:
        self.label.setText(f"{state.text} —")
        self.label.setToolTip(state.tooltip)
        self.compare.blockSignals(True)
        self.compare.setChecked(showing_original)
        self.compare.blockSignals(False)
        self.setVisible(state.visible)


class SnapshotBar(QWidget):
    """"Training step ⏮ ━━●━━ ⏭ step 250 of 1000": which snapshot of a series runs (hidden otherwise)."""

    index_chosen = Signal(int)

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        title = QLabel("Training step")
        title.setStyleSheet("font-weight:bold")
        self.first = QToolButton()
        self.first.setText("⏮")
        self.first.setIcon(self.style().standardIcon(QStyle.StandardPixmap.SP_MediaSkipBackward))
        self.first.setToolTip("The first snapshot")
        self.last = QToolButton()
        self.last.setText("⏭")
        self.last.setIcon(self.style().standardIcon(QStyle.StandardPixmap.SP_MediaSkipForward))
        self.last.setToolTip("The last snapshot")
        self.slider = QSlider(Qt.Orientation.Horizontal)
        self.slider.setTickPosition(QSlider.TickPosition.TicksBelow)
        self.slider.setPageStep(1)
        self.label = QLabel()
        self.label.setMinimumWidth(150)
        self.first.clicked.connect(lambda: self.slider.setValue(0))
        self.last.clicked.connect(lambda: self.slider.setValue(self.slider.maximum()))
        self.slider.valueChanged.connect(self.index_chosen)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(6, 0, 6, 0)
        layout.addWidget(title)
        layout.addWidget(self.first)
        layout.addWidget(self.slider, 1)
        layout.addWidget(self.last)
        layout.addWidget(self.label)
        self.hide()

    def show_state(self, state: SnapshotBarState) -> None:
        self.slider.blockSignals(True)
        self.slider.setMaximum(max(state.count - 1, 0))
        self.slider.setValue(state.index)
        self.slider.blockSignals(False)
        self.label.setText(state.label)
        self.slider.setToolTip(state.tooltip)
        self.setVisible(state.visible)


class SelectorBar(QWidget):
    """Kind, layer, head (or an aggregate), colormap and the mask overlay switch."""

    changed = Signal()
    colormap_changed = Signal(str)
    masks_toggled = Signal(bool)
    options_changed = Signal()
    show_changed = Signal(str)  # a contributions method's name (WEIGHTS: the attention weights)

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.kind = QComboBox()
        self.kind.setToolTip("Which attention to show")
        self.kind.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToContents)
        self.layer = QSpinBox()
        self.layer.setPrefix("layer ")
        self.layer.setToolTip("Layer (Ctrl+Up / Ctrl+Down)")
        self.head = QComboBox()
        self.head.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToContents)
        self.head.setToolTip("One head, or all heads combined (Ctrl+Left / Ctrl+Right)")
        self.show_box = QComboBox()
        self.show_box.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToContents)
        self.show_box.setToolTip("What the maps show: where the heads looked (attention weights), or how much each "
                                 "token shaped the output (value norms, ALTI+, value zeroing, gradients)")
        self.show_box.addItem(f"Show: {CONTRIBUTION_METHODS[WEIGHTS].label}", WEIGHTS)
        self.colormap = QComboBox()
        self.colormap.addItems(COLORMAPS)
        self.colormap.setToolTip("Colormap (all perceptually uniform; viridis and cividis are colour-blind safe)")
        self.colour_range = QComboBox()
        self.colour_range.addItem("colours 0–1", "fixed")
        self.colour_range.addItem("colours: own range", "own")
        self.colour_range.setToolTip("0–1 keeps every map comparable; a map's own range shows the structure of "
                                     "means and rollouts, which spread their weight thin")
        for box in (self.colormap, self.colour_range):
            box.setProperty("usual_tip", box.toolTip())
        self.predicted = QCheckBox("Rows → prediction")
        self.predicted.setToolTip("Label each decoder row with the token it predicts (“<s> → El”): row t is the "
                                  "decoder input at step t, and its output is the next token")
        self.masks = QCheckBox("Masks")
        self.masks.setChecked(True)
        self.masks.setToolTip("Hatch the cells the model was not allowed to attend to (padding, future)")
        # Two rows: what to show, then how to draw it; one row does not fit a 1000-pixel-wide window.
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(2)
        what = (self.kind, self.layer, self.head, self.show_box)
        for widgets in (what, (self.predicted, self.colour_range, self.colormap, self.masks)):
            row = QHBoxLayout()
            for widget in widgets:
                row.addWidget(widget)
            row.addStretch(1)
            layout.addLayout(row)
        for signal in (self.kind.currentIndexChanged, self.layer.valueChanged, self.head.currentIndexChanged):
            signal.connect(lambda *_: self.changed.emit())
        self.colormap.currentTextChanged.connect(self.colormap_changed)
        self.show_box.currentIndexChanged.connect(lambda *_: self.show_changed.emit(self.show_box.currentData()))
        self.masks.toggled.connect(self.masks_toggled)
        self.colour_range.currentIndexChanged.connect(lambda *_: self.options_changed.emit())
        self.predicted.toggled.connect(lambda *_: self.options_changed.emit())
        self.reveal_rows = QAction("Reveal rows step by step", self, checkable=True)  # the window's View menu
        self.reveal_rows.setToolTip("Decoder maps show only the rows generated up to the current step, "
                                    "so they grow as the steps advance")
        self.reveal_rows.toggled.connect(lambda *_: self.options_changed.emit())

    def view_options(self) -> ViewOptions:
        return ViewOptions(colour_range=self.colour_range.currentData(), predicted_labels=self.predicted.isChecked(),
                           reveal_rows=self.reveal_rows.isChecked())

    def set_view_options(self, options: ViewOptions) -> None:
        self.colour_range.setCurrentIndex(max(0, self.colour_range.findData(options.colour_range)))
        self.predicted.setChecked(options.predicted_labels)
        self.reveal_rows.setChecked(options.reveal_rows)

    def colormap_name(self) -> str:
        return self.colormap.currentText()

    def set_colormap_name(self, name: str) -> None:
        self.colormap.setCurrentText(name)

    def masks_visible(self) -> bool:
        return self.masks.isChecked()

    def set_masks_visible(self, visible: bool) -> None:
        self.masks.setChecked(visible)

    def toggle_masks(self) -> None:
        self.masks.toggle()

    def show_state(self, state: SelectorState) -> None:
        """Offer the trace's kinds, layers and heads, and show the current choice (emits nothing)."""
        self.setEnabled(True)
        for widget in (self.kind, self.layer, self.head):
            widget.blockSignals(True)
        if [self.kind.itemData(index) for index in range(self.kind.count())] != state.kinds:
            self.kind.clear()
            for kind in state.kinds:
                self.kind.addItem(KIND_LABELS[kind], kind)
        self.kind.setCurrentIndex(max(0, self.kind.findData(state.kind)))
        self.layer.setRange(0, max(0, state.layers - 1))
        self.layer.setValue(state.layer)
        offered = [(self.head.itemText(index), self.head.itemData(index)) for index in range(self.head.count())]
        if offered != list(state.head_choices):
            self.head.clear()
            for label, value in state.head_choices:
                self.head.addItem(label, value)
        self.head.setCurrentIndex(max(0, self.head.findData(state.head)))
        for widget in (self.kind, self.layer, self.head):
            widget.blockSignals(False)
        for box, why in zip((self.colour_range, self.colormap), state.own_scale):  # the map's own scale says why
            box.setEnabled(not why)
            box.setToolTip(why or box.property("usual_tip") or box.toolTip())

    def selection(self) -> dict:
        return {"kind": self.kind.currentData(), "layer": self.layer.value(), "head": self.head.currentData()}

    def set_show_choices(self, choices: tuple[ShowChoice, ...], current: str) -> None:
        """Offer the open model's methods: one it cannot give is greyed out, its reason as the tooltip (emits
        nothing)."""
        self.show_box.blockSignals(True)
        self.show_box.clear()
        for choice in choices:
            self.show_box.addItem(f"Show: {choice.label}", choice.name)
            index = self.show_box.count() - 1
            self.show_box.setItemData(index, choice.reason or f"Colour scale: {choice.unit}",
                                      Qt.ItemDataRole.ToolTipRole)
            self.show_box.model().item(index).setEnabled(not choice.reason)
        self.show_box.setCurrentIndex(max(0, self.show_box.findData(current)))
        self.show_box.blockSignals(False)

    def show_name(self) -> str:
        return self.show_box.currentData() or WEIGHTS

    def set_show_name(self, name: str) -> None:
        """Choose a method (emits ``show_changed`` when it changes)."""
        self.show_box.setCurrentIndex(max(0, self.show_box.findData(name)))
