"""The Neuron pane's state (attnviz/state/neuron_view.py, no Qt): for a head and a query row, the columns on the way
from q·k to the softmax, as the formula written out here computes them, on real models: the en-es demo (plain
1/√D), T5 (scale 1 and the relative bias) and Gemma 2 (rotated vectors, its own query scale, soft-capping)."""

from __future__ import annotations

import os

import numpy as np
import pytest

from attnviz.state.neuron_view import CHOOSE_A_HEAD, neuron_state
from attnviz.state.session import Selection
from models.analysis.neuron import neuron_vectors
from models.storage.checkpoint import load_checkpoint
from models.trace.records import AttentionTrace

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def trace_of(vectors, src_tokens: list[str], tgt_tokens: list[str]) -> AttentionTrace:
    attention = {kind: [layer.weights for layer in layers] for kind, layers in vectors.layers.items()}
    masks = {kind: layers[0].mask for kind, layers in vectors.layers.items()}
    return AttentionTrace(src_tokens, tgt_tokens, attention=attention, masks=masks)


def softmax(scores: np.ndarray, allowed: np.ndarray) -> np.ndarray:
    exp = np.where(allowed, np.exp(scores - scores[allowed].max()), 0.0)
    return exp / exp.sum()


def test_the_demos_columns_are_q_dot_k_its_scaled_score_and_the_softmax():
    model = load_checkpoint("resources/checkpoints/en-es-transformer.safetensors").model
    src, output = [5, 9, 12, 7, 20, 3], [8, 14, 6, 30, 2]
    vectors = neuron_vectors(model, src, output)
    trace = trace_of(vectors, [f"s{i}" for i in range(6)], [f"t{i}" for i in range(5)])
    state = neuron_state(vectors, trace, Selection(kind="dec_self", layer=1, head=3), query_row=2)
    q, k = vectors.layers["dec_self"][1].query[3, 2], vectors.layers["dec_self"][1].key[3]
    columns = {column.name: column.values for column in state.columns}
    assert list(columns) == ["q·k", "× scale", "softmax"] and state.query_label == "t2"
    np.testing.assert_allclose(columns["q·k"], k @ q, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(state.products.sum(axis=1), k @ q, rtol=1e-5, atol=1e-5)
    assert state.allowed.tolist() == [True, True, True, False, False]
    np.testing.assert_allclose(columns["softmax"], softmax(columns["× scale"], state.allowed), atol=1e-6)
    assert "1/√64" in state.notes[0] and not state.rotated
    assert neuron_state(vectors, trace, Selection(kind="dec_self", layer=1, head="mean"), query_row=2) == \
        CHOOSE_A_HEAD.format(head="mean of heads")
    assert neuron_state(vectors, trace, Selection(kind="cross", layer=9, head=0), query_row=0).startswith(
        "The neuron view has no cross-attention layer 9")


def test_t5_shows_its_scale_of_one_and_adds_its_relative_bias(tmp_path):
    pytest.importorskip("transformers")
    from models.importers import convert
    from tests import test_import_t5

    folder, _, _ = test_import_t5.build(tmp_path, "v1.0")
    vectors = neuron_vectors(convert(folder).model, [5, 9, 12, 7, 20, 1], [8, 14, 6, 1])
    trace = trace_of(vectors, [f"s{i}" for i in range(6)], [f"t{i}" for i in range(4)])
    state = neuron_state(vectors, trace, Selection(kind="enc_self", layer=0, head=1), query_row=4)
    columns = {column.name: column.values for column in state.columns}
    assert list(columns) == ["q·k", "× scale", "+ bias", "score", "softmax"]
    np.testing.assert_allclose(columns["× scale"], columns["q·k"])  # T5 does not scale
    np.testing.assert_allclose(columns["+ bias"], vectors.layers["enc_self"][0].bias[1, 4])
    np.testing.assert_allclose(columns["score"], columns["q·k"] + columns["+ bias"], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(columns["softmax"], softmax(columns["score"], state.allowed), atol=1e-5)
    assert any("bias" in note for note in state.notes) and "not 1/√4" in state.notes[0]


def test_gemma2_shows_rotated_vectors_and_its_soft_cap(tmp_path):
    pytest.importorskip("transformers")
    from models.importers import convert
    from tests import test_decoder_only

    test_decoder_only.build(tmp_path, "gemma2")
    prompt = test_decoder_only.encode(tmp_path, test_decoder_only.SENTENCES[0])
    vectors = neuron_vectors(convert(tmp_path).model, prompt, [5, 6, 7])
    n = len(prompt) + 2
    trace = trace_of(vectors, [], [f"p{i}" for i in range(n)])
    state = neuron_state(vectors, trace, Selection(kind="dec_self", layer=0, head=2), query_row=n - 1)
    columns = {column.name: column.values for column in state.columns}
    assert list(columns) == ["q·k", "× scale", "soft-cap", "score", "softmax"]
    np.testing.assert_allclose(columns["× scale"], columns["q·k"] / 4.0, rtol=1e-6)  # 1/√query_pre_attn_scalar
    np.testing.assert_allclose(columns["soft-cap"], 2.0 * np.tanh(columns["× scale"] / 2.0), rtol=1e-6)
    assert state.allowed.sum() == 4  # layer 0 is local: a window of 4
    np.testing.assert_allclose(columns["softmax"], softmax(columns["soft-cap"], state.allowed), atol=1e-5)
    assert state.rotated and "rotated" in state.title and state.notes[0].startswith("q and k rotated")
    assert any("2·tanh(s / 2)" in note for note in state.notes)
