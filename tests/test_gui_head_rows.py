"""A decoder-only model of 32 heads in a real offscreen window: the "Heads of this layer" tab draws them in rows of
near-square thumbnails, and a click, the menu that switches a head (or its layer) off, hover and the key/value-group
marks all name the head drawn there, on every row. A model of 8 heads keeps its one row where that suits the panel."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PySide6.QtCore import QEvent, QPoint, Qt
from PySide6.QtGui import QContextMenuEvent, QHelpEvent
from PySide6.QtWidgets import QApplication, QToolTip

from attnviz.gui.views.thumbnails import ThumbnailGrid
from attnviz.state import viewmodel
from attnviz.state.figures import BOUNDARY_COLOUR
from models import build_model
from models.nn.config import DecoderOnlyConfig
from models.storage.checkpoint import save_checkpoint
from tests.test_gui import WAIT, run_text
from tests.test_gui_ablation import wait_for_run

HEADS, KV_HEADS = 32, 8  # Llama-3.2-1B's 32 query heads reading 8 key/value heads: groups of 4


def many_heads_model(path, char_tokenizer, heads: int = HEADS, kv_heads: int = KV_HEADS):
    torch.manual_seed(0)
    config = DecoderOnlyConfig(arch="decoder-only", vocab_size=char_tokenizer.vocab_size, d_model=2 * heads, layers=2,
                               heads=heads, kv_heads=kv_heads, d_ff=32, max_len=64, pad_id=0, bos_id=2, eos_id=3,
                               prompt_separator=True)
    return save_checkpoint(path, build_model(config), char_tokenizer, char_tokenizer)


@pytest.fixture
def heads_window(qtbot, qsettings, tmp_path, char_tokenizer):
    from attnviz.gui.app import create_window

    window = create_window(str(many_heads_model(tmp_path / "many.safetensors", char_tokenizer)), "cpu", qsettings)
    qtbot.addWidget(window)
    window.resize(1366, 768)
    window.show()
    qtbot.waitUntil(lambda: window.session.model is not None, timeout=WAIT)
    run_text(qtbot, window, "abc", max_len=3)
    grid = window.views.head_grid
    window.views.grids.setCurrentWidget(grid)
    qtbot.waitUntil(lambda: grid.isVisible() and grid.per_row < HEADS, timeout=WAIT)
    yield window
    window.close()


def centre(grid, head: int) -> QPoint:
    return grid.mapFromScene(grid.cells[head][0].sceneBoundingRect().center())


def test_32_heads_wrap_into_rows_of_near_square_thumbnails_inside_the_tab(qtbot, heads_window):
    grid = heads_window.views.head_grid
    boxes = [view.sceneBoundingRect() for view, _ in grid.cells]
    tops = sorted({round(box.top()) for box in boxes})
    assert grid.shape == (1, HEADS) and len(tops) == -(-HEADS // grid.per_row) > 1
    assert grid.per_row % (HEADS // KV_HEADS) == 0  # whole key/value groups to a row
    assert all(box.width() >= 30 and 0.4 <= box.width() / box.height() <= 2.5 for box in boxes)  # near square
    assert all(grid.rect().contains(grid.mapFromScene(box.bottomRight())) for box in boxes)
    # every head's name above its own thumbnail (shown or thinned, counted from each row's first head)
    labels = grid.col_labels
    assert [label.name for label in labels] == [f"H{head}·kv{head // 4}" for head in range(HEADS)]
    assert all(label.item.isVisible() for label in labels[:: grid.per_row])
    for head in (0, grid.per_row, HEADS - 1):
        label = labels[head].sceneBoundingRect()
        assert label.bottom() <= boxes[head].top() + 1 and abs(label.center().x() - boxes[head].center().x()) < 2
    # the wider gap before each key/value group, in the same column on every row
    layout = grid.ci.layout
    assert layout.columnSpacing(4) > layout.columnSpacing(3) and boxes[4].left() - boxes[3].right() > 6
    assert boxes[grid.per_row + 4].left() == boxes[4].left()


def test_a_click_and_hover_on_the_second_row_name_the_head_drawn_there(qtbot, heads_window):
    window, grid = heads_window, heads_window.views.head_grid
    head = grid.per_row + 2  # the third thumbnail of the second row
    qtbot.mouseClick(grid.viewport(), Qt.MouseButton.LeftButton, pos=centre(grid, head))
    qtbot.waitUntil(lambda: window.session.selection.head == head, timeout=WAIT)
    assert grid.selected == (0, head) and grid.cells[head][0].border.color().name() != "#000000"
    assert f"head {head}" in window.views.focus.title.text()
    point = centre(grid, head)
    QApplication.sendEvent(grid.viewport(), QHelpEvent(QEvent.Type.ToolTip, point, grid.mapToGlobal(point)))
    assert f"H{head}·kv{head // 4}: click" in QToolTip.text()


def test_switching_a_second_row_head_off_ablates_exactly_that_head(qtbot, heads_window):
    window, grid = heads_window, heads_window.views.head_grid
    layer, head = window.session.selection.layer, grid.per_row + 5
    point = centre(grid, head)
    QApplication.sendEvent(grid.viewport(), QContextMenuEvent(QContextMenuEvent.Reason.Mouse, point,
                                                              grid.mapToGlobal(point)))
    qtbot.waitUntil(lambda: getattr(grid, "menu", None) is not None and grid.menu.isVisible(), timeout=WAIT)
    (switch,) = [action for action in grid.menu.actions() if action.text() == "Switch head off"]
    switch.trigger()
    grid.menu.close()
    wait_for_run(qtbot, window, ablated=True)
    assert window.session.trace.ablated == (("dec_self", layer, head),)
    qtbot.waitUntil(lambda: grid.crosses[head].isVisible(), timeout=WAIT)
    assert [cross.isVisible() for cross in grid.crosses] == [index == head for index in range(HEADS)]
    # the layer from the last row's menu: every head of the layer, none of the other
    (layer_off,) = [action for action in grid.context_menu(0, HEADS - 1).actions()
                    if action.text() == "Switch layer off"]
    layer_off.trigger()
    qtbot.waitUntil(lambda: window.session.trace is not None and len(window.session.trace.ablated) == HEADS,
                    timeout=WAIT)
    assert window.session.trace.ablated == tuple(("dec_self", layer, index) for index in range(HEADS))


def test_the_rows_follow_the_panel_and_keep_the_selection_and_marks(qtbot, heads_window):
    window, grid = heads_window, heads_window.views.head_grid
    head = grid.per_row + 1
    window.select(head=head)
    before = grid.per_row
    window.views.grids.setMaximumHeight(180)  # the tab made low: longer rows suit it
    qtbot.waitUntil(lambda: grid.per_row > before, timeout=WAIT)
    assert grid.selected == (0, head) and len(grid.cells) == HEADS
    assert all(image.image is not None for _, image in grid.cells)
    assert grid.col_labels[head].name == f"H{head}·kv{head // 4}"
    qtbot.mouseClick(grid.viewport(), Qt.MouseButton.LeftButton, pos=centre(grid, HEADS - 1))
    qtbot.waitUntil(lambda: window.session.selection.head == HEADS - 1, timeout=WAIT)


def test_eight_heads_in_a_wide_low_panel_stay_in_one_row(qtbot):
    grid = ThumbnailGrid()
    qtbot.addWidget(grid)
    grid.resize(1200, 160)
    grid.show()
    qtbot.waitExposed(grid)
    state = viewmodel.GridState(rows=1, cols=8, row_names=["L0"], col_names=[f"H{head}" for head in range(8)],
                                matrices=[np.full((3, 3), 0.5, dtype=np.float32)] * 8, selected=(0, 2), wrap=True)
    grid.show_grid(state)
    assert grid.per_row == 8 and len({round(view.sceneBoundingRect().top()) for view, _ in grid.cells}) == 1


def test_the_exported_heads_figure_of_32_heads_is_rows_of_whole_groups(qtbot, heads_window, tmp_path):
    from xml.etree import ElementTree

    window = heads_window
    layer = window.session.selection.layer
    path = tmp_path / "heads.svg"
    window.exporting.export_grid_image(str(path))
    qtbot.waitUntil(path.exists, timeout=WAIT)
    root = ElementTree.parse(path).getroot()
    places = {text.text: (float(text.get("x")), float(text.get("y")))
              for text in root.iter("{http://www.w3.org/2000/svg}text") if text.get("x") is not None}
    names = [f"L{layer} · H{head}·kv{head // 4}" for head in range(HEADS)]
    assert all(name in places for name in names)  # each head named with its key/value group, as in the tab
    assert len({places[name][1] for name in names}) == 4 and len({places[name][0] for name in names}) == 8
    assert places[names[8]][0] == places[names[0]][0] and places[names[8]][1] > places[names[0]][1]
    assert float(root.get("width")) < 8 * 250 + 400  # eight panels across, not 32


def boundary_paths(svg_text: str) -> list[tuple[float, float, float, float]]:
    """Each orange prompt-end line of a heads figure as (x of the vertical line, the panel's left, the vertical
    line's length, the horizontal one's): ``M{x},{top}v{height}M{left},{y}h{width}``."""
    import re

    pattern = (r"<path d='M([\d.]+),[\d.]+v([\d.]+)M([\d.]+),[\d.]+h([\d.]+)' stroke='"
               + BOUNDARY_COLOUR + "'")
    return [(float(x), float(left), float(down), float(across))
            for x, down, left, across in re.findall(pattern, svg_text)]


def test_render_all_draws_the_heads_as_the_window_exports_them_with_the_prompts_end(qtbot, heads_window, tmp_path,
                                                                                       capsys):
    from attnviz.cli import main

    window = heads_window
    layer = window.session.selection.layer
    exported = tmp_path / "window.svg"
    window.exporting.export_grid_image(str(exported))
    qtbot.waitUntil(exported.exists, timeout=WAIT)
    checkpoint = window.session.model.path
    rendered = tmp_path / f"{checkpoint.stem}.svg"
    assert main(["render", "-c", str(checkpoint), "abc", "--kind", "dec_self", "--layer", str(layer), "--head", "all",
                 "--max-len", "3", "-o", str(rendered)]) == 0, capsys.readouterr().err
    assert rendered.read_text() == exported.read_text()  # key/value groups: 4 rows of 8, each head named with its
    # every head's panel has the prompt's end drawn where the window's heatmap draws it (before the key and row the
    # focus view's orange lines stand before), on both axes
    trace, edge = window.session.trace, window.views.focus.boundary[0].value() + 0.5
    lines = boundary_paths(rendered.read_text())
    cells = trace.attention["dec_self"][layer][0].shape[1]
    assert len(lines) == HEADS and trace.prompt_len is not None
    for x, left, down, across in lines:
        assert down == across and (x - left) / across == pytest.approx(edge / cells, abs=1e-3)
