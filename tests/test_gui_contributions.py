"""Contributions in the window, with the real worker on the bundled demos: the Show choice, its maps equal to
the core's, the traced pass kept across the forward methods, what a GRU cannot give, and the hallucination
signal of every beam hypothesis."""

from __future__ import annotations

import time

import numpy as np
from PySide6.QtCore import QEventLoop, Qt, QTimer

from attnviz.state.contributions import ORIGINAL
from attnviz.state.demos import demo_path
from models.analysis.contributions import alti, source_coverage
from models.analysis.methods import contributions
from tests.test_gui import WAIT, focus_data, run_text
from tests.test_gui_compare import compare, open_demo

LONG = ("The old man who lives in the small house near the river gave his young grandson a red bicycle for his "
        "birthday last summer, and the boy rode it every day.")


def show(qtbot, window, name: str) -> float:
    """Choose ``name`` in the Show box and wait for its map, in an event loop (qWait would keep the GIL from
    the worker); the seconds it took."""
    started = time.perf_counter()
    window.views.selector.set_show_name(name)
    label = f"<b>{window.contributions.choice.label}</b>" if name != "weights" else None  # not "Computing …"
    while label is not None and label not in window.views.focus.title.text():
        loop = QEventLoop()
        QTimer.singleShot(5, loop.quit)
        loop.exec()
        assert time.perf_counter() - started < WAIT / 1000, window.views.focus.title.text()
    return time.perf_counter() - started


def core_maps(window, method: str, result=None):
    """The core's own maps of the shown result (computed here, on the GUI thread, for the comparison only)."""
    translator = window.worker.translator
    result = result or window.session.result
    source = translator.source(window.session.request.settings.text)
    return contributions(method, translator.model, source.ids, output_ids=result.token_ids)


def test_every_method_shows_the_cores_map_and_forward_methods_rerun_nothing(qtbot, window):
    open_demo(qtbot, window, "en-es-transformer")
    run_text(qtbot, window, LONG, max_len=60)
    assert len(window.session.result.token_ids) >= 30
    window.select(kind="cross", layer=1, head=2)
    run_id = window.worker.jobs.newest("run")
    show(qtbot, window, "value_norms")
    np.testing.assert_allclose(focus_data(window), core_maps(window, "value_norms").layers["cross"][1][2], rtol=1e-5)
    assert window.views.focus.colorbar.axis.labelText == "‖α·f(x)‖"
    captured = dict(window.worker.captured)
    assert sum(key[1] == run_id for key in captured) == 1  # the shown result's traced pass
    timings = [show(qtbot, window, name) for name in ("alti", "weights", "value_norms", "alti")]
    np.testing.assert_allclose(focus_data(window), core_maps(window, "alti").layers["cross"][1], atol=1e-6)
    assert window.worker.captured == captured  # the same traced pass for all: no new one
    assert window.worker.jobs.newest("run") == run_id and window.session.request.id == run_id
    assert max(timings) < 1.0, timings
    show(qtbot, window, "input_x_gradient")
    np.testing.assert_allclose(focus_data(window), core_maps(window, "input_x_gradient").source, rtol=1e-4, atol=1e-6)
    window.select(kind="enc_self")
    assert window.views.focus.title.text().startswith("input × gradient gives no encoder self-attention map")
    assert window.views.head_grid.shape == (0, 0)
    show(qtbot, window, "value_zeroing")
    np.testing.assert_allclose(focus_data(window), core_maps(window, "value_zeroing").layers["enc_self"][1],
                               atol=1e-6)
    assert window.views.model_view.shape == (3, 4)


def test_a_gru_offers_what_it_has_and_says_what_it_lacks_in_place_of_the_heatmap(qtbot, window):
    open_demo(qtbot, window, "piglatin-gru-additive")
    box = window.views.selector.show_box
    alti_index = box.findData("alti")
    assert not box.model().item(alti_index).isEnabled()
    reason = box.itemData(alti_index, Qt.ItemDataRole.ToolTipRole)
    assert reason.startswith("ALTI+ needs Transformer blocks") and "gru-additive" in reason
    assert box.model().item(box.findData("value_norms")).isEnabled()
    results = window.session.results
    window.contributions.choose("alti")
    assert window.views.focus.title.text() == reason and window.session.results is results
    assert window.contributions.coverage == {}  # no ALTI+ signal for a model without Transformer blocks
    strip = window.views.decoding.source_strip  # the step's bars are no attention weights posing as ALTI+ either
    assert strip.labels == () and not strip.values.size and strip.getPlotItem().titleLabel.text == reason
    show(qtbot, window, "value_norms")
    np.testing.assert_allclose(focus_data(window), core_maps(window, "value_norms").layers["cross"][0][0], rtol=1e-5)


def test_beam_hypotheses_each_show_their_own_source_contribution(qtbot, window):
    open_demo(qtbot, window, "en-es-transformer")
    run_text(qtbot, window, "The house is small and the river is cold.", mode="beam", beam=3, max_len=20)
    results = window.session.results
    qtbot.waitUntil(lambda: len(window.contributions.coverage) == len(results) == 3, timeout=WAIT)
    translator = window.worker.translator
    source = translator.source(window.session.request.settings.text)
    expected = [source_coverage(alti(translator.model, source.ids, result.token_ids)) for result in results]
    lines = [window.views.decoding.beam.hypotheses.item(row).text() for row in range(3)]
    for line, coverage in zip(lines, expected):
        assert f"source contribution {coverage.avg_source:.2f}" in line
    window.views.decoding.beam.hypotheses.setCurrentRow(2)
    assert f"source contribution {expected[2].avg_source:.2f}" in window.views.input_bar.output.text()
    show(qtbot, window, "alti")
    window.select(kind="cross", layer=2)
    np.testing.assert_allclose(focus_data(window), core_maps(window, "alti", results[2]).layers["cross"][2], atol=1e-6)


def test_comparing_shows_both_models_maps_of_the_same_method(qtbot, window):
    open_demo(qtbot, window, "en-es-transformer")
    compare(qtbot, window, "en-es-transformer-postln")
    window.select(kind="cross", layer=0)
    window.views.selector.set_show_name("alti")
    comparison = window.viewing.current_comparison
    qtbot.waitUntil(lambda: comparison().a.state is not None and comparison().b.state is not None, timeout=WAIT)
    panes = comparison()
    assert "ALTI+" in panes.a.state.title and "ALTI+" in panes.b.state.title
    partner = window.worker.partner
    source = partner.source(window.session.request.settings.text)
    expected = alti(partner.model, source.ids, window.session.partner_result.token_ids).layers["cross"][0]
    np.testing.assert_allclose(panes.b.state.matrix, expected, atol=1e-6)
    assert panes.diff.state is not None or panes.diff.message.startswith("B − A not shown")
    assert str(demo_path("en-es-transformer-postln")) == str(window.session.partner.path)


def test_render_show_draws_a_method_titled_with_it_and_refuses_what_the_model_lacks(tmp_path, capsys):
    from attnviz.cli import main

    svg = tmp_path / "alti.svg"
    assert main(["render", "-c", "en-es-transformer", "The old man.", "--kind", "cross", "--layer", "1",
                 "--show", "alti", "-o", str(svg)]) == 0
    assert "Cross-attention · layer 1 · the block · ALTI+" in svg.read_text()
    assert main(["render", "-c", "piglatin-gru-additive", "hello", "--kind", "cross", "--show", "alti",
                 "-o", str(tmp_path / "gru.png")]) == 1
    assert capsys.readouterr().err.strip().splitlines()[-1].startswith("attnviz: error: ALTI+ needs Transformer blocks")
    assert not (tmp_path / "gru.png").exists()


def test_an_ablated_run_shows_the_contributions_of_the_model_as_it_ran_and_the_original_its_own(qtbot, window):
    from models.nn.ablation import Ablation
    from tests.test_gui_ablation import wait_for_run

    open_demo(qtbot, window, "en-es-transformer")
    run_text(qtbot, window, "The house is small and the river is cold.", max_len=30)
    window.select(kind="cross", layer=1, head=2)
    window.ablation.toggle_head(1, 2)
    wait_for_run(qtbot, window, ablated=True)
    ablation = window.session.request.ablation
    assert ablation == Ablation.parse(["cross:1:2"])
    translator = window.worker.translator
    source = translator.source(window.session.request.settings.text)
    show(qtbot, window, "value_norms")
    assert focus_data(window).shape == core_maps(window, "value_norms").layers["cross"][1][2].shape
    assert not focus_data(window).any()  # the head switched off added nothing to its block's output
    expected = contributions("alti", translator.model, source.ids, output_ids=window.session.result.token_ids,
                             ablation=ablation)
    show(qtbot, window, "alti")
    np.testing.assert_allclose(focus_data(window), expected.layers["cross"][1], atol=1e-6)
    assert not np.allclose(focus_data(window), core_maps(window, "alti").layers["cross"][1], atol=1e-4)
    window.views.ablation_bar.compare.setChecked(True)  # the same input with every head on: its own maps
    expected = core_maps(window, "alti", window.session.original).layers["cross"][1]
    qtbot.waitUntil(lambda: "Computing" not in window.views.focus.title.text(), timeout=WAIT)
    np.testing.assert_allclose(focus_data(window), expected, atol=1e-6)


def test_the_rollout_aggregate_of_alti_shows_alti_own_rollout_titled_so(qtbot, window):
    open_demo(qtbot, window, "en-es-transformer")
    run_text(qtbot, window, "The house is small and the river is cold.", max_len=30)
    window.select(kind="cross", layer=1, head="rollout")
    show(qtbot, window, "alti")
    maps = core_maps(window, "alti")
    np.testing.assert_allclose(focus_data(window), maps.source, atol=1e-6)
    assert "whole model · <b>ALTI+</b> rollout" in window.views.focus.title.text()
    head_box = window.views.selector.head
    assert head_box.currentText() == "ALTI+ rollout"  # the box names what the title does
    assert [head_box.itemText(index) for index in range(head_box.count())] == ["ALTI+ per layer", "ALTI+ rollout"]
    window.select(kind="dec_self")
    np.testing.assert_allclose(focus_data(window), maps.target, atol=1e-6)
    head_box.setCurrentIndex(0)  # the layer's block again, as the user picks it
    np.testing.assert_allclose(focus_data(window), maps.layers["dec_self"][1], atol=1e-6)
    show(qtbot, window, "weights")
    assert head_box.count() == 4 + 3 and head_box.currentText() == "head 0"


def test_the_output_lines_source_contribution_follows_the_run_shown_with_heads_off(qtbot, window):
    open_demo(qtbot, window, "en-es-transformer")
    text = "The house is small and the river is cold."
    run_text(qtbot, window, text, max_len=20)
    window.select(kind="cross", layer=1)
    window.ablation.toggle_head(1, 2)
    session = window.session
    qtbot.waitUntil(lambda: session.original is not None and bool(session.results)
                    and {0, ORIGINAL} <= set(window.contributions.coverage), timeout=WAIT)
    translator = window.worker.translator
    source = translator.source(text)
    ablated = source_coverage(alti(translator.model, source.ids, session.run_result.token_ids,
                                   ablation=session.request.ablation)).avg_source
    original = source_coverage(alti(translator.model, source.ids, session.original.token_ids)).avg_source
    assert f"{ablated:.2f}" != f"{original:.2f}"  # this head moves the output's share from the source
    assert f"source contribution {ablated:.2f}" in window.views.input_bar.output.text()
    window.views.ablation_bar.compare.setChecked(True)  # the views show the run with every head on
    line = window.views.input_bar.output.text()
    beside_original = line.split(f"with every head on: {session.original.text}")[1]
    assert beside_original.split("changes:")[0].count(f"ALTI+ source contribution {original:.2f}") == 1
    assert f"source contribution {ablated:.2f}" not in line
    window.views.ablation_bar.compare.setChecked(False)
    assert f"source contribution {ablated:.2f}" in window.views.input_bar.output.text()


def test_integrated_gradients_say_how_complete_they_are_on_the_colour_bar_and_under_the_heatmap(qtbot, window):
    open_demo(qtbot, window, "en-es-transformer-postln")
    run_text(qtbot, window, "The cat sits on the mat.")
    window.select(kind="cross")
    show(qtbot, window, "integrated_gradients")
    maps = core_maps(window, "integrated_gradients")
    assert maps.incomplete == [] and maps.completeness.max() <= 0.05
    line = maps.completeness_line(window.session.result.tokens)
    assert window.views.focus.colorbar.toolTip() == line and line.startswith("completeness: within 5% at every step")
    assert line in window.views.focus.legend.text()
    show(qtbot, window, "alti")
    assert window.views.focus.colorbar.toolTip() == "" and "completeness" not in window.views.focus.legend.text()
