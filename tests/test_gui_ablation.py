"""Switching heads off in the window: the thumbnails' context menu, the "N heads off — Restore" bar, the
re-decoded output beside the original with a token diff, and the marks on switched-off heads. A real
window on a real trained demo (and on the shared random checkpoint); no mocks."""

from __future__ import annotations

import numpy as np
import pytest
from PySide6.QtCore import QPoint
from PySide6.QtGui import QContextMenuEvent
from PySide6.QtWidgets import QApplication

from attnviz.state import stats_view, viewmodel
from attnviz.state.demos import demo_path
from tests.test_gui import WAIT, run_text

DEMO = "piglatin-gru-transformer-decoder"


def wait_for_run(qtbot, window, ablated: bool) -> None:
    qtbot.waitUntil(lambda: bool(window.session.results) and bool(window.session.request.ablation) == ablated
                    and (window.session.original is not None) == ablated, timeout=WAIT)


def menu_texts(grid, row: int, col: int) -> list[str]:
    return [action.text() for action in grid.context_menu(row, col).actions()]


def trigger(grid, row: int, col: int, text: str) -> None:
    (action,) = [action for action in grid.context_menu(row, col).actions() if action.text() == text]
    action.trigger()


def test_switching_a_head_off_shows_both_outputs_a_diff_and_marks_and_restore_undoes_it(qtbot, window):
    window.open_path(str(demo_path(DEMO)))
    qtbot.waitUntil(lambda: window.session.model.path.stem == DEMO, timeout=WAIT)
    run_text(qtbot, window, "strength through joy", max_len=40)
    original = window.session.result.text
    assert original == "engthstray oughthray oyjay" and not window.views.ablation_bar.isVisible()
    window.select(kind="cross", layer=0, head=0)
    grid = window.views.model_view
    assert menu_texts(grid, 0, 0) == ["Switch head off", "Switch layer off"]

    trigger(grid, 0, 0, "Switch head off")
    wait_for_run(qtbot, window, ablated=True)
    session = window.session
    assert session.request.ablation.specs() == ["cross:0:0"]
    assert session.trace.ablated == (("cross", 0, 0),)
    ablated = session.result.text
    assert ablated != original and session.original.text == original
    assert window.views.ablation_bar.isVisible() and window.views.ablation_bar.label.text() == "1 head off —"
    assert "cross-attention L0 H0" in window.views.ablation_bar.label.toolTip()
    shown = window.views.input_bar.result_text()
    assert f"with every head on: {original}" in shown and f"<b>{ablated}</b>" in shown
    diff = viewmodel.token_diff(session.original.tokens, session.result.tokens)
    deleted, inserted = ([token for token, change in diff if change == kind] for kind in ("deleted", "inserted"))
    assert deleted and shown.count("<s>") == len(deleted) and shown.count("<u>") == len(inserted)
    # the marks: crossed-out thumbnail in both grids, "switched off" in the focus title
    assert grid.off == [True, False, False]
    window.select(layer=0, head=0)
    assert window.views.head_grid.crosses[0].isVisible()
    assert "switched off" in window.views.focus.title.text()
    window.select(layer=1)
    assert not window.views.head_grid.crosses[0].isVisible() and "switched off" not in window.views.focus.title.text()
    # the weights the switched-off head computed are still shown, and still sum to one per row
    np.testing.assert_allclose(session.trace.attention["cross"][0][0].sum(axis=-1), 1.0, atol=1e-5)
    assert menu_texts(grid, 0, 0) == ["Switch head on", "Switch layer on"]  # one head is the whole layer here

    # the traces of both: every view can show the run with every head on, and back
    window.select(layer=0, head=0)
    ablated_matrix = session.trace.attention["cross"][0][0]
    window.views.ablation_bar.compare.setChecked(True)
    assert session.trace is session.original.trace and session.trace.ablated == ()
    np.testing.assert_array_equal(window.views.focus.image.image, session.original.trace.attention["cross"][0][0])
    assert not np.array_equal(window.views.focus.image.image, ablated_matrix)
    assert not any(grid.off)
    assert "switched off" not in window.views.focus.title.text()
    assert f"<b>{ablated}</b>" in window.views.input_bar.result_text()  # the result line still shows this run
    window.views.ablation_bar.compare.setChecked(False)
    np.testing.assert_array_equal(window.views.focus.image.image, ablated_matrix)
    assert grid.off[0]

    window.views.ablation_bar.restore.click()
    wait_for_run(qtbot, window, ablated=False)
    assert window.session.result.text == original and not window.views.ablation_bar.isVisible()
    assert "with every head on" not in window.views.input_bar.result_text()
    assert not any(grid.off)


def test_switching_a_layer_off_from_the_head_grid(qtbot, window):
    run_text(qtbot, window, "abc", max_len=5)
    window.select(kind="cross", layer=1, head=2)
    trigger(window.views.head_grid, 0, 2, "Switch layer off")
    wait_for_run(qtbot, window, ablated=True)
    assert window.session.trace.ablated == tuple(("cross", 1, head) for head in range(4))
    assert window.views.ablation_bar.label.text() == "4 heads off —"
    assert all(cross.isVisible() for cross in window.views.head_grid.crosses)
    assert window.views.model_view.off == [False] * 4 + [True] * 4
    window.select(head="mean")
    assert "4 of 4 heads off" in window.views.focus.title.text()
    assert menu_texts(window.views.head_grid, 0, 1) == ["Switch head on", "Switch layer on"]
    trigger(window.views.head_grid, 0, 1, "Switch head on")  # one back on: three stay off
    wait_for_run(qtbot, window, ablated=True)
    assert window.session.trace.ablated == (("cross", 1, 0), ("cross", 1, 2), ("cross", 1, 3))
    assert window.views.ablation_bar.label.text() == "3 heads off —"


def test_a_right_click_on_a_thumbnail_opens_the_menu(qtbot, window):
    run_text(qtbot, window, "abc", max_len=4)
    grid = window.views.model_view
    point = grid.cell_rect(1, 1).center().toPoint()  # layer 1, head 1
    event = QContextMenuEvent(QContextMenuEvent.Reason.Mouse, point, grid.viewport().mapToGlobal(point))
    QApplication.sendEvent(grid.viewport(), event)
    qtbot.waitUntil(lambda: getattr(grid, "menu", None) is not None and grid.menu.isVisible(), timeout=WAIT)
    assert [action.text() for action in grid.menu.actions()] == ["Switch head off", "Switch layer off"]
    grid.menu.actions()[0].trigger()
    grid.menu.close()
    wait_for_run(qtbot, window, ablated=True)
    assert window.session.trace.ablated == (("cross", 1, 1),)
    assert grid.cell_at(QPoint(-5, -5)) is None


def test_head_importance_shows_a_layers_by_heads_heatmap_and_clicking_a_head_focuses_it(qtbot, window, tmp_path):
    from models.text.piglatin import to_pig_latin
    from tests.test_head_stats_gui import cell_position
    from PySide6.QtCore import Qt

    window.open_path(str(demo_path(DEMO)))
    qtbot.waitUntil(lambda: window.session.model.path.stem == DEMO and bool(window.session.results), timeout=WAIT)
    corpus = tmp_path / "pairs.tsv"
    words = ["impress", "strength through joy", "hello world", "good morning", "open the door", "green apple"]
    corpus.write_text("".join(f"{word}\t{to_pig_latin(word)}\n" for word in words), encoding="utf-8")
    window.importance.open(str(corpus))
    panel = window.importance_panel
    panel.choose_method("decode")  # exact match from decoding again (the NLL methods: test_gui_importance_methods.py)
    qtbot.waitUntil(lambda: panel.importance is not None, timeout=60_000)
    importance, view = panel.importance, panel.view
    assert importance.metric == "exact" and importance.examples == len(words)
    assert [panel_.name for panel_ in stats_view.importance_state(importance, "cross").panels] == ["drop", "left"]
    assert view.kind.currentData() == "cross" and view.shape == (3, 1)
    np.testing.assert_array_equal(view.plots[0][1].image, importance.drops["cross"].astype(np.float32))
    assert f"{len(words)} sentences; exact match % {importance.baseline:.2f}" in view.summary.text()
    view.kind.setCurrentIndex(view.kind.findData("dec_self"))
    np.testing.assert_array_equal(view.plots[0][1].image, importance.drops["dec_self"].astype(np.float32))
    qtbot.mouseClick(view.panels.viewport(), Qt.MouseButton.LeftButton, pos=cell_position(view, 0, 2, 0))
    selection = window.session.selection
    assert (selection.kind, selection.layer, selection.head) == ("dec_self", 2, 0)
    assert view.head_title.text().startswith("Decoder self-attention, layer 2, head 0: exact match %")
    assert view.plots[0][2].isVisible()  # the clicked head is outlined
    window.importance.open(str(tmp_path / "missing.tsv"))
    qtbot.waitUntil(lambda: "No head importance:" in view.summary.text(), timeout=WAIT)
    assert "no such file" in view.summary.text()


def test_a_sentence_run_during_head_importance_is_answered_between_heads(qtbot, window, tmp_path):
    """The worker is one thread: a run asked for while importance is being scored must not wait for the whole
    job (24 heads here) but be answered after the head being scored."""
    corpus = tmp_path / "pairs.tsv"
    corpus.write_text("abc\tcba\nhag\tgah\nbad\tdab\n", encoding="utf-8")
    run_text(qtbot, window, "abc", max_len=4)
    answers = []
    worker = window.worker_thread.worker
    worker.importance_ready.connect(lambda *_: answers.append("importance"))
    worker.finished.connect(lambda *_: answers.append("run"))
    window.importance.open(str(corpus))
    window.views.input_bar.text.setText("bad")
    window.run()
    qtbot.waitUntil(lambda: window.importance_panel.importance is not None, timeout=60_000)
    assert answers == ["run", "importance"]
    assert window.session.result is not None and window.session.trace.src_tokens[:3] == ["b", "a", "d"]


def test_a_session_file_keeps_the_switched_off_heads(qtbot, window, qsettings, tmp_path, random_checkpoint):
    import json

    from attnviz.gui.app import create_window
    from attnviz.state.session_file import SessionFileError, read_session

    run_text(qtbot, window, "abc", max_len=5)
    window.select(kind="cross", layer=1, head=3)
    trigger(window.views.model_view, 1, 3, "Switch head off")
    wait_for_run(qtbot, window, ablated=True)
    path = tmp_path / "ablated.attnviz"
    window.sessions.save_session(str(path))
    document = json.loads(path.read_text(encoding="utf-8"))
    assert document["ablation"] == ["cross:1:3"]
    document["ablation"] = ["cross:1:3", "enc_self:0:*"]  # a whole layer, as a hand-written session may say
    path.write_text(json.dumps(document), encoding="utf-8")

    other = create_window(None, "cpu", qsettings)
    qtbot.addWidget(other)
    other.show()
    qtbot.waitUntil(lambda: other.session.model is not None and bool(other.session.results), timeout=WAIT)
    other.sessions.open_session(str(path))
    qtbot.waitUntil(lambda: other.session.model.path == random_checkpoint and bool(other.session.results)
                    and other.opening.plan is None, timeout=WAIT)
    assert other.session.trace.ablated == tuple(("enc_self", 0, head) for head in range(4)) + (("cross", 1, 3),)
    assert other.views.ablation_bar.isVisible() and other.views.ablation_bar.label.text() == "5 heads off —"
    window.session.toggle_layer("enc_self", 0)
    window.run()
    wait_for_run(qtbot, window, ablated=True)
    assert window.session.result.text == other.session.result.text
    np.testing.assert_array_equal(other.views.focus.image.image, window.views.focus.image.image)
    other.close()

    document = json.loads(path.read_text(encoding="utf-8"))
    document["ablation"] = ["cross:one:3"]
    path.write_text(json.dumps(document), encoding="utf-8")
    with pytest.raises(SessionFileError) as problem:
        read_session(path)
    assert str(problem.value).startswith(f"{path}: ablation 'cross:one:3': the layer must be a number")
