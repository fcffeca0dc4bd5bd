"""The desktop app, driven like a user would with a real offscreen QApplication and real checkpoints.

Each test checks what the views hold (image data, overlays, charts, files written), not only that
nothing raised. Qt warnings fail a test (pyproject: qt_log_level_fail) and so does a worker thread
left running (conftest).
"""

from __future__ import annotations

import csv
import threading
from xml.etree import ElementTree

import numpy as np
import pytest
import torch
from PySide6.QtCore import QMimeData, QPoint, QPointF, Qt, QTimer, QUrl
from PySide6.QtGui import QDragEnterEvent, QDropEvent, QImage

from attnviz.gui.app import create_window
from models import build_model
from models.trace.aggregate import aggregate
from models.storage.checkpoint import save_checkpoint
from tests.helpers import settled, tiny_config

WAIT = 20_000  # ms; decoding a tiny model takes milliseconds, CI machines can be slow


@pytest.fixture(scope="module")
def gru_checkpoint(tmp_path_factory, char_tokenizer):
    torch.manual_seed(1)
    model = build_model(tiny_config("gru-additive"))
    path = tmp_path_factory.mktemp("gru") / "gru.safetensors"
    return save_checkpoint(path, model, char_tokenizer, char_tokenizer)


def run_text(qtbot, window, text: str, **options) -> None:
    bar = window.views.input_bar
    if "mode" in options:
        bar.mode.setCurrentIndex(bar.mode.findData(options["mode"]))
    if "beam" in options:
        bar.beam.setValue(options["beam"])
    if "target" in options:
        bar.target.setText(options["target"])
    bar.max_len.setValue(options.get("max_len", 6))
    bar.debounce.stop()
    bar.text.setText(text)
    window.run()
    request = window.session.request
    qtbot.waitUntil(lambda: bool(window.session.results) and window.session.request is request, timeout=WAIT)


def focus_data(window) -> np.ndarray:
    return window.views.focus.image.image


def test_opening_shows_the_model_and_remembers_it(window, random_checkpoint):
    info = window.views.model_panel.info.text()
    assert "transformer-preln" in info and "random.safetensors" in info and "cpu" in info
    assert window.opening.recent_files()[0] == str(random_checkpoint)
    assert window.windowTitle() == "random.safetensors — attnviz"


def test_run_shows_the_trace_in_every_view(qtbot, window):
    run_text(qtbot, window, "abc", max_len=5)
    trace = window.session.trace
    assert trace.src_tokens == ["a", "b", "c", "</s>"]
    kind, layer, head = "cross", 0, 0
    assert window.session.selection.kind == kind
    np.testing.assert_array_equal(focus_data(window), trace.attention[kind][layer][head])
    for index, (_, image) in enumerate(window.views.head_grid.cells):
        np.testing.assert_array_equal(image.image, trace.attention[kind][layer][index])
    assert window.views.model_view.shape == (2, 4) and len(window.views.model_view.matrices) == 2 * 4
    np.testing.assert_array_equal(window.views.model_view.image(1, 3), trace.attention[kind][1][3])
    assert window.session.result.text in window.views.input_bar.result_text()


def test_switching_kind_layer_head_and_aggregate(qtbot, window):
    run_text(qtbot, window, "hag", max_len=4)
    trace = window.session.trace
    grid_items = [image for _, image in window.views.head_grid.cells]
    model_colours = window.views.model_view.images
    focus_item = window.views.focus.image
    window.select(layer=1, head=2)
    np.testing.assert_array_equal(focus_data(window), trace.attention["cross"][1][2])
    np.testing.assert_array_equal(window.views.head_grid.image(0, 3), trace.attention["cross"][1][3])
    assert window.views.head_grid.selected == (0, 2) and window.views.model_view.selected == (1, 2)
    # a layer or head switch reuses every plot item: nothing is rebuilt
    assert [image for _, image in window.views.head_grid.cells] == grid_items
    assert window.views.model_view.images is model_colours
    assert window.views.focus.image is focus_item
    window.select(kind="enc_self", head="mean")
    np.testing.assert_allclose(focus_data(window), trace.attention["enc_self"][1].mean(axis=0), atol=1e-7)
    assert window.views.focus.query_tokens == trace.src_tokens
    window.views.selector.head.setCurrentIndex(window.views.selector.head.findData("rollout"))
    np.testing.assert_allclose(focus_data(window), aggregate(trace, "enc_self", 1, "rollout"), atol=1e-7)
    window.select(kind="dec_self", head="max", layer=0)
    np.testing.assert_array_equal(focus_data(window), trace.attention["dec_self"][0].max(axis=0))
    assert window.views.focus.key_tokens == trace.tgt_tokens


def test_keyboard_shortcuts_step_layers_and_heads(qtbot, window):
    run_text(qtbot, window, "abc", max_len=4)
    window.select(layer=0, head=0)
    qtbot.keyClick(window, Qt.Key.Key_Down, Qt.KeyboardModifier.ControlModifier)
    qtbot.keyClick(window, Qt.Key.Key_Right, Qt.KeyboardModifier.ControlModifier)
    assert (window.session.selection.layer, window.session.selection.head) == (1, 1)
    qtbot.keyClick(window, Qt.Key.Key_Left, Qt.KeyboardModifier.ControlModifier)
    qtbot.keyClick(window, Qt.Key.Key_Left, Qt.KeyboardModifier.ControlModifier)
    assert window.session.selection.head == 3  # wraps around


def test_clicking_a_thumbnail_focuses_it(qtbot, window):
    run_text(qtbot, window, "abc", max_len=4)
    window.views.grids.setCurrentIndex(1)
    qtbot.waitExposed(window.views.model_view)
    centre = window.views.model_view.cell_rect(1, 2).center().toPoint()
    qtbot.mouseClick(window.views.model_view.viewport(), Qt.MouseButton.LeftButton, pos=centre)
    assert (window.session.selection.layer, window.session.selection.head) == (1, 2)
    np.testing.assert_array_equal(focus_data(window), window.session.trace.attention["cross"][1][2])


def test_masks_are_hatched_and_can_be_hidden(qtbot, window):
    run_text(qtbot, window, "abcd", mode="forced", target="dcba")  # 5 decoder positions, whatever the model says
    window.select(kind="dec_self", layer=0, head=0)
    mask = window.session.trace.masks["dec_self"]
    assert not mask.all()
    overlay = window.views.focus.overlay.image
    factor = overlay.shape[0] // mask.shape[0]
    alpha = overlay[::factor, ::factor, 3][: mask.shape[0], : mask.shape[1]]
    cells_with_hatching = np.array([[overlay[r * factor:(r + 1) * factor, c * factor:(c + 1) * factor, 3].max() > 0
                                     for c in range(mask.shape[1])] for r in range(mask.shape[0])])
    np.testing.assert_array_equal(cells_with_hatching, ~mask)
    assert alpha.shape == mask.shape
    assert window.views.focus.overlay.isVisible()
    window.views.selector.masks.setChecked(False)
    assert not window.views.focus.overlay.isVisible()
    window.select(kind="enc_self")
    assert window.views.focus.overlay.image is None  # nothing masked in a single unpadded sentence
    assert window.views.focus.badge.isHidden()


def test_attention_on_masked_cells_raises_a_badge(window):
    matrix = np.full((3, 3), 1 / 3, dtype=np.float32)  # uniform rows ignore the causal mask
    window.views.focus.show_matrix(matrix, np.tril(np.ones((3, 3), dtype=bool)), list("abc"), list("abc"))
    assert not window.views.focus.badge.isHidden() and "masked" in window.views.focus.badge.text()
    window.views.focus.show_matrix(np.tril(matrix), np.tril(np.ones((3, 3), dtype=bool)), list("abc"), list("abc"))
    assert window.views.focus.badge.isHidden()


def test_hover_reads_out_a_cell(qtbot, window):
    run_text(qtbot, window, "abc", max_len=4)
    view = window.views.focus.plot.getViewBox()
    scene_point = view.mapViewToScene(QPointF(1, 0))  # key 1, query 0
    window.views.focus._on_mouse_moved(scene_point)
    value = window.session.trace.attention["cross"][0][0][0, 1]
    assert window.views.focus.readout.text() == f"query 0 ‘<s>’ → key 1 ‘b’: {value:.4f}"
    assert window.views.focus.vline.isVisible() and window.views.focus.vline.value() == 1


def test_stepping_through_the_decoding(qtbot, window):
    run_text(qtbot, window, "abcd", mode="forced", target="dcba")  # a known number of steps
    steps = window.session.result.steps
    window.views.decoding.controls.slider.setValue(1)
    assert window.session.selection.step == 1
    box = window.views.focus.step_box.rect()
    assert (box.top(), box.height()) == (0.5, 1.0)
    np.testing.assert_allclose(window.views.decoding.top_k.state.values, steps[1].top_probs[0])
    drawn = window.views.decoding.top_k.values  # as many as the chart labels: the likeliest
    np.testing.assert_allclose(drawn, steps[1].top_probs[0][:len(drawn)])
    cross_row = window.session.trace.attention["cross"][0][0][1]
    np.testing.assert_allclose(window.views.decoding.source_strip.values, cross_row)
    assert "decoder input: &lt;s&gt; " in window.views.decoding.prefix.text()
    window.views.decoding.controls.next.click()
    assert window.session.selection.step == 2
    qtbot.keyClick(window, Qt.Key.Key_Left, Qt.KeyboardModifier.AltModifier)
    assert window.session.selection.step == 1


def test_play_walks_to_the_last_step(qtbot, window):
    run_text(qtbot, window, "abc", max_len=4)
    controls = window.views.decoding.controls
    controls.timer.setInterval(10)
    controls.slider.setValue(0)
    controls.play.click()
    last = len(window.session.trace.tgt_tokens) - 1
    qtbot.waitUntil(lambda: window.session.selection.step == last and not controls.timer.isActive(), timeout=WAIT)


def test_beam_hypotheses_each_show_their_own_attention(qtbot, window):
    run_text(qtbot, window, "abc", mode="beam", beam=3, max_len=5)
    results = window.session.results
    assert window.views.decoding.beam.hypotheses.count() == len(results) == 3
    graph = window.views.decoding.beam.graph
    assert len(graph.labels) == len(graph.state.nodes) >= 3 and graph.chosen == set(graph.state.paths[0])
    pick = max(range(1, 3), key=lambda index: len(results[index].steps))  # a lower-ranked one with steps to walk
    window.views.decoding.beam.hypotheses.setCurrentRow(pick)
    assert window.session.result is results[pick]
    assert graph.chosen == set(graph.state.paths[pick])
    assert [graph.labels[node].text() for node in graph.state.paths[pick]] == results[pick].tokens
    np.testing.assert_array_equal(focus_data(window), results[pick].trace.attention["cross"][0][0])
    last = len(results[pick].steps) - 1
    window.views.decoding.controls.slider.setValue(last)
    step = results[pick].steps[last]
    np.testing.assert_allclose(window.views.decoding.top_k.state.values, step.top_probs[results[pick].rows[last]])


def test_forced_decoding_to_a_target(qtbot, window):
    run_text(qtbot, window, "abc", mode="forced", target="cba")
    assert window.session.trace.tgt_tokens == ["<s>", "c", "b", "a"]
    assert window.session.result.tokens == ["c", "b", "a", "</s>"]


def test_export_png_svg_npz_csv(qtbot, window, tmp_path):
    run_text(qtbot, window, "abcd", max_len=5)
    png = tmp_path / "focus.png"
    window.exporting.export_focus_image(str(png))
    image = QImage(str(png))
    pixels = np.array([image.pixel(x, y) for x in range(0, image.width(), 7) for y in range(0, image.height(), 7)])
    assert len(np.unique(pixels)) > 20  # a real picture, not a blank rectangle
    svg = tmp_path / "focus.svg"
    window.exporting.export_focus_image(str(svg))
    root = ElementTree.parse(svg).getroot()
    assert (image.width(), image.height()) == (2 * int(root.get("width")), 2 * int(root.get("height")))  # one figure
    cells = [rect for rect in root.iter("{http://www.w3.org/2000/svg}rect") if rect.find("{*}title") is not None]
    matrix = window.views.focus.matrix
    assert len(cells) == matrix.size  # one vector rectangle per cell, its weight as its tooltip
    np.testing.assert_allclose([float(cell.find("{*}title").text) for cell in cells], matrix.ravel(), atol=1e-4)
    texts = [text.text for text in root.iter("{http://www.w3.org/2000/svg}text")]
    assert "Cross-attention · layer 0 · head 0" in texts and "source (keys)" in texts
    assert set(window.session.trace.src_tokens) <= set(texts)
    grid = tmp_path / "heads.png"
    window.exporting.export_grid_image(str(grid))
    heads = QImage(str(grid))
    assert heads.width() > 400
    assert len({heads.pixel(x, y) for x in range(0, heads.width(), 3) for y in range(0, heads.height(), 3)}) > 10
    grid_svg = tmp_path / "heads.svg"
    window.exporting.export_grid_image(str(grid_svg))
    texts = [text.text for text in ElementTree.parse(grid_svg).getroot().iter("{http://www.w3.org/2000/svg}text")]
    assert {"L0 · H0", "L0 · H3"} <= set(texts) and "Cross-attention · layer 0 · every head" in texts
    npz = tmp_path / "trace.npz"
    window.exporting.export_npz(str(npz))
    arrays = np.load(npz)
    trace = window.session.trace
    for kind in trace.kinds:
        for layer, weights in enumerate(trace.attention[kind]):
            np.testing.assert_array_equal(arrays[f"{kind}_L{layer}"], weights)
        np.testing.assert_array_equal(arrays[f"{kind}_mask"], trace.masks[kind])
    csv_path = tmp_path / "cross.csv"
    window.exporting.export_csv(str(csv_path))
    rows = list(csv.reader(csv_path.open(encoding="utf-8")))
    assert rows[0][1:] == trace.src_tokens and [row[0] for row in rows[1:]] == trace.tgt_tokens
    np.testing.assert_allclose(np.array(rows[1:])[:, 1:].astype(float), trace.attention["cross"][0][0], atol=1e-5)


def test_a_run_too_large_for_full_precision_is_kept_at_half_and_says_so(qtbot, window, tmp_path, monkeypatch):
    """Long runs keep float16 (the window says so; the readout gives three digits with ≈); the NPZ export
    stays float32, as its layout says. A budget of 0 bytes makes a short run one of them."""
    import attnviz.gui.work

    run_text(qtbot, window, "abcd", mode="forced", target="bad")
    full = window.session.trace
    assert not full.half_precision and "half precision" not in window.views.input_bar.result_text()
    monkeypatch.setattr(attnviz.gui.work, "HALF_PRECISION_ABOVE", 0)
    run_text(qtbot, window, "abcd", mode="forced", target="bad")
    half = window.session.trace
    assert half.half_precision and "kept at half precision" in window.views.input_bar.result_text()
    for kind in full.kinds:
        for h, f in zip(half.attention[kind], full.attention[kind], strict=True):
            assert h.dtype == np.float16
            np.testing.assert_allclose(h, f, atol=1e-3, rtol=0)
    window.views.focus._on_mouse_moved(window.views.focus.plot.getViewBox().mapViewToScene(QPointF(1, 0)))
    value = float(half.attention["cross"][0][0][0, 1])
    assert window.views.focus.readout.text() == f"query 0 ‘<s>’ → key 1 ‘b’: ≈{value:.3g}"
    npz = tmp_path / "half.npz"
    window.exporting.export_npz(str(npz))
    arrays = np.load(npz)
    assert arrays["cross_L0"].dtype == np.float32
    np.testing.assert_array_equal(arrays["cross_L0"], half.attention["cross"][0])


def test_decoding_steps_reach_the_window_in_batches(qtbot, window):
    """A step is a signal across threads and a repaint; a long forced run's steps arrive at once, so they come
    as a few batches (at most one per STEP_BATCH_SECONDS), not one signal each. None is lost."""
    batches = []
    window.worker_thread.worker.steps.connect(lambda _, steps: batches.append(len(steps)))
    run_text(qtbot, window, "abcd", mode="forced", target="abcdefgh " * 6)
    steps = len(window.session.result.steps)
    assert steps == 55 and sum(batches) == steps and len(window.session.steps) == steps
    assert len(batches) <= 5, batches


def test_a_long_output_scrolls_and_leaves_the_heatmap_its_room(qtbot, qsettings, tmp_path, char_tokenizer, monkeypatch):
    """A 400-character output at 1000×768 takes at most three lines (then scrolls, every word still there);
    the notices stay in view under it and the focus heatmap keeps its 150 px. At 1000×650 the window stays on the
    screen: the output line gives way (a line at least, scrolling), not the heatmap."""
    import attnviz.gui.work

    torch.manual_seed(3)
    path = save_checkpoint(tmp_path / "long.safetensors", build_model(tiny_config("transformer-preln", max_len=512)),
                           char_tokenizer, char_tokenizer)
    window = create_window(str(path), "cpu", qsettings)
    qtbot.addWidget(window)
    window.resize(1000, 768)
    window.show()
    qtbot.waitUntil(lambda: window.session.model is not None, timeout=WAIT)
    monkeypatch.setattr(attnviz.gui.work, "HALF_PRECISION_ABOVE", 0)  # a notice to keep in view
    target = "abc defgh " * 40
    run_text(qtbot, window, "abc", mode="forced", target=target, max_len=100)
    bar = window.views.input_bar
    settled(qtbot, lambda: (bar.output_area.geometry(), bar.notices.geometry(), window.views.focus.graphics.geometry()),
            timeout=WAIT)  # the output line grown to its lines, the notices under it
    lines = bar.output_area.height() / bar.output.fontMetrics().lineSpacing()
    assert 1.5 < lines <= 3.5 and bar.output_area.verticalScrollBar().maximum() > 0
    assert target.strip() in bar.output.text().replace("&nbsp;", " ")
    assert bar.notices.isVisible() and "half precision" in bar.notices.text()
    assert window.views.focus.graphics.height() >= 150
    window.resize(1000, 650)
    qtbot.waitUntil(lambda: window.height() == 650, timeout=WAIT)
    settled(qtbot, lambda: (bar.output_area.geometry(), window.views.focus.graphics.geometry()), timeout=WAIT)
    assert bar.output_area.height() >= bar.output.fontMetrics().lineSpacing() and bar.notices.isVisible()
    assert window.views.focus.graphics.height() >= 150
    run_text(qtbot, window, "abc", mode="forced", target="abcdefgh" * 50)  # one word, as a character model writes
    settled(qtbot, lambda: (bar.output_area.geometry(), bar.output.document().size()), timeout=WAIT)
    assert bar.output.document().idealWidth() <= bar.output.viewport().width()  # wrapped inside the word
    assert bar.output_area.verticalScrollBar().maximum() > 0
    window.close()


def test_export_to_a_bad_path_says_so(qtbot, window, tmp_path):
    run_text(qtbot, window, "abc", max_len=4)
    window.exporting.export_focus_image(str(tmp_path / "focus.gif"))
    result = window.views.input_bar.result_text()
    assert "Export failed" in result and ".png or .svg" in result


def test_drop_a_checkpoint_on_the_window(qtbot, window, gru_checkpoint):
    mime = QMimeData()
    mime.setUrls([QUrl.fromLocalFile(str(gru_checkpoint))])
    enter = QDragEnterEvent(QPoint(5, 5), Qt.DropAction.CopyAction, mime, Qt.MouseButton.NoButton,
                            Qt.KeyboardModifier.NoModifier)
    window.dragEnterEvent(enter)
    assert enter.isAccepted()
    drop = QDropEvent(QPointF(5, 5), Qt.DropAction.CopyAction, mime, Qt.MouseButton.NoButton,
                      Qt.KeyboardModifier.NoModifier)
    window.dropEvent(drop)
    qtbot.waitUntil(lambda: window.session.model.arch == "gru-additive", timeout=WAIT)
    run_text(qtbot, window, "abc", max_len=4)
    trace = window.session.trace
    assert trace.kinds == ["cross"] and trace.heads("cross") == 1
    np.testing.assert_array_equal(focus_data(window), trace.attention["cross"][0][0])


def test_unreadable_file_gets_a_message_and_keeps_the_model(qtbot, window, tmp_path, random_checkpoint):
    bad = tmp_path / "broken.safetensors"
    bad.write_bytes(b"\x00" * 40)
    window.open_path(str(bad))
    qtbot.waitUntil(lambda: "Cannot open it" in window.views.input_bar.result_text(), timeout=WAIT)
    assert str(bad) in window.views.input_bar.result_text()
    assert window.session.model.path == random_checkpoint
    run_text(qtbot, window, "abc", max_len=3)  # still usable


def test_empty_long_and_unknown_input(qtbot, window):
    window.views.input_bar.text.setText("   ")
    window.run()
    assert "Type a sentence" in window.views.input_bar.result_text() and window.session.request is None
    run_text(qtbot, window, "ab" * 50, max_len=3)
    qtbot.waitUntil(lambda: "only the first 64" in window.views.input_bar.result_text(), timeout=WAIT)
    assert len(window.session.trace.src_tokens) == 64
    run_text(qtbot, window, "abc xyz", max_len=3)
    qtbot.waitUntil(lambda: "no token for &#x27;x&#x27;" in window.views.input_bar.result_text(), timeout=WAIT)
    assert window.session.trace.src_tokens[4:7] == ["⟨x⟩", "⟨y⟩", "⟨z⟩"]  # the unknown token, marked with its text


def test_a_newer_request_wins(qtbot, window):
    """Both guards hold: the worker skips (or stops) requests that are no longer the newest, and the
    session drops whatever a stale request still delivers."""
    run_text(qtbot, window, "aaa", max_len=6)
    stale_results = window.session.results
    worker = window.worker_thread.worker
    finished_ids = []
    worker.finished.connect(lambda request_id, _: finished_ids.append(request_id))
    bar = window.views.input_bar
    release = threading.Event()
    QTimer.singleShot(0, worker, lambda: release.wait(10))  # the worker is busy while three requests queue up
    for text in ("aab", "bbb", "ccc"):
        bar.text.setText(text)
        window.run()
    release.set()
    last = window.session.request
    qtbot.waitUntil(lambda: bool(window.session.results) and window.session.request is last, timeout=WAIT)
    assert finished_ids == [last.id]  # the worker never finished a request that was already stale
    assert window.session.trace.src_tokens[:3] == ["c", "c", "c"]
    worker.finished.emit(last.id - 1, stale_results)  # what a slow worker would still deliver
    worker.notice.emit(last.id - 1, "a notice of an older run")
    assert window.session.trace.src_tokens[:3] == ["c", "c", "c"]
    assert "older run" not in window.views.input_bar.result_text()


def test_gpu_out_of_memory_falls_back_to_the_cpu(qtbot, window):
    worker = window.worker_thread.worker
    translator = worker.translator
    original = translator.decode
    calls = []

    def decode_once_out_of_memory(*args, **kwargs):
        calls.append(1)
        if len(calls) == 1:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return original(*args, **kwargs)

    translator.decode = decode_once_out_of_memory
    translator.device = torch.device("cuda")  # what the worker sees on a GPU machine
    run_text(qtbot, window, "abc", max_len=3)
    assert "ran out of memory" in window.views.input_bar.result_text()
    assert worker.translator.device.type == "cpu" and len(calls) == 2


def test_settings_are_restored(qtbot, qsettings, random_checkpoint):
    first = create_window(str(random_checkpoint), "cpu", qsettings)
    qtbot.addWidget(first)
    qtbot.waitUntil(lambda: first.session.model is not None, timeout=WAIT)
    first.views.input_bar.mode.setCurrentIndex(first.views.input_bar.mode.findData("beam"))
    first.views.input_bar.beam.setValue(7)
    first.views.input_bar.max_len.setValue(9)
    first.views.selector.colormap.setCurrentText("cividis")
    first.views.selector.masks.setChecked(False)
    first.views.input_bar.text.setText("abc")
    first.close()
    second = create_window(str(random_checkpoint), "cpu", qsettings)  # the same model: its input comes back
    qtbot.addWidget(second)
    assert second.views.selector.colormap.currentText() == "cividis" and not second.views.selector.masks.isChecked()
    qtbot.waitUntil(lambda: second.session.model is not None, timeout=WAIT)
    assert second.views.input_bar.mode.currentData() == "beam" and second.views.input_bar.beam.value() == 7
    assert second.views.input_bar.text.text() == "abc"
    assert second.views.input_bar.max_len.value() == 64  # a length limit is not carried across runs: the model's own
    assert second.opening.recent_files() == [str(random_checkpoint)]
    second.close()


def test_long_inputs_label_what_fits_and_zooming_reveals_every_token(window):
    tokens = [f"t{index}" for index in range(400)]
    matrix = np.random.default_rng(0).random((400, 400)).astype(np.float32)
    window.views.focus.show_matrix(matrix, None, tokens, tokens)
    bottom = window.views.focus.plot.getAxis("bottom")
    shown = bottom._tickLevels[0]
    assert 5 < len(shown) < 100  # a readable subset, not 400 overlapping labels
    window.views.focus.plot.getViewBox().setRange(xRange=(100, 110), yRange=(0, 10), padding=0)
    labels = [label for _, label in window.views.focus.plot.getAxis("bottom")._tickLevels[0]]
    assert labels == [f"t{index}" for index in range(100, 111)]


def test_plots_follow_a_dark_palette(qtbot, qsettings, random_checkpoint, qapp):
    from PySide6.QtGui import QColor, QPalette

    original = qapp.palette()
    dark = QPalette(original)
    dark.setColor(QPalette.ColorRole.Base, QColor(20, 20, 24))
    dark.setColor(QPalette.ColorRole.Text, QColor(230, 230, 230))
    qapp.setPalette(dark)
    try:
        window = create_window(str(random_checkpoint), "cpu", qsettings)
        qtbot.addWidget(window)
        assert window.views.focus.graphics.backgroundBrush().color() == QColor(20, 20, 24)
        assert window.views.head_grid.backgroundBrush().color() == QColor(20, 20, 24)
        window.close()
    finally:
        qapp.setPalette(original)
        from attnviz.gui.views.style import follow_palette

        follow_palette()


def test_a_model_without_attention_clears_the_heatmaps(qtbot, window, char_tokenizer, tmp_path):
    run_text(qtbot, window, "abc", max_len=3)
    assert window.views.focus.image.image is not None
    torch.manual_seed(3)
    model = build_model(tiny_config("gru-none"))
    path = save_checkpoint(tmp_path / "none.safetensors", model, char_tokenizer, char_tokenizer)
    window.open_path(str(path))
    qtbot.waitUntil(lambda: window.session.model.arch == "gru-none", timeout=WAIT)
    views = window.views
    assert views.focus.image.image is None and not views.head_grid.cells  # the old model's attention is gone
    run_text(qtbot, window, "abc", max_len=3)
    assert "no attention" in window.views.focus.title.text() and window.views.focus.image.image is None
    assert window.views.decoding.top_k.values.size > 0  # its decoding steps are still shown


def test_opening_a_model_says_how_much_of_its_weights_is_read(qtbot, window, gru_checkpoint):
    messages = []
    window.statusBar().messageChanged.connect(messages.append)
    window.open_path(str(gru_checkpoint))
    qtbot.waitUntil(lambda: window.session.model.arch == "gru-additive", timeout=WAIT)
    progress = [message for message in messages if "weights" in message]
    assert progress and progress[-1].startswith("Opening gru.safetensors: weights 100% (")
    done, total = progress[-1].rsplit("(", 1)[1].rstrip(")").split(" of ")
    assert done == total and int(total) == len(build_model(tiny_config("gru-additive")).state_dict())
