"""Gradient head importance (models/analysis/importance.py): −∂L/∂ξ of the pooled reference NLL equals central
differences on the head gate (float64, tiny random models), Michel et al.'s E|∂L/∂ξ| takes the absolute
value per sentence, and no weight changes or keeps a gradient."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from models.nn.ablation import HeadGates
from models.storage.checkpoint import load_checkpoint
from models.analysis.importance import (
    ablation_importance, encode_references, forced_batches, gradient_importance, token_nll,
)
from models.inference.translator import Translator
from attnviz.state.demos import demo_path, demo_reference_pairs
from tests.test_importance_batched import HEADED_ARCHS, PAIRS, tiny_translator

STEP = 1e-5


def pooled_nll(translator, pairs, gates: dict) -> float:
    """L with every head of ``gates``' layers scaled by its gate ``[1, heads]`` (float64, no gradient)."""
    encoded, _ = encode_references(translator, pairs)
    total = tokens = 0.0
    with torch.no_grad():
        for batch in forced_batches(translator, encoded):
            total += float(token_nll(translator, batch, HeadGates(gates)).sum())
            tokens += int(batch.scored.sum())
    return total / tokens


def central_difference(translator, pairs, head) -> float:
    kind, layer, index = head
    heads = translator.model.attention_shape()[kind][1]
    values = []
    for sign in (1, -1):
        gate = torch.ones(1, heads, dtype=torch.float64)
        gate[0, index] += sign * STEP
        values.append(pooled_nll(translator, pairs, {(kind, layer): gate}))
    return (values[0] - values[1]) / (2 * STEP)


@pytest.mark.parametrize("arch", HEADED_ARCHS)
def test_the_gradient_equals_central_differences_on_the_gate(arch):
    translator = tiny_translator(arch, dtype=torch.float64)
    importance = gradient_importance(translator, PAIRS, tokens_per_pass=40)  # several batches of pairs
    assert importance.method == "gradient" and importance.metric == "nll"
    assert importance.baseline == pytest.approx(pooled_nll(translator, PAIRS, {}), abs=1e-12)
    for kind, table in importance.gradients.items():
        for (layer, head), gradient in np.ndenumerate(table):
            expected = central_difference(translator, PAIRS, (kind, layer, head))
            assert gradient == pytest.approx(expected, rel=1e-6, abs=1e-9), (kind, layer, head)
        np.testing.assert_allclose(importance.drops[kind], -table)  # the first-order NLL rise with the head off
    assert max(np.abs(table).max() for table in importance.gradients.values()) > 1e-3


def test_michels_importance_takes_the_absolute_value_per_sentence():
    translator = tiny_translator("transformer-preln", dtype=torch.float64)
    pooled = gradient_importance(translator, PAIRS)
    sentences = [gradient_importance(translator, [pair]) for pair in PAIRS]
    tokens = [len(reference) + 1 for _, reference in PAIRS]  # characters and the end token
    for kind, table in pooled.magnitudes.items():
        # one sentence: |∂L/∂ξ|; a corpus: each sentence's |∂(summed NLL)/∂ξ|, pooled over the tokens like L
        np.testing.assert_allclose(sentences[0].magnitudes[kind], np.abs(sentences[0].gradients[kind]), rtol=1e-12)
        expected = sum(count * np.abs(one.gradients[kind]) for count, one in zip(tokens, sentences)) / sum(tokens)
        np.testing.assert_allclose(table, expected, rtol=1e-9)
        assert (table >= np.abs(pooled.gradients[kind]) - 1e-12).all()
        norms = np.linalg.norm(pooled.normalized()[kind], axis=1)
        np.testing.assert_allclose(norms, 1.0)


def test_a_caller_in_inference_mode_gets_the_same_gradients():
    translator = tiny_translator("transformer-postln", dtype=torch.float64)
    expected = gradient_importance(translator, PAIRS)
    with torch.inference_mode():
        inside = gradient_importance(translator, PAIRS)
    for kind, table in expected.gradients.items():
        np.testing.assert_allclose(inside.gradients[kind], table, rtol=1e-12)


def test_no_weight_changes_or_keeps_a_gradient():
    translator = tiny_translator("gru-transformer-decoder")
    before = {name: parameter.detach().clone() for name, parameter in translator.model.named_parameters()}
    flags = {name: parameter.requires_grad for name, parameter in translator.model.named_parameters()}
    gradient_importance(translator, PAIRS)
    for name, parameter in translator.model.named_parameters():
        assert parameter.grad is None and parameter.requires_grad == flags[name]
        assert torch.equal(parameter, before[name])


def test_the_gradient_estimate_agrees_in_sign_with_ablation_on_large_heads():
    """The en-es demo's cross-attention, where switching a head off costs most: the first-order estimate
    points the same way."""
    translator = Translator(load_checkpoint(demo_path("en-es-transformer")), "cpu")
    pairs = demo_reference_pairs(demo_path("en-es-transformer"))[:8]
    ablated = ablation_importance(translator, pairs, kinds=["cross"]).drops["cross"]
    estimated = gradient_importance(translator, pairs, kinds=["cross"]).drops["cross"]
    largest = ablated > 0.04
    assert largest.sum() >= 3 and (estimated[largest] > 0).all()
