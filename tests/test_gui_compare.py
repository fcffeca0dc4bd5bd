"""Comparing two checkpoints: ``attnviz render --compare`` and the window's comparison, with real demos."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from PySide6.QtGui import QImage

from attnviz.cli import main
from attnviz.state.demos import demo_path
from tests.test_gui import WAIT, run_text


def test_render_compare_writes_a_figure_wider_than_one_heatmap(tmp_path, capsys):
    one, both = tmp_path / "one.png", tmp_path / "both.png"
    assert main(["render", "-c", "piglatin-gru-additive", "team", "--kind", "cross", "--size", "600x400",
                 "-o", str(one)]) == 0
    assert main(["render", "-c", "piglatin-gru-additive", "--compare", "piglatin-gru-scaled-dot", "--target", "eamtay",
                 "team", "--kind", "cross", "--size", "600x400", "-o", str(both)]) == 0
    single, compared = QImage(str(one)), QImage(str(both))
    assert compared.height() == single.height() and compared.width() > 2 * single.width()  # three panes


def test_render_compare_refuses_what_neither_model_has(tmp_path, capsys):
    assert main(["render", "-c", "piglatin-gru-additive", "--compare", "piglatin-gru-scaled-dot", "team",
                 "--kind", "enc_self", "-o", str(tmp_path / "x.png")]) == 1
    assert "neither model" in capsys.readouterr().err
    assert not (tmp_path / "x.png").exists()


def open_demo(qtbot, window, name: str) -> None:
    window.open_path(str(demo_path(name)))
    qtbot.waitUntil(lambda: window.session.model.path.stem == name and bool(window.session.results), timeout=WAIT)


def compare(qtbot, window, name: str) -> None:
    window.comparing.compare_with(str(demo_path(name)))
    qtbot.waitUntil(lambda: window.session.partner is not None and window.session.partner.path.stem == name
                    and window.session.partner_result is not None and bool(window.session.results), timeout=WAIT)


def test_two_grus_with_the_same_tokenizers_show_a_synchronised_difference(qtbot, window):
    open_demo(qtbot, window, "piglatin-gru-additive")
    compare(qtbot, window, "piglatin-gru-scaled-dot")
    run_text(qtbot, window, "team", mode="forced", target="eamtay", max_len=20)
    qtbot.waitUntil(lambda: window.session.partner_result is not None, timeout=WAIT)
    view = window.views.compare_view
    assert view.isVisible() and not window.views.focus.isVisible() and window.views.compare_bar.isVisible()
    assert "piglatin-gru-scaled-dot" in window.views.compare_bar.label.text()
    assert window.named_actions["stop_compare"].isEnabled() and not window.views.grids.isVisible()
    shown = window.views.input_bar.result_text()
    assert "model A: <b>eamtay</b>" in shown and "model B (piglatin-gru-scaled-dot): eamtay · score" in shown
    a, b = window.session.trace, window.session.partner_result.trace
    assert np.array_equal(view.a.matrix, a.attention["cross"][0][0])
    assert np.array_equal(view.b.matrix, b.attention["cross"][0][0])
    assert np.allclose(view.diff.matrix, b.attention["cross"][0][0] - a.attention["cross"][0][0])
    low, high = view.diff.image.getLevels()
    assert low == -high and high > 0
    # one selection drives both: a step moves the outline in every pane
    window.select(step=2)
    assert [pane.step_box.isVisible() for pane in (view.a, view.b, view.diff)] == [True] * 3
    assert {pane.step_box.rect().center().y() for pane in (view.a, view.b, view.diff)} == {2.0}
    # Stop comparing (the × in the bar): back to one model
    view_title = view.a.title.text()
    assert "<b>A</b>" in view_title
    window.views.compare_bar.close_button.click()
    assert window.session.partner is None and not window.views.compare_bar.isVisible()
    assert window.views.focus.isVisible() and not view.isVisible()
    assert not window.named_actions["stop_compare"].isEnabled() and window.views.grids.isVisible()
    assert "model B" not in window.views.input_bar.result_text()
    qtbot.waitUntil(lambda: window.worker_thread.worker.partner is None, timeout=WAIT)


def test_a_gru_and_a_transformer_explain_why_there_is_no_difference(qtbot, window):
    open_demo(qtbot, window, "piglatin-gru-additive")
    compare(qtbot, window, "en-es-transformer")
    view = window.views.compare_view
    window.select(kind="cross", layer=0, head=0)
    assert view.a.title.text().startswith("<b>A</b>") and view.b.title.text().startswith("<b>B</b>")
    assert view.diff.title.text().startswith("B − A not shown: the source tokens differ")
    window.select(head=3)  # the GRU has one head: clamped to it, B shows the same head number
    assert window.session.selection.head == 0
    window.select(head="mean")
    assert view.diff.title.text().startswith("B − A not shown")
    # what B lacks is said in its pane: the selection follows model A; model B shown as far as it goes
    session = window.session
    assert "enc_self" not in session.trace.kinds and "enc_self" in session.partner_result.trace.kinds
    # the other way round: the transformer as A, the GRU as B; what B lacks is said in its pane
    open_demo(qtbot, window, "en-es-transformer")
    compare(qtbot, window, "piglatin-gru-additive")
    window.select(kind="enc_self", layer=0, head=0)
    assert view.a.title.text().startswith("<b>A</b>") and view.b.title.text() == "model B has no encoder self-attention"
    window.select(kind="cross", head=3)
    assert view.b.title.text() == "model B has no head 3 (it has 1 head)"
    assert view.diff.title.text().startswith("B − A not shown: model B has no head 3")
    assert "Cannot" not in window.views.input_bar.result_text()


def test_a_model_compared_with_itself_differs_by_exactly_zero(qtbot, window):
    open_demo(qtbot, window, "piglatin-gru-additive")
    compare(qtbot, window, "piglatin-gru-additive")
    assert window.views.compare_view.diff.matrix.shape == window.session.trace.attention["cross"][0][0].shape
    assert not window.views.compare_view.diff.matrix.any()


def test_the_demos_list_compares_and_a_bad_partner_is_one_line(qtbot, window, tmp_path):
    open_demo(qtbot, window, "piglatin-gru-additive")
    panel = window.views.model_panel
    item = next(panel.demos.item(row) for row in range(panel.demos.count())
                if panel.demos.item(row).text() == "piglatin-gru-scaled-dot")
    (action,) = [action for action in panel.demo_actions(item).actions()
                 if action.text() == "Compare with the open model"]
    action.trigger()
    qtbot.waitUntil(lambda: window.session.partner is not None and window.session.partner_result is not None,
                    timeout=WAIT)
    assert window.session.model.path.stem == "piglatin-gru-additive"
    broken = tmp_path / "broken.safetensors"
    broken.write_bytes(b"not a checkpoint")
    window.comparing.compare_with(str(broken))
    qtbot.waitUntil(lambda: "Cannot compare with it" in window.views.input_bar.result_text(), timeout=WAIT)
    assert window.session.model.path.stem == "piglatin-gru-additive"


def test_a_session_keeps_the_partner_and_reopening_restores_the_comparison(qtbot, window, tmp_path, random_checkpoint):
    import shutil

    from attnviz.state.session_file import read_session

    model = shutil.copy(random_checkpoint, tmp_path / "a.safetensors")
    (tmp_path / "models").mkdir()
    partner = shutil.copy(random_checkpoint, tmp_path / "models" / "b.safetensors")
    window.open_path(str(model))
    qtbot.waitUntil(lambda: window.session.model.path.name == "a.safetensors", timeout=WAIT)
    run_text(qtbot, window, "abcd")
    compare(qtbot, window, "piglatin-gru-additive")
    path = tmp_path / "lesson.attnviz"
    window.sessions.save_session(str(path))
    assert json.loads(path.read_text())["compare"] == {"demo": "piglatin-gru-additive"}
    window.comparing.compare_with(str(partner))
    qtbot.waitUntil(lambda: window.session.partner.path.name == "b.safetensors", timeout=WAIT)
    window.sessions.save_session(str(path))
    assert json.loads(path.read_text())["compare"] == {"checkpoint": "models/b.safetensors"}
    assert read_session(path).compare == Path(partner).resolve()

    window.comparing.stop_comparing()
    window.sessions.open_session(str(path))
    qtbot.waitUntil(lambda: window.session.partner is not None and window.session.partner_result is not None
                    and window.opening.plan is None, timeout=WAIT)
    assert window.session.partner.path.name == "b.safetensors" and window.views.compare_view.isVisible()
    assert not window.views.compare_view.diff.matrix.any()  # the same weights: B − A is all zeros

    # a moved partner is one line; model A still opens, without comparing
    Path(partner).unlink()
    window.comparing.stop_comparing()
    window.sessions.open_session(str(path))
    qtbot.waitUntil(lambda: "Not comparing: the session" in window.views.input_bar.result_text(),
                    timeout=WAIT)
    assert window.session.model.path.name == "a.safetensors" and not window.session.comparing
    assert "is not there (moved or deleted?)" in window.views.input_bar.result_text()


def test_a_bad_compare_field_is_one_line(tmp_path, random_checkpoint):
    from attnviz.state.session_file import SessionFileError, read_session

    path = tmp_path / "bad.attnviz"
    path.write_text(json.dumps({"format": "attnviz-session", "version": 1, "checkpoint": str(random_checkpoint),
                                "compare": "piglatin-gru-additive"}))
    with pytest.raises(SessionFileError, match='"compare" must be an object with "demo" or "checkpoint"'):
        read_session(path)


def test_the_demos_menu_opens_the_pre_and_post_ln_pair_side_by_side(qtbot, window):
    """Demos → Compare …: model A opens, then model B beside it, and the example runs on both."""
    from attnviz.state.demos import demo_pairs

    pairs = {(a.stem, b.stem): title for title, a, b in demo_pairs()}
    assert ("en-es-transformer", "en-es-transformer-postln") in pairs
    demo_menu = next(action.menu() for action in window.menuBar().actions()[0].menu().actions()
                     if action.menu() is not None and action.text() == "&Demos")
    action = next(action for action in demo_menu.actions()
                  if action.text() == f"Compare {pairs[('en-es-transformer', 'en-es-transformer-postln')]}")
    action.trigger()
    qtbot.waitUntil(lambda: window.session.model is not None and window.session.model.path.stem == "en-es-transformer"
                    and window.session.partner is not None
                    and window.session.partner.path.stem == "en-es-transformer-postln"
                    and window.session.partner_result is not None and bool(window.session.results), timeout=WAIT)
    assert window.views.compare_view.isVisible() and "en-es-transformer-postln" in window.views.compare_bar.label.text()
    from attnviz.state.demos import demo_example

    assert window.views.input_bar.text_value() == demo_example(demo_path("en-es-transformer"))
    assert window.session.result.text and window.session.partner_result.text  # both models translated it


def test_model_b_follows_model_a_when_the_gpu_runs_out_of_memory(qtbot, window):
    """Both models always run on one device: when the GPU runs out of memory and model A falls back to the
    CPU, model B comes along (it was left on the GPU before)."""
    import torch

    open_demo(qtbot, window, "piglatin-gru-additive")
    compare(qtbot, window, "piglatin-gru-scaled-dot")
    worker = window.worker_thread.worker
    original, calls = worker.translator.decode, []

    def decode_once_out_of_memory(*args, **kwargs):
        calls.append(1)
        if len(calls) == 1:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return original(*args, **kwargs)

    worker.translator.decode = decode_once_out_of_memory
    worker.translator.device = worker.partner.device = torch.device("cuda")  # what the worker sees on a GPU machine
    run_text(qtbot, window, "the cat", max_len=8)
    assert "ran out of memory" in window.views.input_bar.result_text()
    assert worker.translator.device.type == "cpu" and worker.partner.device.type == "cpu"
    assert window.session.partner_result is not None


def test_exports_while_comparing_hold_both_models(qtbot, window, tmp_path):
    """The heatmap image is the three maps as shown (A | B | B − A), PNG and SVG; the NPZ export writes model
    A's run and, beside it, model B's, each in the documented layout."""
    from xml.etree import ElementTree

    open_demo(qtbot, window, "piglatin-gru-additive")
    compare(qtbot, window, "piglatin-gru-scaled-dot")
    png = tmp_path / "both.png"
    window.exporting.export_focus_image(str(png))
    image = QImage(str(png))
    assert image.width() > image.height()  # three maps side by side
    svg = tmp_path / "both.svg"
    window.exporting.export_focus_image(str(svg))
    texts = [text.text for text in ElementTree.parse(svg).getroot().iter("{http://www.w3.org/2000/svg}text")]
    assert texts.count("Cross-attention · layer 0 · head 0") == 2  # both models' maps
    assert {"piglatin-gru-additive", "piglatin-gru-scaled-dot"} <= set(texts)  # titled with the models' names
    window.exporting.export_npz(str(tmp_path / "run.npz"))
    a, b = np.load(tmp_path / "run.npz"), np.load(tmp_path / "run-B.npz")
    np.testing.assert_array_equal(a["cross_L0"], window.session.trace.attention["cross"][0])
    np.testing.assert_array_equal(b["cross_L0"], window.session.partner_result.trace.attention["cross"][0])
    assert str(b["translation"]) == window.session.partner_result.text


def test_a_csv_export_while_comparing_writes_a_b_and_their_difference(qtbot, window, tmp_path):
    import csv

    open_demo(qtbot, window, "piglatin-gru-additive")
    compare(qtbot, window, "piglatin-gru-additive")  # the same model: the same tokens, so B − A exists (zeros)
    window.exporting.export_csv(str(tmp_path / "cross.csv"))
    names = sorted(path.name for path in tmp_path.glob("*.csv"))
    assert names == ["cross-B-minus-A.csv", "cross-B.csv", "cross.csv"]
    rows = list(csv.reader((tmp_path / "cross-B-minus-A.csv").open(encoding="utf-8")))
    assert rows[0][1:] == window.session.trace.src_tokens
    assert not np.array(rows[1:])[:, 1:].astype(float).any()
    b = np.array(list(csv.reader((tmp_path / "cross-B.csv").open(encoding="utf-8")))[1:])[:, 1:].astype(float)
    np.testing.assert_allclose(b, window.session.partner_result.trace.attention["cross"][0][0], atol=1e-5)
