"""Pruning curves (models/analysis/importance.py ``prune_curves``, ``attnviz importance --prune-curve``): the score as
heads are switched off cumulatively, least important first, most important first and in a seeded random order."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from models.nn.ablation import Ablation
from models.analysis.steps import drive
from models.analysis.importance import ablation_importance, head_importance
from models.analysis.pruning import prune_curve_steps, prune_curves
from tests.test_cli import assert_one_line_error, cli
from tests.test_importance_batched import PAIRS, forced_nll, tiny_translator


@pytest.mark.parametrize("arch", ["transformer-preln", "gru-transformer-decoder"])
def test_each_point_is_the_nll_with_that_many_heads_off_together(arch):
    """Every copy of a pass switches its own prefix of the order off: each point equals forced decoding with
    those heads off through ``--ablate``, pair by pair."""
    translator = tiny_translator(arch, dtype=torch.float64)
    importance = ablation_importance(translator, PAIRS)
    curves = prune_curves(translator, PAIRS, importance, seed=1, tokens_per_pass=64)  # several passes
    heads = sum(table.size for table in importance.drops.values())
    assert set(curves.curves) == {"increasing", "decreasing", "random"}
    for order, curve in curves.curves.items():
        assert curve.shape == (heads + 1,)
        assert curve[0] == pytest.approx(importance.baseline, abs=1e-9)
        for count in (1, heads // 2, heads):
            expected = forced_nll(translator, PAIRS, Ablation.of(curves.orders[order][:count]))
            assert curve[count] == pytest.approx(expected, abs=1e-6), (order, count)  # decoding: float32 log-probs
    ranked = [(kind, layer, head) for kind, layer, head, _ in importance.ranking()]
    assert curves.orders["decreasing"] == ranked and curves.orders["increasing"] == ranked[::-1]
    assert sorted(curves.orders["random"]) == sorted(ranked)


def test_the_random_order_follows_its_seed():
    translator = tiny_translator("transformer-postln")
    importance = ablation_importance(translator, PAIRS)
    first, again = (prune_curves(translator, PAIRS, importance, seed=5) for _ in range(2))
    other = prune_curves(translator, PAIRS, importance, seed=6)
    assert first.orders["random"] == again.orders["random"] != other.orders["random"]
    np.testing.assert_array_equal(first.curves["random"], again.curves["random"])


def stepped(steps):
    """Every unit a generator yields, and its return value."""
    units = []
    return units, drive(steps, lambda *unit: units.append(unit))


@pytest.mark.parametrize("metric", ["nll", "exact"])
def test_the_steps_form_yields_each_pass_and_returns_the_same_curves(metric):
    """The window steps the curves one unit at a time: a pass (NLL) or a point decoded again (exact match); what
    it returns equals ``prune_curves``, and the units count the points up to every point of the three orders."""
    translator = tiny_translator("gru-transformer-decoder")
    importance = (ablation_importance(translator, PAIRS) if metric == "nll"
                  else head_importance(translator, PAIRS[:3], metric="exact"))
    pairs = PAIRS if metric == "nll" else PAIRS[:3]
    units, stepped_curves = stepped(prune_curve_steps(translator, pairs, importance, seed=2, tokens_per_pass=64))
    driven = prune_curves(translator, pairs, importance, seed=2, tokens_per_pass=64)
    heads = sum(table.size for table in importance.drops.values())
    assert stepped_curves.orders == driven.orders and stepped_curves.metric == metric
    for order in driven.curves:
        np.testing.assert_array_equal(stepped_curves.curves[order], driven.curves[order])
    done = [points for points, _, _ in units]
    assert done == sorted(done) and done[-1] == 3 * (heads + 1) and {total for _, total, _ in units} == {done[-1]}
    assert [order for _, _, order in units][-1] == "random"
    assert len(units) > 3  # more than one unit per order: the window answers runs in between


def test_a_decoded_curve_starts_at_the_importance_baseline_without_a_length_limit():
    """Re-decoded outputs stop where head importance stops them (twice the longest reference plus 10 tokens), so
    the curve's first point is its baseline: decoded to the model's maximum, an untrained model's chrF halves."""
    translator = tiny_translator("gru-scaled-dot")
    importance = head_importance(translator, PAIRS[:3], metric="chrf")
    curves = prune_curves(translator, PAIRS[:3], importance)
    assert importance.baseline > 0
    assert all(curve[0] == importance.baseline for curve in curves.curves.values())


def test_an_output_metric_curve_decodes_at_every_point():
    translator = tiny_translator("gru-scaled-dot")
    importance = head_importance(translator, PAIRS[:3], metric="exact", max_len=8)
    curves = prune_curves(translator, PAIRS[:3], importance, max_len=8)
    assert curves.metric == "exact" and all(curve[0] == importance.baseline for curve in curves.curves.values())


def test_the_cli_prints_writes_and_draws_the_curves(capsys, tmp_path):
    figure = tmp_path / "curve.svg"
    code, out, err = cli(capsys, "importance", "-c", "piglatin-gru-transformer-decoder", "--limit", "4",
                         "--prune-curve", "--json", "-o", figure)
    assert code == 0, err
    document = json.loads(out)["prune_curve"]
    assert document["metric"] == "nll" and document["seed"] == 0
    assert set(document["scores"]) == set(document["orders"]) == {"increasing", "decreasing", "random"}
    assert all(len(scores) == 7 for scores in document["scores"].values())  # 3 layers × (self + cross) + none
    svg = figure.read_text(encoding="utf-8")
    assert svg.count("<polyline") == 3 and "least important first" in svg and "NLL (nats/token)" in svg
    assert f"wrote {figure}" in err
    code, out, _ = cli(capsys, "importance", "-c", "piglatin-gru-transformer-decoder", "--limit", "4",
                       "--prune-curve")
    assert code == 0 and "pruning curves: NLL (nats/token) with the first k heads off" in out
    assert "most important first" in out and "random (seed 0)" in out


def test_a_figure_without_the_curves_is_refused_before_the_model_loads(capsys, tmp_path):
    assert_one_line_error(*cli(capsys, "importance", "-c", "en-es-transformer", "-o", tmp_path / "c.png")[::2],
                          "-o draws the pruning curves: add --prune-curve")
