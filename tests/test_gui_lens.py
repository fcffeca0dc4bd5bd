"""The Lens pane in a real offscreen window on the bundled en-es demo: View → Lens opens it beside the Decoding dock;
it shows the logit lens of the selected hypothesis (equal to models/analysis/lens.py run on the model apart from the
window), follows the selected step and hypothesis, reads a cell out on hover, selects a step on a click, and lists
DecoderLens per encoder layer; a GRU model's pane says in one line why it has no lens."""

from __future__ import annotations

import numpy as np
import pytest
from PySide6.QtCore import QEvent, QPoint, QPointF, Qt
from PySide6.QtGui import QMouseEvent
from PySide6.QtWidgets import QApplication

from attnviz.gui.app import create_window
from attnviz.state.lens_view import rank_colours
from models.analysis.lens import NOT_TRANSFORMER, decoder_lens, logit_lens
from models.inference.decoding import finish
from models.inference.translator import Translator
from models.storage.checkpoint import load_checkpoint
from tests.test_gui import run_text

DEMO = "resources/checkpoints/en-es-transformer.safetensors"
WAIT = 30_000
TEXT = "where is the house of my friend"


@pytest.fixture
def demo_window(qtbot, qsettings):
    window = create_window(DEMO, "cpu", qsettings)
    qtbot.addWidget(window)
    window.resize(1000, 650)
    window.show()
    qtbot.waitUntil(lambda: window.session.model is not None, timeout=WAIT)
    yield window
    window.close()


def open_lens(window):
    view_menu = next(action.menu() for action in window.menuBar().actions() if action.text() == "&View")
    next(action for action in view_menu.actions() if action.text() == "L&ens").trigger()
    return window.lens.pane


def test_the_pane_shows_the_logit_lens_and_decoder_lens_of_the_run(qtbot, demo_window):
    window = demo_window
    run_text(qtbot, window, TEXT, max_len=40)
    pane = open_lens(window)
    assert window.lens.dock in window.tabifiedDockWidgets(window.views.decoding_dock)
    qtbot.waitUntil(lambda: pane.state is not None, timeout=WAIT)
    result = window.session.result
    translator = Translator(load_checkpoint(DEMO), "cpu")
    src_ids = translator.source(TEXT).ids
    lens = logit_lens(translator.model, src_ids, result.token_ids)
    state = pane.state
    layers = lens.layers
    assert state.shape == (layers, len(result.tokens)) and state.col_labels == tuple(result.tokens)
    assert state.row_labels[0] == f"layer {layers - 1} (output)" and state.row_labels[-1] == "embeddings"
    assert np.array_equal(state.rgb, rank_colours(lens.ranks[::-1], translator.model.config.tgt_vocab_size))
    assert f"p = {lens.probs[0, 1]:.3f}, rank {lens.ranks[0, 1] + 1}" in state.tips[-1][1]
    readings = decoder_lens(translator.model, src_ids, result.token_ids)
    assert [row.nll for row in state.encoder] == pytest.approx([reading.nll for reading in readings], abs=1e-6)
    assert state.encoder[-1].output == result.text and pane.table.rowCount() == len(readings)
    assert pane.table.item(len(readings) - 1, 2).text() == result.text

    window.viewing.select(step=3)
    assert pane.state.selected == 3
    cell_w, cell_h = pane.map._cell()
    point = QPoint(pane.map._left() + 5 * cell_w + cell_w // 2, pane.map._top() + cell_h // 2)
    move = QMouseEvent(QEvent.Type.MouseMove, QPointF(point), QPointF(pane.map.mapToGlobal(point)),
                       Qt.MouseButton.NoButton, Qt.MouseButton.NoButton, Qt.KeyboardModifier.NoModifier)
    QApplication.sendEvent(pane.map, move)  # the pointer moved onto the cell (offscreen, no real pointer)
    assert window.statusBar().currentMessage().startswith("step 6 ")
    assert f"p = {lens.probs[-1, 5]:.3f}" in window.statusBar().currentMessage()
    qtbot.mouseClick(pane.map, Qt.MouseButton.LeftButton, pos=point)
    assert window.session.selection.step == 5 and pane.state.selected == 5


def test_the_pane_follows_the_selected_beam_hypothesis(qtbot, demo_window):
    window = demo_window
    run_text(qtbot, window, TEXT, mode="beam", beam=3, max_len=40)
    pane = open_lens(window)
    qtbot.waitUntil(lambda: pane.state is not None, timeout=WAIT)
    results = window.session.results
    assert pane.state.col_labels == tuple(results[0].tokens)
    window.views.decoding.beam.hypotheses.setCurrentRow(2)
    qtbot.waitUntil(lambda: pane.state is not None and pane.state.col_labels == tuple(results[2].tokens),
                    timeout=WAIT)
    translator = Translator(load_checkpoint(DEMO), "cpu")
    source = translator.source(TEXT)
    third = finish(translator.decode(source, mode="beam", beam=3, need_weights=False))[2]
    assert third.token_ids == results[2].token_ids
    lens = logit_lens(translator.model, source.ids, third.token_ids)
    assert np.array_equal(pane.state.rgb, rank_colours(lens.ranks[::-1], translator.model.config.tgt_vocab_size))


def test_a_gru_models_pane_says_why_it_has_no_lens(qtbot, qsettings):
    window = create_window("resources/checkpoints/piglatin-gru-additive.safetensors", "cpu", qsettings)
    qtbot.addWidget(window)
    window.show()
    qtbot.waitUntil(lambda: window.session.model is not None, timeout=WAIT)
    run_text(qtbot, window, "hello")
    pane = open_lens(window)
    qtbot.waitUntil(lambda: NOT_TRANSFORMER in pane.message.text(), timeout=WAIT)
    assert pane.state is None
    window.close()
