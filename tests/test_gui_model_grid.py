"""A decoder-only model of 32 layers × 32 query heads (8 key/value heads) in a real offscreen window at 1366×768: the
"All layers × heads" tab keeps thumbnails readable (at least LEAST_SIDE pixels) and scrolls; the last layer scrolls
into view, a click there selects the head drawn there, switching it off ablates exactly that head, and only the
thumbnails in view are coloured."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PySide6.QtCore import QEvent, Qt
from PySide6.QtGui import QColor, QContextMenuEvent, QHelpEvent
from PySide6.QtWidgets import QApplication, QToolTip

from attnviz.gui.views.mosaic import HEADER_BACKGROUND
from attnviz.state.grid_layout import LEAST_SIDE
from models import build_model
from models.nn.config import DecoderOnlyConfig
from models.storage.checkpoint import save_checkpoint
from tests.test_gui import WAIT, run_text
from tests.test_gui_ablation import wait_for_run

LAYERS, HEADS, KV_HEADS = 32, 32, 8


@pytest.fixture
def grid_window(qtbot, qsettings, tmp_path, char_tokenizer):
    from attnviz.gui.app import create_window

    torch.manual_seed(0)
    config = DecoderOnlyConfig(arch="decoder-only", vocab_size=char_tokenizer.vocab_size, d_model=2 * HEADS,
                               layers=LAYERS, heads=HEADS, kv_heads=KV_HEADS, d_ff=16, max_len=32, pad_id=0, bos_id=2,
                               eos_id=3, prompt_separator=True)
    path = save_checkpoint(tmp_path / "deep.safetensors", build_model(config), char_tokenizer, char_tokenizer)
    window = create_window(str(path), "cpu", qsettings)
    qtbot.addWidget(window)
    window.resize(1366, 768)
    window.show()
    qtbot.waitUntil(lambda: window.session.model is not None, timeout=WAIT)
    run_text(qtbot, window, "abc", max_len=3)
    grid = window.views.model_view
    window.views.grids.setCurrentWidget(grid)
    qtbot.waitUntil(lambda: grid.isVisible() and grid.shape == (LAYERS, HEADS), timeout=WAIT)
    yield window
    window.close()


def in_view(grid, layer: int, head: int) -> bool:
    return grid.viewport().rect().contains(grid.cell_rect(layer, head).toRect())


def test_the_32_by_32_grid_keeps_readable_thumbnails_and_scrolls_the_selection_into_view(qtbot, grid_window):
    window, grid = grid_window, grid_window.views.model_view
    assert grid.grid.side >= LEAST_SIDE and grid.verticalScrollBar().maximum() > 0
    assert grid.col_names[5] == "H5·kv1" and grid.grid.x(4) - grid.grid.x(3) > grid.grid.x(3) - grid.grid.x(2)
    window.select(layer=0, head=0)
    qtbot.waitUntil(lambda: in_view(grid, 0, 0), timeout=WAIT)
    assert not in_view(grid, LAYERS - 1, HEADS - 1)
    window.select(layer=LAYERS - 1, head=HEADS - 1)
    qtbot.waitUntil(lambda: in_view(grid, LAYERS - 1, HEADS - 1), timeout=WAIT)
    assert grid.selected == (LAYERS - 1, HEADS - 1)
    image = grid.viewport().grab().toImage()  # painted: the names stay over the scrolled grid; few thumbnails coloured
    assert image.pixelColor(2, 2) == QColor(HEADER_BACKGROUND) and 0 < len(grid.images) < LAYERS * HEADS / 2


def test_a_click_in_the_last_layer_selects_the_head_drawn_there_and_its_menu_ablates_exactly_it(qtbot, grid_window):
    window, grid = grid_window, grid_window.views.model_view
    grid.verticalScrollBar().setValue(grid.verticalScrollBar().maximum())
    head = 2
    qtbot.waitUntil(lambda: in_view(grid, LAYERS - 1, head), timeout=WAIT)
    point = grid.cell_rect(LAYERS - 1, head).center().toPoint()
    qtbot.mouseClick(grid.viewport(), Qt.MouseButton.LeftButton, pos=point)
    qtbot.waitUntil(lambda: (window.session.selection.layer, window.session.selection.head) == (LAYERS - 1, head),
                    timeout=WAIT)
    assert f"head {head}" in window.views.focus.title.text()
    QApplication.sendEvent(grid.viewport(), QHelpEvent(QEvent.Type.ToolTip, point, grid.viewport().mapToGlobal(point)))
    assert f"L{LAYERS - 1} · H{head}·kv0: click" in QToolTip.text()
    QApplication.sendEvent(grid.viewport(), QContextMenuEvent(QContextMenuEvent.Reason.Mouse, point,
                                                              grid.viewport().mapToGlobal(point)))
    qtbot.waitUntil(lambda: getattr(grid, "menu", None) is not None and grid.menu.isVisible(), timeout=WAIT)
    (switch,) = [action for action in grid.menu.actions() if action.text() == "Switch head off"]
    switch.trigger()
    grid.menu.close()
    wait_for_run(qtbot, window, ablated=True)
    assert window.session.trace.ablated == (("dec_self", LAYERS - 1, head),)
    qtbot.waitUntil(lambda: grid.off.count(True) == 1, timeout=WAIT)
    assert grid.off[(LAYERS - 1) * HEADS + head]


def test_the_summary_shows_every_head_as_one_cell_in_the_tab_and_a_click_selects_it(qtbot, grid_window):
    window, grid = grid_window, grid_window.views.model_view
    grid.summary.setChecked(True)
    qtbot.waitUntil(lambda: grid.matrices and grid.matrices[0].shape == (1, 1), timeout=WAIT)
    assert grid.horizontalScrollBar().maximum() == 0 and grid.verticalScrollBar().maximum() == 0  # all in view
    trace = window.session.trace
    weights, mask = trace.attention["dec_self"][LAYERS - 1][HEADS - 1], trace.masks["dec_self"]
    rows = [(row[mask[index]], mask[index].sum()) for index, row in enumerate(weights) if mask[index].sum() >= 2]
    expected = np.mean([-(row * np.log(row)).sum() / np.log(seen) for row, seen in rows])
    assert grid.image(LAYERS - 1, HEADS - 1)[0, 0] == pytest.approx(expected, rel=1e-5)
    qtbot.mouseClick(grid.viewport(), Qt.MouseButton.LeftButton, pos=grid.cell_rect(LAYERS - 1, 9).center().toPoint())
    qtbot.waitUntil(lambda: (window.session.selection.layer, window.session.selection.head) == (LAYERS - 1, 9),
                    timeout=WAIT)
    assert grid.selected == (LAYERS - 1, 9)
    grid.summary.setChecked(False)  # the thumbnails again
    qtbot.waitUntil(lambda: grid.matrices[0].shape != (1, 1), timeout=WAIT)
    assert grid.grid.side >= LEAST_SIDE
