"""The one dialog for a foreign checkpoint: what was read from it, what it lacks (a field each, the
vocabulary files) and whether the user trusts it enough to allow unpickling (with inert stubs)."""

from __future__ import annotations

import html
from pathlib import Path

from PySide6.QtWidgets import (QCheckBox, QDialog, QDialogButtonBox, QFileDialog, QFormLayout, QHBoxLayout,
                               QLabel, QLineEdit, QPushButton, QVBoxLayout, QWidget)

from models.nn.config import parse_settings

from ...state.imports import ImportAnswer, ImportQuestion

TRUST_TEXT = ("Unpickling can run code hidden in a file. attnviz replaces every class the file names by an inert "
              "stand-in and refuses files that call the system, so no code from it runs; still, tick this only "
              "for files from a source you trust.")


class ImportDialog(QDialog):
    def __init__(self, question: ImportQuestion, parent: QWidget | None = None):
        super().__init__(parent)
        self.question = question
        inspection, previous = question.inspection, question.previous
        self.setWindowTitle("Open a checkpoint from other code")
        self.setMinimumWidth(620)
        layout = QVBoxLayout(self)
        name = html.escape(Path(question.path).name)
        if inspection is not None:
            intro = (f"<b>{name}</b> is a <b>{html.escape(inspection.format)}</b> checkpoint. "
                     "It does not say everything attnviz needs:")
        else:
            intro = f"<b>{name}</b> can only be read by unpickling it."
        heading = QLabel(intro)
        heading.setWordWrap(True)
        layout.addWidget(heading)
        self.problem = QLabel(f"<span style='color:#c62828'>{html.escape(question.problem)}</span>")
        self.problem.setWordWrap(True)
        self.problem.setVisible(bool(question.problem))
        layout.addWidget(self.problem)
        form = QFormLayout()
        self.fields: dict[str, QLineEdit] = {}
        self.vocabularies: dict[str, QLineEdit] = {}
        if inspection is not None:
            for key, hint in inspection.missing.items():
                field = QLineEdit(str(previous.settings.get(key, "")) if previous else "")
                field.setPlaceholderText(hint)
                field.setToolTip(inspection.accepted.get(key, hint))
                self.fields[key] = field
                form.addRow(key, field)
            for side, hint in inspection.vocabularies.items():
                label = f"{'source' if side == 'src' else 'target'} vocabulary"
                form.addRow(label, self._file_row(side, hint, previous))
            if inspection.inferred:
                read = ", ".join(f"{key}={value}" for key, value in inspection.inferred.items())
                note = QLabel(f"Read from the file: {html.escape(read)}")
                note.setWordWrap(True)
                form.addRow(note)
        layout.addLayout(form)
        self.trust = QCheckBox("I trust this file: allow unpickling it")
        self.trust.setChecked(bool(previous and previous.trust))
        explanation = QLabel(TRUST_TEXT)
        explanation.setWordWrap(True)
        explanation.setStyleSheet("color: #b71c1c;")
        layout.addWidget(self.trust)
        layout.addWidget(explanation)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel)
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        layout.addWidget(buttons)

    def _file_row(self, side: str, hint: str, previous: ImportAnswer | None) -> QWidget:
        row = QWidget()
        given = (previous.src_vocab if side == "src" else previous.tgt_vocab) if previous else None
        line = QLineEdit(given or "")
        line.setPlaceholderText(hint)
        browse = QPushButton("Browse…")
        browse.clicked.connect(lambda: self._browse(line))
        box = QHBoxLayout(row)
        box.setContentsMargins(0, 0, 0, 0)
        box.addWidget(line, 1)
        box.addWidget(browse)
        self.vocabularies[side] = line
        return row

    def _browse(self, line: QLineEdit) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Vocabulary file", "",
                                              "Vocabularies (*.txt *.json *.pkl *.pt);;All files (*)")
        if path:
            line.setText(path)

    def _vocabulary(self, side: str) -> str | None:
        line = self.vocabularies.get(side)
        return (line.text().strip() or None) if line is not None else None

    def answer(self, device: str) -> ImportAnswer:
        settings = parse_settings([f"{key}={field.text().strip()}" for key, field in self.fields.items()
                                   if field.text().strip()])
        inspection = self.question.inspection
        return ImportAnswer(
            path=self.question.path, format=inspection.format if inspection else None, settings=settings,
            src_vocab=self._vocabulary("src"), tgt_vocab=self._vocabulary("tgt"),
            trust=self.trust.isChecked(), device=device, inspection=inspection)
