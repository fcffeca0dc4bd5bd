"""Faults a teacher met within minutes of using the app, each driven as a user would in a real offscreen
window: run settings that leaked from one model to the next, a readout describing tokens that no longer
exist, navigation keys swallowed by the sentence box, demos that needed a double click."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PySide6.QtCore import QPointF, Qt
from PySide6.QtGui import QImage

from attnviz.state import viewmodel
from attnviz.state.demos import DEMO_FOLDER, demo_examples
from models import build_model
from models.storage.checkpoint import save_checkpoint
from models.trace.records import DecodeResult
from tests.helpers import settled, tiny_config
from tests.test_gui import WAIT, focus_data, run_text
from tests.test_gui_import import wait_for_dialog

# test_gui_import's fixture ``tutorial_files`` reaches the tests by name as a plugin's fixture; imported by name, the
# tests' parameter would shadow the import
pytest_plugins = ["tests.test_gui_import"]


@pytest.fixture(scope="module")
def short_checkpoint(tmp_path_factory, char_tokenizer):
    """A second model whose length limit (40) differs from the random checkpoint's (64)."""
    torch.manual_seed(2)
    model = build_model(tiny_config("gru-additive", max_len=40))
    return save_checkpoint(tmp_path_factory.mktemp("short") / "short.safetensors", model, char_tokenizer,
                           char_tokenizer)


def open_and_wait(qtbot, window, path) -> None:
    window.open_path(str(path))
    qtbot.waitUntil(lambda: window.session.model is not None and window.session.model.path == path, timeout=WAIT)


def test_each_model_keeps_its_own_length_limit_text_mode_and_target(qtbot, window, random_checkpoint,
                                                                    short_checkpoint):
    bar = window.views.input_bar
    assert bar.max_len.value() == 64  # the model's own limit, not a fixed 100
    run_text(qtbot, window, "abc", mode="forced", target="cba", max_len=64)
    open_and_wait(qtbot, window, short_checkpoint)
    assert bar.max_len.value() == bar.max_len.maximum() == 40
    assert (bar.text.text(), bar.mode.currentData(), bar.target.text()) == ("", "greedy", "")
    bar.text.setText("hag")
    open_and_wait(qtbot, window, random_checkpoint)
    assert bar.max_len.value() == 64  # not the other model's 40
    assert (bar.text.text(), bar.mode.currentData(), bar.target.text()) == ("abc", "forced", "cba")
    open_and_wait(qtbot, window, short_checkpoint)
    assert bar.text.text() == "hag"


def test_a_run_cut_at_the_length_limit_says_so(qtbot, window):
    run_text(qtbot, window, "abcabc", max_len=2)
    result = window.session.result
    stopped = result.token_ids[-1] != window.session.model.config["eos_id"]
    assert ("length limit (2 tokens)" in window.views.input_bar.result_text()) == stopped


def test_the_result_line_says_when_the_limit_cut_the_output():
    cut = DecodeResult(token_ids=[5, 6], tokens=["a", "b"], text="ab", log_prob=-1.0, score=-1.0, trace=None, steps=[])
    ended = DecodeResult(token_ids=[5, 3], tokens=["a", "</s>"], text="a", log_prob=-1.0, score=-1.0, trace=None,
                         steps=[])
    assert "length limit (2 tokens)" in viewmodel.result_line(cut, [], limit=2, eos_id=3).notices[-1]
    assert viewmodel.result_line(ended, [], limit=2, eos_id=3).notices == []
    assert viewmodel.result_line(cut, [], limit=3, eos_id=3).notices == []


def test_a_demo_offers_its_examples_and_opens_with_one_click(qtbot, window):
    panel = window.views.model_panel.demos
    item = next(panel.item(row) for row in range(panel.count()) if panel.item(row).text() == "piglatin-gru-additive")
    qtbot.mouseClick(panel.viewport(), Qt.MouseButton.LeftButton, pos=panel.visualItemRect(item).center())
    path = DEMO_FOLDER / "piglatin-gru-additive.safetensors"
    qtbot.waitUntil(lambda: window.session.model.path == path and bool(window.session.results), timeout=WAIT)
    menu = window.views.input_bar.examples.menu()
    assert [action.text() for action in menu.actions()] == demo_examples(path)
    menu.actions()[2].trigger()
    qtbot.waitUntil(lambda: window.session.request.settings.text == demo_examples(path)[2]
                    and bool(window.session.results), timeout=WAIT)
    assert window.session.result.text == "eamtay"


def hover(window, key: int, query: int) -> None:
    window.views.focus._on_mouse_moved(window.views.focus.plot.getViewBox().mapViewToScene(QPointF(key, query)))


def test_the_hover_readout_and_crosshair_go_when_the_data_changes(qtbot, window):
    run_text(qtbot, window, "abcd", max_len=4)
    hover(window, 3, 0)
    assert "‘d’" in window.views.focus.readout.text() and window.views.focus.vline.isVisible()
    run_text(qtbot, window, "ab", max_len=4)  # key 3 no longer exists
    assert "‘d’" not in window.views.focus.readout.text() and not window.views.focus.vline.isVisible()
    hover(window, 1, 0)
    window.select(layer=1)
    assert window.views.focus.readout.text().startswith("Hover") and not window.views.focus.hline.isVisible()


def test_exports_leave_out_the_crosshair_and_readout(qtbot, window, tmp_path):
    run_text(qtbot, window, "abcd", mode="forced", target="dcba")
    clean, hovered = tmp_path / "clean.png", tmp_path / "hovered.png"
    window.exporting.export_focus_image(str(clean))
    hover(window, 2, 1)
    window.exporting.export_focus_image(str(hovered))
    assert window.views.focus.vline.isVisible()  # still there in the window after the export
    assert QImage(str(clean)) == QImage(str(hovered))


def test_navigation_keys_work_while_the_sentence_box_has_the_focus(qtbot, window):
    run_text(qtbot, window, "abcd", mode="forced", target="dcba")
    window.select(layer=0, head=0, step=0)
    box = window.views.input_bar.text
    box.setFocus()
    qtbot.keyClick(box, Qt.Key.Key_Right, Qt.KeyboardModifier.ControlModifier)
    qtbot.keyClick(box, Qt.Key.Key_Down, Qt.KeyboardModifier.ControlModifier)
    qtbot.keyClick(box, Qt.Key.Key_Right, Qt.KeyboardModifier.AltModifier)
    selection = window.session.selection
    assert (selection.head, selection.layer, selection.step) == (1, 1, 1)


def test_first_and_last_step_buttons_and_zoom_reset(qtbot, window):
    run_text(qtbot, window, "abcd", mode="forced", target="dcba")
    controls = window.views.decoding.controls
    controls.first.click()
    assert window.session.selection.step == 0
    controls.last.click()
    assert window.session.selection.step == len(window.session.trace.tgt_tokens) - 1
    view = window.views.focus.plot.getViewBox()
    view.setRange(xRange=(0, 1), yRange=(0, 1), padding=0)
    window.views.focus.reset_zoom()
    (x_low, x_high), (y_low, y_high) = view.viewRange()
    rows, cols = window.views.focus.matrix.shape
    np.testing.assert_allclose([x_low, x_high, y_low, y_high], [-0.5, cols - 0.5, -0.5, rows - 0.5], atol=1e-6)


def test_the_colour_bar_shows_the_maps_own_range_on_request(qtbot, window):
    run_text(qtbot, window, "abcd", mode="forced", target="dcba")
    window.select(kind="cross", head="mean")
    assert window.views.focus.colorbar.levels() == (0.0, 1.0)
    window.views.selector.colour_range.setCurrentIndex(window.views.selector.colour_range.findData("own"))
    matrix = window.session.trace.attention["cross"][window.session.selection.layer].mean(axis=0)
    np.testing.assert_allclose(window.views.focus.colorbar.levels(), (matrix.min(), matrix.max()), rtol=1e-5)
    np.testing.assert_allclose(window.views.focus.image.getLevels(), (matrix.min(), matrix.max()), rtol=1e-5)
    window.views.selector.predicted.setChecked(True)
    assert window.views.focus.query_tokens[0] == f"<s> → {window.session.result.tokens[0]}"


def test_help_explains_the_screen_and_lists_the_shortcuts(qtbot, window):
    from PySide6.QtWidgets import QDialog, QTextBrowser

    window.show_shortcuts()
    dialog = window.findChildren(QDialog)[-1]
    text = dialog.findChild(QTextBrowser).toPlainText()
    assert "Next head" in text and "Ctrl+Right" in text and "Reset zoom" in text
    dialog.close()
    window.explain()
    text = window.findChildren(QDialog)[-1].findChild(QTextBrowser).toPlainText()
    assert "Masks" in text and "rollout" in text and "Beam" in text
    assert "masked" in window.views.focus.legend.text() and "current decoding step" in window.views.focus.legend.text()


def test_copy_image_puts_the_heatmap_on_the_clipboard_without_the_crosshair(qtbot, window, qapp, tmp_path):
    """The clipboard gets the exported figure (what a PNG export writes), never the pointer's crosshair."""
    run_text(qtbot, window, "abcd", mode="forced", target="dcba")
    hover(window, 1, 0)
    qtbot.keyClick(window, Qt.Key.Key_C, Qt.KeyboardModifier.ControlModifier | Qt.KeyboardModifier.ShiftModifier)
    copied = qapp.clipboard().image()
    window.views.focus.clear_hover()
    window.exporting.export_focus_image(str(tmp_path / "clean.png"))
    clean = QImage(str(tmp_path / "clean.png"))
    assert not copied.isNull() and copied.convertToFormat(clean.format()) == clean


def test_the_layout_holds_at_1000_by_650_and_beam_mode_does_not_grow_the_window(qtbot, window):
    from attnviz.gui.views.decoding import CHART_MIN_HEIGHT

    window.resize(1000, 650)
    qtbot.waitUntil(lambda: (window.width(), window.height()) == (1000, 650), timeout=WAIT)
    run_text(qtbot, window, "abcabc " * 6, mode="beam", beam=8, max_len=20)
    charts = (window.views.decoding.source_strip, window.views.decoding.top_k, window.views.decoding.beam)
    settled(qtbot, lambda: (window.geometry(), [chart.geometry() for chart in charts],  # the beam's panels laid out
                            window.views.grids.tabBar().geometry()), timeout=WAIT)
    assert (window.width(), window.height()) == (1000, 650)
    assert window.minimumSizeHint().height() <= 650 and window.minimumSizeHint().width() <= 1000
    for chart in (window.views.decoding.source_strip, window.views.decoding.top_k, window.views.decoding.beam):
        assert chart.height() >= CHART_MIN_HEIGHT  # readable, not collapsed to a few pixels
    tabs = window.views.grids.tabBar()  # both grid tabs in view (shortened if need be), no scroll arrows to find one
    assert all(tabs.tabRect(index).right() <= tabs.width() for index in range(tabs.count()))
    assert [tabs.tabToolTip(index) for index in range(tabs.count())] == ["Heads of this layer", "All layers × heads"]


def test_forced_without_a_target_asks_for_the_target_instead_of_running(qtbot, window):
    run_text(qtbot, window, "abc", max_len=4)
    ran, bar = window.session.request, window.views.input_bar
    bar.mode.setCurrentIndex(bar.mode.findData("forced"))
    bar.debounce.stop()
    window.activateWindow()
    bar.text.setFocus()
    qtbot.keyClicks(bar.text, "d")  # typing: the run that follows the pause leaves the cursor where it is
    qtbot.waitUntil(lambda: "Type the target to force" in bar.result_text(), timeout=WAIT)
    assert window.session.request is ran and bar.text.hasFocus()
    assert "2px solid" in bar.target.styleSheet()  # the box that needs it is marked
    qtbot.keyClick(bar.text, Qt.Key.Key_Return)  # asked for: the cursor goes to the target box
    assert window.session.request is ran and bar.target.hasFocus() and not bar.busy.isVisibleTo(bar)
    qtbot.keyClicks(bar.target, "dcba")
    assert bar.target.styleSheet() == ""
    qtbot.keyClick(bar.target, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: window.session.request is not ran and bool(window.session.results), timeout=WAIT)
    assert window.session.request.settings.target == "dcba" and window.session.result.tokens[:4] == list("dcba")


def test_opening_another_model_clears_the_old_ones_steps_beam_and_demo(qtbot, window, random_checkpoint):
    panel = window.views.model_panel.demos
    demo = DEMO_FOLDER / "piglatin-gru-additive.safetensors"
    item = next(panel.item(row) for row in range(panel.count()) if panel.item(row).text() == demo.stem)
    qtbot.mouseClick(panel.viewport(), Qt.MouseButton.LeftButton, pos=panel.visualItemRect(item).center())
    qtbot.waitUntil(lambda: window.session.model.path == demo and bool(window.session.results), timeout=WAIT)
    run_text(qtbot, window, "hello", mode="beam", beam=3, max_len=8)
    decoding = window.views.decoding
    assert decoding.top_k.labels and decoding.beam.isVisibleTo(window) and decoding.controls.isEnabled()
    assert panel.selectedItems() == [item] and window.opening.demo_actions[demo].isChecked()

    def nothing_of_the_demo() -> None:
        assert decoding.top_k.labels == () and decoding.source_strip.labels == ()
        assert not decoding.beam.isVisibleTo(window) and not decoding.controls.isEnabled()
        assert focus_data(window) is None or focus_data(window).size == 0
        demo_actions = window.opening.demo_actions.values()
        assert panel.selectedItems() == [] and not any(action.isChecked() for action in demo_actions)
        assert "El" not in decoding.prefix.text() and "piglatin" not in window.views.model_panel.info.text()

    window.open_path(str(random_checkpoint))
    nothing_of_the_demo()  # at once, while the other model loads
    qtbot.waitUntil(lambda: window.session.model.path == random_checkpoint, timeout=WAIT)
    nothing_of_the_demo()


def test_a_model_that_fails_to_open_leaves_the_open_one_shown_as_it_was(qtbot, window, tmp_path):
    run_text(qtbot, window, "abc", max_len=4)
    labels = window.views.decoding.top_k.labels
    bad = tmp_path / "broken.safetensors"
    bad.write_bytes(b"\x00" * 40)
    window.open_path(str(bad))
    qtbot.waitUntil(lambda: "Cannot open it" in window.views.input_bar.result_text(), timeout=WAIT)
    assert window.views.decoding.top_k.labels == labels and labels
    np.testing.assert_array_equal(focus_data(window), window.viewing.current_heatmap().matrix)
    assert "random.safetensors" in window.views.model_panel.info.text()


def test_a_cancelled_import_leaves_the_open_model_shown_as_it_was(qtbot, window, tutorial_files):
    run_text(qtbot, window, "abc", max_len=4)
    labels = window.views.decoding.top_k.state.labels
    folder, _, _ = tutorial_files
    window.open_path(str(folder / "whole.pt"))
    assert window.views.decoding.top_k.labels == ()  # nothing of the open model while another one opens
    wait_for_dialog(qtbot, window).reject()
    assert window.views.decoding.top_k.state.labels == labels and labels
    np.testing.assert_array_equal(focus_data(window), window.viewing.current_heatmap().matrix)
    assert "random.safetensors" in window.views.model_panel.info.text()


def test_presenting_keeps_the_steps_and_the_next_token_chart_in_view(qtbot, window):
    run_text(qtbot, window, "abc", max_len=4)
    decoding = window.views.decoding
    window.named_actions["present"].trigger()
    qtbot.waitUntil(lambda: not window.views.model_dock.isVisible(), timeout=WAIT)
    settled(qtbot, lambda: (window.geometry(), decoding.top_k.geometry(), decoding.source_strip.geometry()),
            timeout=WAIT)  # the presentation's layout
    assert decoding.top_k.isVisible() and decoding.controls.isVisible()
    assert decoding.top_k.labels and not window.views.model_dock.isVisible()
    # Beside the heatmap (where the grids were), its charts one above the other: the heatmap keeps its height.
    assert window.dockWidgetArea(window.views.decoding_dock) == Qt.DockWidgetArea.RightDockWidgetArea
    assert decoding.top_k.geometry().top() >= decoding.source_strip.geometry().bottom()
    window.presenting.set_presenting(False)
    qtbot.waitUntil(lambda: window.views.model_dock.isVisible(), timeout=WAIT)
    settled(qtbot, lambda: (window.geometry(), decoding.top_k.geometry(), decoding.source_strip.geometry()),
            timeout=WAIT)  # the layout from before
    assert window.views.model_dock.isVisible() and window.views.decoding_dock.isVisible()
    assert window.dockWidgetArea(window.views.decoding_dock) == Qt.DockWidgetArea.BottomDockWidgetArea
    assert decoding.top_k.geometry().left() >= decoding.source_strip.geometry().right()


def test_a_window_closed_while_presenting_opens_next_time_as_it_was_before(qtbot, qsettings, random_checkpoint):
    """Closing the app in presentation mode saved the presentation's layout: the next launch had neither the
    Model nor the Decoding panel (and the presentation's fonts)."""
    from attnviz.gui.app import create_window

    first = create_window(str(random_checkpoint), "cpu", qsettings)
    qtbot.addWidget(first)
    first.show()
    qtbot.waitUntil(lambda: first.session.model is not None, timeout=WAIT)
    font = first.font().pointSizeF()
    first.named_actions["present"].trigger()
    qtbot.waitUntil(lambda: not first.views.model_dock.isVisible(), timeout=WAIT)
    first.close()
    second = create_window(str(random_checkpoint), "cpu", qsettings)
    qtbot.addWidget(second)
    second.show()
    qtbot.waitUntil(lambda: second.session.model is not None, timeout=WAIT)
    views = second.views
    settled(qtbot, lambda: (second.geometry(), views.model_dock.isVisible(), views.decoding_dock.isVisible()),
            timeout=WAIT)  # the layout restored
    assert second.views.model_dock.isVisible() and second.views.decoding_dock.isVisible()
    assert not second.presenting.on and second.font().pointSizeF() == font
    second.close()


def test_the_title_names_the_model_once(qtbot, window):
    assert window.windowTitle() == "random.safetensors — attnviz"
    demo = DEMO_FOLDER / "en-es-transformer.safetensors"
    window.open_path(str(demo))
    qtbot.waitUntil(lambda: window.session.model.path == demo, timeout=WAIT)
    # It ends with the application's name, so Qt appends nothing more to it ("… — attnviz — attnviz").
    assert window.windowTitle() == "en-es-transformer — attnviz"
