"""The pruning curve's view-model (attnviz/state/prune_view.py, no Qt, no torch): the lines, axis titles, key and
readout the Head importance panel draws, and the figure its export writes."""

from __future__ import annotations

import numpy as np

from attnviz.state.prune_view import curve_readout, prune_curve_figure, prune_curve_state
from models.analysis.pruning import PruneCurves

CURVES = PruneCurves(metric="nll", seed=7, seconds=1.25,
                     curves={"increasing": np.array([0.5, 0.6, 0.9]), "decreasing": np.array([0.5, 2.0, 3.0]),
                             "random": np.array([0.5, 1.1, 3.0])})


def test_the_state_has_one_line_per_order_over_every_count_of_heads_off():
    state = prune_curve_state(CURVES)
    assert [line.order for line in state.lines] == ["increasing", "decreasing", "random"]
    assert [line.label for line in state.lines] == ["least important first", "most important first",
                                                    "random order (seed 7)"]
    np.testing.assert_array_equal(state.lines[1].scores, CURVES.curves["decreasing"])
    assert state.heads == 2 and (state.x_title, state.y_title) == ("heads switched off", "NLL (nats/token)")
    assert state.summary == "Lower is better; the 2 heads switched off one by one (1.2 s)."
    chrf = prune_curve_state(PruneCurves(metric="chrf", seed=0, curves={"increasing": np.array([50.0, 40.0])}))
    assert chrf.y_title == "chrF" and chrf.summary.startswith("Higher is better")


def test_the_readout_gives_each_orders_score_at_the_nearest_count_within_the_curve():
    state = prune_curve_state(CURVES)
    key = curve_readout(state)
    assert key.heading == "NLL (nats/token):" and [score for _, _, score in key.entries] == ["", "", ""]
    assert [colour for colour, _, _ in key.entries] == ["#1f77b4", "#d62728", "#7f7f7f"]
    readout = curve_readout(state, 1.4)
    assert readout.heading == "1 of 2 heads off, NLL (nats/token):"
    assert [(label, score) for _, label, score in readout.entries] == [
        ("least important first", "0.6"), ("most important first", "2"), ("random order (seed 7)", "1.1")]
    assert curve_readout(state, 9.0).heading.startswith("2 of 2")
    assert curve_readout(state, -3).heading.startswith("0 of 2")


def test_the_figure_is_the_clis_titled_with_the_model_and_seed():
    svg = prune_curve_figure(prune_curve_state(CURVES), model="en-es-transformer")
    assert svg.count("<polyline") == 3 and "NLL (nats/token)" in svg and "least important first" in svg
    assert "Heads switched off cumulatively: en-es-transformer (random order: seed 7)" in svg
    assert "<title>2 off: 3</title>" in svg  # every point keeps its value as a tooltip
