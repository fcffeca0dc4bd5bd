"""The Neuron pane in a real offscreen window on the bundled en-es demo: a head selected and a query row clicked in the
focus heatmap, the pane shows that head's query vector, key vectors, dot products and softmax, equal to what the
model's own projections compute (read with hooks on its query and key layers, apart from the pane's code)."""

from __future__ import annotations

from xml.etree import ElementTree

import numpy as np
import pytest
import torch
from PySide6.QtCore import QPointF, Qt
from PySide6.QtGui import QImage

from attnviz.gui.app import create_window
from models.inference.translator import Translator
from models.storage.checkpoint import load_checkpoint

DEMO = "resources/checkpoints/en-es-transformer.safetensors"
WAIT = 30_000
TEXT = "the cat sat on the mat"


@pytest.fixture
def demo_window(qtbot, qsettings):
    window = create_window(DEMO, "cpu", qsettings)
    qtbot.addWidget(window)
    window.resize(1000, 650)
    window.show()
    qtbot.waitUntil(lambda: window.session.model is not None, timeout=WAIT)
    yield window
    window.close()


def run(qtbot, window, text: str) -> None:
    bar = window.views.input_bar
    bar.debounce.stop()
    bar.text.setText(text)
    window.run()
    request = window.session.request
    qtbot.waitUntil(lambda: bool(window.session.results) and window.session.request is request, timeout=WAIT)


def click_row(qtbot, window, row: int) -> None:
    """A real mouse click on the focus heatmap's cell (row, 0)."""
    focus = window.views.focus
    scene = focus.plot.getViewBox().mapViewToScene(QPointF(0.0, float(row)))
    point = focus.graphics.mapFromScene(scene)
    qtbot.mouseClick(focus.graphics.viewport(), Qt.MouseButton.LeftButton, pos=point)


def projections(model, text_ids: list[int], layer: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The encoder layer's query and key projections ``[S, H·D]`` of ``text_ids``, as the model computes them."""
    attention = model.encoder_layers[layer].self_attention.attention
    seen = {}
    handles = [attention.query.register_forward_hook(lambda _m, _i, out: seen.setdefault("q", out)),
               attention.key.register_forward_hook(lambda _m, _i, out: seen.setdefault("k", out))]
    try:
        with torch.no_grad():
            model.encode(torch.tensor([text_ids]), need_weights=False)
    finally:
        for handle in handles:
            handle.remove()
    return seen["q"][0], seen["k"][0]


def test_the_pane_shows_the_selected_head_and_clicked_query_as_the_model_computes_them(qtbot, demo_window):
    window = demo_window
    run(qtbot, window, TEXT)
    window.viewing.select(kind="enc_self", layer=1, head=2)
    view_menu = next(action.menu() for action in window.menuBar().actions() if action.text() == "&View")
    next(action for action in view_menu.actions() if action.text() == "&Neuron").trigger()
    pane = window.neuron.pane
    qtbot.waitUntil(lambda: pane.state is not None, timeout=WAIT)
    assert window.neuron.dock in window.tabifiedDockWidgets(window.views.decoding_dock)
    assert pane.state.query_row == 0 and "layer 1 · head 2" in pane.state.title
    click_row(qtbot, window, 3)
    qtbot.waitUntil(lambda: pane.state.query_row == 3, timeout=WAIT)
    state = pane.state
    trace = window.session.trace
    assert state.query_label == trace.src_tokens[3] and state.key_labels == trace.src_tokens
    assert pane.query_box.currentIndex() == 3

    translator = Translator(load_checkpoint(DEMO), "cpu")
    model = translator.model.eval()
    src_ids = translator.source(TEXT).ids
    assert len(src_ids) == len(trace.src_tokens)
    q_all, k_all = projections(model, src_ids, layer=1)
    d = model.config.d_model // model.config.heads
    q = q_all[3, 2 * d:3 * d].numpy()
    k = k_all[:, 2 * d:3 * d].numpy()
    assert state.head_dim == d == 64
    np.testing.assert_allclose(state.query, q, atol=1e-5)
    np.testing.assert_allclose(state.keys, k, atol=1e-5)
    np.testing.assert_allclose(state.products, k * q[None], atol=1e-5)
    columns = {column.name: column.values for column in state.columns}
    assert list(columns) == ["q·k", "× scale", "softmax"]
    np.testing.assert_allclose(columns["q·k"], k @ q, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(columns["× scale"], (k @ q) / np.sqrt(d), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(columns["softmax"], trace.attention["enc_self"][1][2, 3], atol=1e-6)
    exp = np.exp(columns["× scale"] - columns["× scale"].max())
    np.testing.assert_allclose(exp / exp.sum(), trace.attention["enc_self"][1][2, 3], atol=1e-5)
    assert not state.rotated and "1/√64" in pane.notes.text()
    line = pane.canvas.describe(pane.canvas._blocks()["k"].left() + 0.2, pane.canvas._blocks()["k"].top() + 1)
    assert line.startswith("k[0] of key 0") and f"{k[0, 0]:.4g}" in line


def test_the_pane_follows_the_head_and_says_why_for_an_aggregate(qtbot, demo_window):
    window = demo_window
    run(qtbot, window, TEXT)
    window.neuron.open()
    pane = window.neuron.pane
    window.viewing.select(kind="cross", layer=0, head=1, step=2)
    qtbot.waitUntil(lambda: pane.state is not None and "head 1" in pane.state.title, timeout=WAIT)
    trace = window.session.trace
    assert pane.state.query_row == 2
    np.testing.assert_allclose(pane.state.weights, trace.attention["cross"][0][1, 2], atol=1e-6)
    window.viewing.select(head=3)
    assert "head 3" in pane.state.title
    np.testing.assert_allclose(pane.state.weights, trace.attention["cross"][0][3, 2], atol=1e-6)
    window.viewing.select(head="mean")
    assert pane.state is None and "choose a head number" in pane.title.text()


def test_the_neuron_figure_exports_as_svg_and_png(qtbot, demo_window, tmp_path):
    window = demo_window
    run(qtbot, window, TEXT)
    window.viewing.select(kind="dec_self", layer=2, head=0, step=4)
    window.neuron.open()
    pane = window.neuron.pane
    qtbot.waitUntil(lambda: pane.state is not None, timeout=WAIT)
    svg, png = tmp_path / "neuron.svg", tmp_path / "neuron.png"
    window.exporting.export_neuron_image(str(svg))
    window.exporting.export_neuron_image(str(png))
    root = ElementTree.parse(svg).getroot()
    texts = [element.text or "" for element in root.iter("{http://www.w3.org/2000/svg}text")]
    assert any("layer 2 · head 0 · query 4" in text for text in texts)
    assert len(list(root.iter("{http://www.w3.org/2000/svg}image"))) == 3  # q, k, q ⊙ k
    softmax = [float(text) for text in texts[texts.index("softmax") + 1:] if text.replace(".", "").isdigit()]
    np.testing.assert_allclose(softmax[:5], pane.state.weights[:5], atol=5e-4)
    assert texts.count("masked") == len(pane.state.key_labels) - 5  # the keys after the query: the causal mask
    assert QImage(str(png)).width() > 300
