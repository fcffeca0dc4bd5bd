"""Value zeroing (models/analysis/contributions.py) where zeroing a value changes a layer's output by rounding
alone: such a row is 0 and says so (``rounding_rows``), whatever order the BLAS adds in. A BLAS that adds a
batch in another order than one sentence is played by a hook on the real layer that moves each batched output
by a few units of float32 rounding in a direction of its own (the size of the change float32 can make)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from models.analysis.contributions import ROUNDING_UNITS, value_zeroing
from models.inference.translator import Translator
from models.nn.ablation import Ablation
from models.storage.checkpoint import load_checkpoint

TEXT = "The cat sits on the mat."
EPS = torch.finfo(torch.float32).eps


@pytest.fixture(scope="module")
def demo():
    translator = Translator(load_checkpoint("resources/checkpoints/en-es-transformer.safetensors"), "cpu")
    ablation = Ablation.parse(["enc_self:0:*"])  # no head of the first encoder layer on
    source = translator.source(TEXT).ids
    return translator, source, translator.translate(TEXT, ablation=ablation).token_ids, ablation


def moved_when_batched(layer: torch.nn.Module, units: float):
    """A hook on ``layer`` that moves each output of a batched run (more than one copy) by ``units`` ε of its
    norm, per copy and query, in a seeded random direction: what adding in another order can do."""
    generator = torch.Generator().manual_seed(5)

    def hook(_module, _inputs, output):
        hidden = output[0]
        if hidden.shape[0] == 1:
            return output
        direction = torch.randn(hidden.shape, generator=generator)
        direction = direction / direction.norm(dim=-1, keepdim=True)
        return (hidden + units * EPS * hidden.norm(dim=-1, keepdim=True) * direction, *output[1:])

    return layer.register_forward_hook(hook)


def test_a_row_changed_by_rounding_alone_is_zero_and_says_so(demo):
    translator, source, out, ablation = demo
    model = translator.model
    handle = moved_when_batched(model.encoder_layers[0], units=2)
    try:
        zeroed = value_zeroing(model, source, out, ablation=ablation)
    finally:
        handle.remove()
    assert not zeroed.layers["enc_self"][0].any()  # not rounding noise normalised into shares of 1/S
    assert zeroed.rounding_rows["enc_self"][0].all()
    assert zeroed.layers["enc_self"][1].any() and not zeroed.rounding_rows["enc_self"][1].any()


def test_a_change_beyond_rounding_is_kept(demo):
    """Past the stated tolerance (ROUNDING_UNITS ε of the output's norm) a change is the layer's own, and the
    row is its normalised shares."""
    translator, source, out, ablation = demo
    model = translator.model
    handle = moved_when_batched(model.encoder_layers[0], units=4 * ROUNDING_UNITS)
    try:
        zeroed = value_zeroing(model, source, out, ablation=ablation)
    finally:
        handle.remove()
    assert not zeroed.rounding_rows["enc_self"][0].any()
    assert np.abs(zeroed.layers["enc_self"][0].sum(axis=1) - 1).max() < 1e-5


def test_every_head_on_no_row_is_at_rounding_level(demo):
    translator, source, out, _ = demo
    zeroed = value_zeroing(translator.model, source, out)
    for kind, rows in zeroed.rounding_rows.items():
        assert len(rows) == len(zeroed.layers[kind]) and not any(row.any() for row in rows), kind
        assert all(np.abs(shares.sum(axis=1) - 1).max() < 1e-5 for shares in zeroed.layers[kind]), kind


def test_the_window_says_which_rows_are_zero_for_rounding(demo):
    from attnviz.state import contributions as shown
    from attnviz.state.session import Selection
    from models.analysis.contributions import CONTRIBUTION_METHODS

    translator, source, out, ablation = demo
    result = translator.translate(TEXT, ablation=ablation, need_weights=True)
    zeroed = value_zeroing(translator.model, source, out, ablation=ablation)
    choice = shown.show_choice(CONTRIBUTION_METHODS["value_zeroing"])
    state = shown.contribution_heatmap(result.trace, zeroed, Selection(kind="enc_self", layer=0), choice=choice)
    assert not state.matrix.any() and "every row 0: changed by rounding alone" in state.title
    other = shown.contribution_heatmap(result.trace, zeroed, Selection(kind="enc_self", layer=1), choice=choice)
    assert "rounding" not in other.title
