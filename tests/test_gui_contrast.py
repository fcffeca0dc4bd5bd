"""Contrastive explanations in the window, with the real worker on the en-es demo: a click on the step's top-k chart
(or on a sibling in the beam tree) picks y′, the contrastive methods are computed again on the worker for
logit(y) − logit(y′) at that step, the focus heatmap shows the core's maps and says so in its title, and a click
on the chosen token clears it."""

from __future__ import annotations

import numpy as np
import pytest
from PySide6.QtCore import QPointF, Qt

from attnviz.gui.views.style import lookup_table
from attnviz.state import contrast_view, viewmodel
from models.analysis.methods import contributions
from tests.test_gui import WAIT, focus_data, run_text
from tests.test_gui_compare import open_demo
from tests.test_gui_contributions import show

TEXT = "The house is small and the river is cold."


def click_top_k(qtbot, window, label: str) -> None:
    """A left click on the top-k chart's bar of ``label``."""
    chart = window.views.decoding.top_k
    index = list(chart.labels).index(label)
    scene = chart.getPlotItem().vb.mapViewToScene(QPointF(float(chart.values[index]) / 2, float(index)))
    qtbot.mouseClick(chart.viewport(), Qt.MouseButton.LeftButton, pos=chart.mapFromScene(scene))


def core_maps(window, method: str, contrast):
    translator = window.worker.translator
    source = translator.source(window.session.request.settings.text)
    return contributions(method, translator.model, source.ids, output_ids=window.session.result.token_ids,
                         contrast=contrast)


def test_a_click_on_a_top_k_entry_explains_why_the_chosen_token_and_not_it(qtbot, window):
    open_demo(qtbot, window, "en-es-transformer")
    run_text(qtbot, window, TEXT, max_len=12)
    window.select(kind="cross", layer=0, head=0, step=1)
    show(qtbot, window, "input_x_gradient")
    plain = focus_data(window).copy()
    step = window.session.result.steps[1]
    chosen, other = step.tokens[0], next(label for label in step.top_tokens[0] if label != step.tokens[0])
    click_top_k(qtbot, window, other)
    assert window.contributions.contrast is not None and window.contributions.contrast.label == other
    title = window.views.focus.title
    qtbot.waitUntil(lambda: f"logit(‘{chosen}’) − logit(‘{other}’)" in title.text(), timeout=WAIT)
    contrast = window.contributions.contrast.per_step(len(window.session.result.token_ids))
    expected = core_maps(window, "input_x_gradient", contrast)
    np.testing.assert_allclose(focus_data(window), expected.source, rtol=1e-4, atol=1e-6)
    assert not np.allclose(focus_data(window)[1], plain[1])
    assert f"not ‘{other}’ at step 2" in window.views.status_bar.currentMessage()
    assert window.views.decoding.top_k.title_text.endswith(f"vs ‘{other}’")
    show(qtbot, window, "alti_logit")  # ALTI-Logit's heads, contrasted too
    qtbot.waitUntil(lambda: "ALTI-Logit" in title.text() and "logit(‘" in title.text(), timeout=WAIT)
    np.testing.assert_allclose(focus_data(window), core_maps(window, "alti_logit", contrast).layers["cross"][0][0],
                               atol=1e-5)
    click_top_k(qtbot, window, chosen)  # the chosen token itself: no contrast
    qtbot.waitUntil(lambda: "logit(‘" not in title.text() and "<b>ALTI-Logit</b>" in title.text(), timeout=WAIT)
    assert window.contributions.contrast is None
    np.testing.assert_allclose(focus_data(window), core_maps(window, "alti_logit", None).layers["cross"][0][0],
                               atol=1e-5)


def test_a_click_on_a_sibling_in_the_beam_tree_contrasts_with_its_token(qtbot, window):
    open_demo(qtbot, window, "en-es-transformer")
    run_text(qtbot, window, TEXT, mode="beam", beam=3, max_len=12)
    window.select(kind="cross", layer=0, head=0)
    show(qtbot, window, "alti_logit")
    session = window.session
    beam = viewmodel.beam_state(session.results, session.steps)
    sibling = next(node for node in range(len(beam.nodes)) if contrast_view.from_beam_node(
        session.request.id, 0, beam, node=node, result=session.result) is not None)
    graph = window.views.decoding.beam.graph
    label = graph.labels[sibling]
    graph.centerOn(label)
    point = graph.mapFromScene(label.sceneBoundingRect().center())
    qtbot.mouseClick(graph.viewport(), Qt.MouseButton.LeftButton, pos=point)
    contrast = window.contributions.contrast
    assert contrast is not None and contrast.label == beam.nodes[sibling].token
    assert contrast.step == beam.nodes[sibling].depth
    qtbot.waitUntil(lambda: f"− logit(‘{contrast.label}’)" in window.views.focus.title.text(), timeout=WAIT)
    expected = core_maps(window, "alti_logit", contrast.per_step(len(session.result.token_ids)))
    np.testing.assert_allclose(focus_data(window), expected.layers["cross"][0][0], atol=1e-5)


def test_alti_logit_is_drawn_signed_in_the_focus_map_and_the_source_bars(qtbot, window):
    """ALTI-Logit's map on the diverging colormap centred on 0 (the window's colormap back for the weights), the
    colour bar and the source bars' value axis in Δ logit, the bars reaching below 0 where a term is negative."""
    open_demo(qtbot, window, "en-es-transformer")
    run_text(qtbot, window, "The old man gave his grandson a red bicycle.", max_len=16)  # negative terms
    window.select(kind="cross", layer=0, head="rollout", step=0)
    show(qtbot, window, "alti_logit")
    focus, strip = window.views.focus, window.views.decoding.source_strip
    expected = core_maps(window, "alti_logit", None).source
    step = int(np.argmin(expected.min(axis=1)))
    assert expected[step].min() < 0
    window.select(step=step)
    qtbot.waitUntil(lambda: np.allclose(strip.values, expected[step], atol=1e-5), timeout=WAIT)
    low, high = strip.getPlotItem().vb.viewRange()[1]
    assert low < expected[step].min() < 0 < expected[step].max() < high
    assert strip.getPlotItem().getAxis("left").labelText == "Δ logit"
    assert focus.drawn_colormap == "CET-D1" and focus.colorbar.axis.labelText == "Δ logit"
    bound = np.abs(expected[: step + 1] if window.session.options.reveal_rows else expected).max()
    assert tuple(focus.image.getLevels()) == pytest.approx((-bound, bound), rel=1e-5)
    np.testing.assert_array_equal(focus.image.lut, lookup_table("CET-D1"))
    selector = window.views.selector
    assert not selector.colormap.isEnabled() and "signed" in selector.colormap.toolTip()
    assert not selector.colour_range.isEnabled()
    show(qtbot, window, "weights")
    assert focus.drawn_colormap == selector.colormap_name() and selector.colormap.isEnabled()
    assert selector.colour_range.isEnabled() and "0–1 keeps every map" in selector.colour_range.toolTip()
    low, high = strip.getPlotItem().vb.viewRange()[1]
    assert low == pytest.approx(0.0, abs=0.05) and strip.getPlotItem().getAxis("left").labelText == ""


def test_a_click_on_a_sibling_at_another_step_moves_the_step_scrubber_there(qtbot, window):
    open_demo(qtbot, window, "en-es-transformer")
    run_text(qtbot, window, TEXT, mode="beam", beam=3, max_len=12)
    window.select(kind="cross", layer=0, head=0, step=0)
    show(qtbot, window, "alti_logit")
    session = window.session
    beam = viewmodel.beam_state(session.results, session.steps)
    sibling = next(node for node in range(len(beam.nodes)) if beam.nodes[node].depth > 0 and (
        contrast_view.from_beam_node(session.request.id, 0, beam, node=node, result=session.result) is not None))
    depth = beam.nodes[sibling].depth
    window.views.decoding.beam.graph.node_clicked.emit(sibling)
    assert window.contributions.contrast.step == depth
    qtbot.waitUntil(lambda: session.selection.step == depth, timeout=WAIT)
    assert window.views.decoding.controls.slider.value() == depth
    qtbot.waitUntil(lambda: f"− logit(‘{beam.nodes[sibling].token}’)" in window.views.focus.title.text(),
                    timeout=WAIT)
    window.views.decoding.beam.graph.node_clicked.emit(sibling)  # the step shown: it stays
    assert session.selection.step == depth
