"""Every contribution method's definition where users read it (attnviz/state/method_definitions.py): one per
method of the registry, the same table in docs/contributions.md, and in the window's Help."""

from __future__ import annotations

from pathlib import Path

from attnviz.state.method_definitions import DEFINITIONS, definitions_markdown
from models.analysis.contributions import CONTRIBUTION_METHODS

ROOT = Path(__file__).resolve().parents[1]


def test_every_method_of_the_registry_is_defined_once_under_its_label():
    assert [definition.name for definition in DEFINITIONS] == list(CONTRIBUTION_METHODS)
    for definition in DEFINITIONS:
        assert definition.title.startswith(CONTRIBUTION_METHODS[definition.name].label), definition.name
        assert all((definition.attributed, definition.measure, definition.baseline, definition.departures))


def test_the_docs_table_is_the_definitions_and_is_linked_from_the_readme_and_the_architecture():
    assert definitions_markdown() in (ROOT / "docs/contributions.md").read_text(encoding="utf-8")
    for page in ("README.md", "docs/ARCHITECTURE.md"):
        assert "docs/contributions.md" in (ROOT / page).read_text(encoding="utf-8"), page


def test_the_help_says_what_each_method_computes(qtbot):
    from PySide6.QtWidgets import QTextBrowser, QWidget

    from attnviz.gui.views.help import explanation_dialog

    parent = QWidget()
    qtbot.addWidget(parent)
    text = " ".join(explanation_dialog(parent).findChild(QTextBrowser).toPlainText().split())
    for definition in DEFINITIONS:
        for words in (definition.title, definition.measure, definition.departures):
            assert " ".join(words.split()) in text, (definition.name, words)
    assert "biases included" in text and "rsqrt(var + eps)" in text and "8 ε" in text
