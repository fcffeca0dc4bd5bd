"""An encoder-only model in the window: a run fills its masks (models/inference/fill_mask.py), the input bar shows
the filled sentence, the decoding panel's chart each masked position's top-k, the views its ``enc_self``
attention; heads switched off show both fills. A real window on the bundled english-encoder-only demo."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from attnviz.state.demos import demo_path
from attnviz.state.session import PARTNER_RUNNING
from models.inference.fill_mask import fill_masks
from models.storage.checkpoint import load_checkpoint
from models.inference.translator import Translator
from models.analysis.methods import contributions
from tests.test_gui import WAIT, focus_data, run_text
from tests.test_encoder_only_contributions import build
from tests.test_gui_contributions import show

DEMO = "english-encoder-only"


@pytest.fixture(scope="module")
def translator():
    return Translator(load_checkpoint(demo_path(DEMO)), "cpu")


def open_demo(qtbot, window) -> None:
    window.open_path(str(demo_path(DEMO)))
    qtbot.waitUntil(lambda: window.session.model is not None and window.session.model.path.stem == DEMO,
                    timeout=WAIT)


def test_a_run_shows_the_filled_sentence_and_each_masks_top_k(qtbot, window, translator):
    open_demo(qtbot, window)
    expected = fill_masks(translator, translator.source("sh_pherd"))
    run_text(qtbot, window, "sh_pherd")
    session = window.session
    assert session.result.text == expected.text
    assert expected.text in window.views.input_bar.result_text()
    assert f"1 mask filled · p {expected.predictions[0].top_probs[0]:.3f}" in window.views.input_bar.result_text()
    (prediction,) = expected.predictions
    chart = window.views.decoding.top_k.state
    assert list(chart.labels) == prediction.top_tokens
    np.testing.assert_allclose(chart.values, prediction.top_probs, rtol=1e-6)
    assert session.trace.kinds == ["enc_self"] and session.selection.kind == "enc_self"
    decoding = window.views.decoding
    assert decoding.prefix.text().startswith(f"Mask 1 of 1, position {prediction.position} ‘_’")
    window.select(layer=1, head=2)  # the mask's row of that head over the sentence
    np.testing.assert_allclose(decoding.source_strip.state.values,
                               expected.trace.attention["enc_self"][1][2, prediction.position], rtol=1e-6)
    for mine, theirs in zip(session.trace.attention["enc_self"], expected.trace.attention["enc_self"], strict=True):
        np.testing.assert_array_equal(mine, theirs)
    bar = window.views.input_bar
    assert not bar.mode.isEnabled() and "does not decode" in bar.mode.toolTip()


def test_the_views_show_enc_self_alone_and_the_show_box_the_encoder_only_maps(qtbot, window, translator):
    open_demo(qtbot, window)
    run_text(qtbot, window, "sh_pherd")
    window.select(kind="enc_self", layer=1, head=1)
    session, views = window.session, window.views
    heads = session.trace.heads("enc_self")
    assert views.head_grid.shape[0] * views.head_grid.shape[1] >= heads
    assert views.model_view.shape == (session.trace.layers("enc_self"), heads)
    np.testing.assert_array_equal(focus_data(window), session.trace.attention["enc_self"][1][1])
    assert window.viewing.current_heatmap().key_labels[-1] == "</s>"
    source = translator.source("sh_pherd").ids
    for name in ("value_norms", "alti", "value_zeroing"):
        show(qtbot, window, name)
        expected = contributions(name, translator.model, source, output_ids=session.result.token_ids)
        layer = expected.layers["enc_self"][1]
        np.testing.assert_allclose(focus_data(window), layer[1] if layer.ndim == 3 else layer, rtol=1e-5, atol=1e-6)
    show(qtbot, window, "input_x_gradient")
    expected = contributions("input_x_gradient", translator.model, source, output_ids=session.result.token_ids)
    shown = focus_data(window)  # one row per mask, of the gradient of its most likely token
    assert shown.shape == (1, len(source))
    np.testing.assert_allclose(shown, np.reshape(expected.layers["enc_self"], shown.shape), rtol=1e-4, atol=1e-6)


def test_switching_a_head_off_fills_again_and_shows_the_fill_with_every_head_on(qtbot, window, translator):
    open_demo(qtbot, window)
    run_text(qtbot, window, "h_use")
    before = window.session.result.text
    grid = window.views.model_view
    (action,) = [action for action in grid.context_menu(0, 0).actions() if action.text() == "Switch layer off"]
    action.trigger()
    qtbot.waitUntil(lambda: bool(window.session.results) and window.session.original is not None, timeout=WAIT)
    session = window.session
    ablation = session.request.ablation
    expected = fill_masks(translator, translator.source("h_use"), ablation=ablation)
    assert session.original.text == before and session.result.text == expected.text
    chart = window.views.decoding.top_k.state
    assert list(chart.labels) == expected.predictions[0].top_tokens
    assert f"with every head on: {before}" in window.views.input_bar.result_text()


def test_with_no_mask_the_window_shows_the_attention_and_masks_a_right_clicked_token(qtbot, window, translator):
    open_demo(qtbot, window)
    run_text(qtbot, window, "bread and water")
    session, focus = window.session, window.views.focus
    assert session.trace.kinds == ["enc_self"] and session.result.text == "bread and water"
    assert "no token was masked" in window.views.input_bar.notices.text().lower()
    assert focus.maskable and "Right-click a token" in focus.readout.text()
    assert window.views.decoding.prefix.text().startswith("No token is masked: right-click a token")
    assert window.views.decoding.top_k.state.title == "nothing filled"
    assert focus.token_menu(len(session.trace.src_tokens) - 1) is not None  # offered; running it says why not
    (action,) = focus.token_menu(3).actions()
    assert action.text() == "Mask this token ‘a’ and fill it"
    action.trigger()
    qtbot.waitUntil(lambda: bool(session.results) and session.request.settings.text == "bre_d and water",
                    timeout=WAIT)
    expected = fill_masks(translator, translator.source("bre_d and water"))
    assert window.views.input_bar.text.text() == "bre_d and water"
    assert session.result.text == expected.text
    assert list(window.views.decoding.top_k.state.labels) == expected.predictions[0].top_tokens


def test_a_bare_encoder_shows_its_attention_and_says_predictions_need_the_head(qtbot, window, tmp_path):
    build(tmp_path, "bert", head=False)
    window.open_path(str(tmp_path))
    qtbot.waitUntil(lambda: window.session.model is not None and window.session.model.arch == "encoder-only",
                    timeout=WAIT)
    run_text(qtbot, window, "the [MASK] sat on the mat .")
    session = window.session
    assert session.trace.kinds == ["enc_self"] and session.trace.src_tokens[2] == "[MASK]"
    assert "predictions need the head" in window.views.input_bar.notices.text()
    assert window.views.decoding.prefix.text().startswith("Nothing is filled")
    assert not window.views.focus.maskable and window.views.focus.token_menu(1) is None


def test_the_neuron_pane_shows_an_encoder_only_heads_softmax_over_the_sentence(qtbot, window):
    open_demo(qtbot, window)
    run_text(qtbot, window, "sh_pherd")
    window.viewing.select(kind="enc_self", layer=2, head=1)
    view_menu = next(action.menu() for action in window.menuBar().actions() if action.text() == "&View")
    next(action for action in view_menu.actions() if action.text() == "&Neuron").trigger()
    pane = window.neuron.pane
    qtbot.waitUntil(lambda: pane.state is not None, timeout=WAIT)
    columns = {column.name: column.values for column in pane.state.columns}
    trace = window.session.trace
    np.testing.assert_allclose(columns["softmax"], trace.attention["enc_self"][2][1, pane.state.query_row], atol=1e-6)
    assert pane.state.key_labels == trace.src_tokens


def test_comparing_two_encoder_only_models_fills_on_both_and_a_decoder_says_why_not(qtbot, window, tmp_path):
    open_demo(qtbot, window)
    run_text(qtbot, window, "sh_pherd")
    copy = tmp_path / "english-copy.safetensors"
    shutil.copy(demo_path(DEMO), copy)
    window.comparing.compare_with(str(copy))
    qtbot.waitUntil(lambda: window.session.partner is not None, timeout=WAIT)
    run_text(qtbot, window, "k_ng")
    session = window.session
    qtbot.waitUntil(lambda: session.partner_result is not None, timeout=WAIT)
    assert session.partner_result.text == session.result.text == "king"
    np.testing.assert_array_equal(session.partner_result.trace.attention["enc_self"][0],
                                  session.trace.attention["enc_self"][0])
    window.comparing.compare_with(str(demo_path("en-es-transformer")))
    qtbot.waitUntil(lambda: session.partner is not None and session.partner.path.stem == "en-es-transformer",
                    timeout=WAIT)
    run_text(qtbot, window, "q_een")
    qtbot.waitUntil(lambda: bool(session.partner_error) and session.partner_error != PARTNER_RUNNING, timeout=WAIT)
    assert "compare two encoder-only models" in session.partner_error and session.result.text == "queen"
