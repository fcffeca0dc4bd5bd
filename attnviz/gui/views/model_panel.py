"""The model panel: the open model's architecture, sizes, vocabularies, device, precision and provenance, and the
bundled demos."""

from __future__ import annotations

import html
from pathlib import Path

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (QComboBox, QFormLayout, QLabel, QListWidget, QListWidgetItem, QMenu, QScrollArea,
                               QVBoxLayout, QWidget)

from models.nn.precisions import PRECISIONS

from ...state.fields import FieldRow, field_rows, tokenizer_lines
from ...state.session import ModelInfo


class ModelPanel(QWidget):
    """The open model's architecture, sizes, vocabularies, device and provenance; the bundled demos."""

    device_chosen = Signal(str)
    weights_chosen = Signal(str)  # float32, bfloat16 or float16: the precision models open in
    demo_chosen = Signal(str)
    compare_chosen = Signal(str)  # a demo's path: compare it with the open model

    def __init__(self, devices: list[str], demos: list[Path], parent: QWidget | None = None):
        super().__init__(parent)
        self.info = QLabel("No model open.")
        self.info.setWordWrap(True)
        self.info.setTextFormat(Qt.TextFormat.RichText)
        self.info.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.info.setAlignment(Qt.AlignmentFlag.AlignTop)
        self.device = QComboBox()
        self.device.addItems(devices)
        self.device.setToolTip("Where the model runs; switching re-runs the sentence")
        self.weights = QComboBox()
        self.weights.addItems(PRECISIONS)
        self.weights.setMinimumWidth(self.device.minimumSizeHint().width())  # "bfloat16" must not widen the dock
        self.weights.setToolTip("The precision every model's weights are kept in: bfloat16 and float16 need half "
                                "the memory (attention is still traced as float32); switching re-opens the model")
        self.demos = QListWidget()
        self.demos.setToolTip("Bundled demo checkpoints: click one to open it")
        for path in demos:
            item = QListWidgetItem(path.stem)
            item.setData(Qt.ItemDataRole.UserRole, str(path))
            self.demos.addItem(item)
        form = QFormLayout()
        form.addRow("Device", self.device)
        form.addRow("Weights", self.weights)
        layout = QVBoxLayout(self)
        scroll = QScrollArea()  # a long provenance scrolls instead of making the window taller than the screen
        scroll.setWidget(self.info)
        scroll.setWidgetResizable(True)
        scroll.setFrameShape(QScrollArea.Shape.NoFrame)
        layout.addWidget(scroll, 1)
        layout.addLayout(form)
        layout.addWidget(QLabel("Demos"))
        layout.addWidget(self.demos)
        self.device.activated.connect(lambda _: self.device_chosen.emit(self.device_name()))
        self.weights.activated.connect(lambda _: self.weights_chosen.emit(self.weights_name()))
        self.demos.itemClicked.connect(lambda item: self.demo_chosen.emit(item.data(Qt.ItemDataRole.UserRole)))
        self.demos.itemActivated.connect(lambda item: self.demo_chosen.emit(item.data(Qt.ItemDataRole.UserRole)))
        self.demos.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        self.demos.customContextMenuRequested.connect(self._demo_menu)

    def demo_actions(self, item: QListWidgetItem) -> QMenu:
        """A demo's context menu: open it, or compare it with the open model."""
        menu = QMenu(self.demos)
        path = item.data(Qt.ItemDataRole.UserRole)
        menu.addAction("Open").triggered.connect(lambda: self.demo_chosen.emit(path))
        menu.addAction("Compare with the open model").triggered.connect(lambda: self.compare_chosen.emit(path))
        return menu

    def _demo_menu(self, position) -> None:
        item = self.demos.itemAt(position)
        if item is not None:
            self.demo_actions(item).popup(self.demos.viewport().mapToGlobal(position))

    def show_open_demo(self, path: str | Path | None) -> None:
        """Select the demo being opened or open; none for any other checkpoint."""
        self.demos.clearSelection()
        self.demos.setCurrentItem(None)
        for row in range(self.demos.count()):
            item = self.demos.item(row)
            if path is not None and Path(item.data(Qt.ItemDataRole.UserRole)) == Path(path):
                self.demos.setCurrentItem(item)

    def show_note(self, text: str) -> None:
        """A line in the model's place: none is open, or one is being opened."""
        self.info.setText(html.escape(text))

    def device_name(self) -> str:
        """The chosen device, "" for the best available."""
        name = self.device.currentText()
        return "" if name == "auto" else name

    def set_device_name(self, name: str) -> None:
        self.device.setCurrentText(name)

    def weights_name(self) -> str:
        """The chosen precision of the weights (one of ``PRECISIONS``)."""
        return self.weights.currentText()

    def set_weights_name(self, name: str) -> None:
        self.weights.setCurrentText(name)

    def show_model(self, info: ModelInfo) -> None:
        config = info.config
        sizes = ", ".join(f"{key} {config[key]}" for key in ("d_model", "layers", "heads", "kv_heads", "d_ff",
                                                              "encoder_layers", "decoder_layers", "hidden")
                          if key in config and not (key == "kv_heads"  # 0: as many as heads
                                                    and config[key] in (None, 0, config.get("heads"))))
        lines = tokenizer_lines(info.arch, info.source_tokenizer, info.target_tokenizer)
        tokenizers = "".join(f"{label}: {html.escape(text)}<br>" for label, text in lines)
        provenance = "".join(_field_row(row) for row in field_rows(info.provenance))
        self.info.setText(
            f"<b>{html.escape(info.path.name)}</b><br>{html.escape(info.arch)} · {info.parameters:,} parameters<br>"
            f"device {html.escape(info.device)} · weights {html.escape(info.weights)}<br>"  # what runs: in view first
            f"{html.escape(sizes)}<br>attention: {html.escape(', '.join(info.kinds) or 'none')}<br>"
            f"{tokenizers}max length {info.max_len}"
            + (f"<table cellspacing=4>{provenance}</table>" if provenance else ""))
        index = self.device.findText(info.device.split(":")[0] if info.device != "cpu" else "cpu")
        if index >= 0:
            self.device.setCurrentIndex(index)


def _field_row(row: FieldRow) -> str:
    """One provenance entry as a one-cell table row ("key: value", so a narrow panel wraps the value under
    its key rather than pushing it out of sight), indented by its depth; a long value is cut (``attnviz info``
    prints it whole)."""
    value = "" if row.value is None else row.value if len(row.value) < 160 else row.value[:157] + "…"
    text = html.escape(row.key) + (f": {html.escape(value)}" if row.value is not None else "")
    return f"<tr><td style='padding-left:{12 * row.depth}px'>{text}</td></tr>"
