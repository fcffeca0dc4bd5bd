"""The Patching pane in a real offscreen window on the bundled en-es demo: the corrupted box prefilled with the run's
source, a word edited and run, the tables drawn as the patching computes them (normalised), the AtP estimate on
choice, a click on a head's cell focusing that head in the main view, and bad input as the pane's one line."""

from __future__ import annotations

import numpy as np
import pytest
from PySide6.QtCore import QPointF, Qt

from attnviz.gui.app import create_window
from models.analysis.patching import activation_patching, default_step
from models.inference.decoding import finish

DEMO = "resources/checkpoints/en-es-transformer.safetensors"
WAIT = 60_000
CLEAN, CORRUPT = "The Lord is my shepherd.", "The Lord is my father."


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


def click_cell(qtbot, pane, panel: str, row: int, column: int) -> None:
    plot = pane.plots[panel][0]
    scene = plot.vb.mapViewToScene(QPointF(float(column), float(row)))
    point = pane.graphics.mapFromScene(scene)
    qtbot.mouseClick(pane.graphics.viewport(), Qt.MouseButton.LeftButton, pos=point)


def test_a_patching_run_draws_its_tables_and_a_head_click_focuses_the_head(qtbot, demo_window):
    window = demo_window
    run(qtbot, window, CLEAN)
    window.named_actions["patching"].trigger()  # View → Patching
    pane = window.patching.pane
    assert pane.corrupt.text() == CLEAN  # prefilled with the run's source
    pane.corrupt.setText(CORRUPT)
    qtbot.mouseClick(pane.run, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: pane.state is not None, timeout=WAIT)
    state = pane.state
    assert [panel.name for panel in state.panels] == ["encoder", "decoder", "heads_enc_self", "heads_dec_self",
                                                      "heads_cross"]
    translator = window.worker.translator
    clean, corrupt = translator.source(CLEAN), translator.source(CORRUPT)
    output = finish(translator.decode(clean, need_weights=False))[0].token_ids
    other = finish(translator.decode(corrupt, need_weights=False))[0].token_ids
    result = activation_patching(translator.model, clean.ids, corrupt.ids, output, step=default_step(output, other))
    span = result.clean - result.corrupt
    encoder = next(panel for panel in state.panels if panel.name == "encoder")
    np.testing.assert_allclose(encoder.values[:, :-1], (result.exact.encoder - result.corrupt) / span, atol=1e-5)
    np.testing.assert_allclose(encoder.values[:, -1], (result.exact.encoder_all - result.corrupt) / span, atol=1e-5)
    assert encoder.column_labels[:-1] == translator.source_labels(clean) and encoder.row_labels[0] == "emb"
    assert any("Spearman" in line for line in state.lines)
    # a head's cell clicked: that head focused in the main view, and outlined
    click_cell(qtbot, pane, "heads_cross", 2, 1)
    qtbot.waitUntil(lambda: (window.session.selection.kind, window.session.selection.layer,
                             window.session.selection.head) == ("cross", 2, 1), timeout=WAIT)
    assert pane.state.selected == ("heads_cross", 2, 1)
    assert pane.plots["heads_cross"][2].isVisible()
    # the estimate
    pane.estimate.setCurrentIndex(pane.estimate.findData("atp"))
    heads = next(panel for panel in pane.state.panels if panel.name == "heads_cross")
    np.testing.assert_allclose(heads.values, (result.atp.heads["cross"] - result.corrupt) / span, atol=1e-5)
    assert any("estimate" in line for line in pane.state.lines)


def test_sources_of_different_lengths_are_the_panes_one_line(qtbot, demo_window):
    window = demo_window
    run(qtbot, window, CLEAN)
    window.patching.open()
    pane = window.patching.pane
    pane.corrupt.setText("The Lord is my good shepherd.")
    qtbot.mouseClick(pane.run, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: "same number of tokens" in pane.message.text(), timeout=WAIT)
    assert pane.state is None


def test_a_head_chosen_on_the_grids_is_outlined_on_its_table(qtbot, demo_window):
    window = demo_window
    run(qtbot, window, CLEAN)
    window.patching.open()
    pane = window.patching.pane
    pane.corrupt.setText(CORRUPT)
    qtbot.mouseClick(pane.run, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: pane.state is not None, timeout=WAIT)
    window.views.model_view.clicked.emit(1, 3)  # the grid of every layer × head: layer 1, head 3
    qtbot.waitUntil(lambda: pane.state.selected == (f"heads_{window.session.selection.kind}", 1, 3), timeout=WAIT)


@pytest.mark.parametrize("demo, expected", [("piglatin-decoder-only", ["decoder", "heads_dec_self"]),
                                            ("piglatin-gru-additive", "recurrent (GRU) layers")])
def test_a_language_models_prompt_is_patched_and_a_recurrent_model_refused(qtbot, qsettings, demo, expected):
    clean, corrupt = "hello world", "hello wurld"
    window = create_window(f"resources/checkpoints/{demo}.safetensors", "cpu", qsettings)
    qtbot.addWidget(window)
    window.resize(1000, 650)
    window.show()
    qtbot.waitUntil(lambda: window.session.model is not None, timeout=WAIT)
    run(qtbot, window, clean)
    window.patching.open()
    pane = window.patching.pane
    pane.corrupt.setText(corrupt)
    qtbot.mouseClick(pane.run, Qt.MouseButton.LeftButton)
    if isinstance(expected, str):
        qtbot.waitUntil(lambda: expected in pane.message.text(), timeout=WAIT)
    else:
        qtbot.waitUntil(lambda: pane.state is not None, timeout=WAIT)
        assert [panel.name for panel in pane.state.panels] == expected
        decoder = pane.state.panels[0]
        assert decoder.column_labels[:len(clean)] == list(clean.replace(" ", "␣"))  # the prompt's characters first
    window.close()


def test_export_writes_every_table_to_an_npz_named_as_the_json_and_the_shown_ones_to_csv(qtbot, demo_window,
                                                                                         tmp_path):
    import csv

    from attnviz.state.patch_view import patch_document

    window = demo_window
    run(qtbot, window, CLEAN)
    window.named_actions["patching"].trigger()
    pane = window.patching.pane
    assert not pane.export.isEnabled()  # nothing to export before a run
    pane.corrupt.setText(CORRUPT)
    qtbot.mouseClick(pane.run, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: pane.state is not None and pane.export.isEnabled(), timeout=WAIT)
    report = window.patching.report
    document = patch_document(report, clean_text=CLEAN, corrupt_text=CORRUPT)
    window.patching.export(str(tmp_path / "tables.npz"))
    with np.load(tmp_path / "tables.npz") as arrays:
        for name in ("encoder", "decoder", "encoder_all"):
            np.testing.assert_allclose(arrays[name], document[name], atol=1e-6)
            np.testing.assert_allclose(arrays[f"atp_{name}"], document["atp"][name], atol=1e-6)
            np.testing.assert_allclose(arrays[f"raw_{name}"], document["raw"][name], atol=1e-5)
            np.testing.assert_allclose(arrays[f"raw_atp_{name}"], document["raw"]["atp"][name], atol=1e-5)
        for kind, heads in document["heads"].items():
            np.testing.assert_allclose(arrays[f"heads_{kind}"], heads, atol=1e-6)
            np.testing.assert_allclose(arrays[f"atp_heads_{kind}"], document["atp"]["heads"][kind], atol=1e-6)
        assert float(arrays["metric_clean"]) == document["clean"]["value"]
        assert float(arrays["metric_corrupt"]) == document["corrupt"]["value"]
        assert int(arrays["step"]) == document["metric"]["step"] and str(arrays["metric"]) == document["metric"]["name"]
        assert list(arrays["clean_tokens"]) == document["clean"]["tokens"]
        assert float(arrays["spearman_all"]) == pytest.approx(document["spearman"]["all"], abs=1e-6)
    window.patching.export(str(tmp_path / "tables.csv"))
    written = sorted(path.name for path in tmp_path.glob("tables-*.csv"))
    assert written == sorted(f"tables-{panel.name}.csv" for panel in pane.state.panels)
    with open(tmp_path / "tables-encoder.csv", encoding="utf-8") as handle:
        rows = list(csv.reader(handle))
    assert rows[0][1:] == document["clean"]["tokens"] + ["(all)"] and rows[1][0] == "emb"
    table = np.array([[float(value) for value in row[1:]] for row in rows[1:]])
    np.testing.assert_allclose(table[:, :-1], document["encoder"], atol=1e-5)
    np.testing.assert_allclose(table[:, -1], document["encoder_all"], atol=1e-5)
