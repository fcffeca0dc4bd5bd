"""The corpus tools without a file: with a bundled demo open, View → Corpus head statistics… and View → Head
importance… offer the demo's own examples (with their reference translations) and take them by default; a
PAIRS.tsv file stays one click away, and any other model goes straight to the file. Real demos, real jobs."""

from __future__ import annotations

import html

from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QApplication, QFileDialog, QMessageBox

from attnviz.state.demos import demo_reference_pairs
from tests.test_gui import WAIT
from tests.test_gui_compare import open_demo

DEMO = "piglatin-gru-additive"


def answer_next_dialog(answers: list, press) -> None:
    """When the next modal dialog opens, note it and answer it with ``press(dialog)``."""
    def answer() -> None:
        dialog = QApplication.activeModalWidget()
        if dialog is None:
            QTimer.singleShot(10, answer)
            return
        answers.append(dialog)
        press(dialog)

    QTimer.singleShot(0, answer)


def test_a_demo_runs_its_own_examples_by_default(qtbot, window):
    open_demo(qtbot, window, DEMO)
    pairs = demo_reference_pairs(DEMO)
    asked: list = []
    answer_next_dialog(asked, lambda box: box.defaultButton().click())  # Enter: the default
    window.stats.open()  # View → Corpus head statistics…
    assert isinstance(asked[0], QMessageBox)
    assert asked[0].defaultButton().text() == f"This demo's {len(pairs)} examples"
    panel = window.head_stats
    assert "Running this demo's 16 example pairs" in html.unescape(panel.view.summary.text())
    qtbot.waitUntil(lambda: panel.stats is not None, timeout=WAIT)
    assert panel.stats.pairs == pairs and f"{len(pairs)} sentences" in panel.view.summary.text()
    assert panel.view.plots and panel.view.cell_labels  # the maps are drawn

    answer_next_dialog(asked, lambda box: box.defaultButton().click())
    window.importance.open()  # View → Head importance…
    importance = window.importance_panel
    qtbot.waitUntil(lambda: importance.importance is not None, timeout=60_000)
    assert importance.importance.examples == len(pairs)
    assert f"{len(pairs)} sentences;" in importance.view.summary.text() and importance.view.plots


def test_a_file_stays_one_click_away_and_cancel_runs_nothing(qtbot, window):
    open_demo(qtbot, window, DEMO)
    asked: list = []

    def choose_file(box) -> None:
        answer_next_dialog(asked, lambda dialog: dialog.reject())  # the file dialog that follows: cancelled
        next(button for button in box.buttons() if button.text() == "A PAIRS.tsv file…").click()

    answer_next_dialog(asked, choose_file)
    window.stats.open()
    assert isinstance(asked[0], QMessageBox) and isinstance(asked[1], QFileDialog)
    assert window.head_stats is None  # nothing chosen: no job, no dock
    answer_next_dialog(asked, lambda box: box.button(QMessageBox.StandardButton.Cancel).click())
    window.importance.open()
    assert window.importance_panel is None


def test_a_model_that_is_no_demo_asks_for_the_file_at_once(qtbot, window):
    asked: list = []
    answer_next_dialog(asked, lambda dialog: dialog.reject())
    window.stats.open()
    assert len(asked) == 1 and isinstance(asked[0], QFileDialog)
