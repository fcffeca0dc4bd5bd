"""The neuron view's numbers (models/analysis/neuron.py): the query and key vectors, scale, bias, soft-cap and mask of
every head reproduce its attention weights, as the formula written out here computes them, for every Transformer
family: the bundled demos, and random-weight models built by transformers itself (GPT-2, Llama with rotary positions
and grouped-query attention, Mistral's sliding window, Qwen3's q/k norms, Gemma 2's soft-capping and query scale,
BERT, RoBERTa, DistilBERT, T5 v1.0 and v1.1 with their relative position bias), compared with transformers' own
weights."""

from __future__ import annotations

import math
import os

import numpy as np
import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
transformers = pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

from models.analysis.neuron import NOT_TRANSFORMER, NeuronError, neuron_vectors  # noqa: E402
from models.importers import convert  # noqa: E402
from models.storage.checkpoint import load_checkpoint  # noqa: E402
from tests import test_decoder_only, test_encoder_only, test_import_t5  # noqa: E402

DEMOS = "resources/checkpoints"
TOLERANCE = 1e-5


def formula(layer, head: int) -> np.ndarray:
    """softmax(q·kᵀ·scale, capped as c·tanh(s/c) where the model soft-caps, plus the bias, over the allowed keys)."""
    q = torch.from_numpy(layer.query[head]).double()
    k = torch.from_numpy(layer.key[head]).double()
    scale = torch.as_tensor(np.asarray(layer.scale, np.float64))
    scores = (q @ k.T) * (scale if scale.dim() == 0 else scale[head])
    if layer.softcap:
        scores = layer.softcap * torch.tanh(scores / layer.softcap)
    if layer.bias is not None:
        scores = scores + torch.from_numpy(layer.bias[head]).double()
    scores = scores.masked_fill(~torch.from_numpy(layer.mask), float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    return torch.nan_to_num(weights, nan=0.0).numpy()


def assert_reproduces(vectors, expected: dict[str, list[np.ndarray]]) -> None:
    """Every head of every layer: the formula equals ``expected`` (and the weights the model computed)."""
    assert set(vectors.layers) == set(expected)
    for kind, layers in vectors.layers.items():
        assert len(layers) == len(expected[kind])
        for index, layer in enumerate(layers):
            heads = layer.query.shape[0]
            assert layer.key.shape[0] == heads and layer.key.shape[-1] == layer.query.shape[-1]
            for head in range(heads):
                got = formula(layer, head)
                assert np.abs(got - expected[kind][index][head]).max() < TOLERANCE, (kind, index, head)
                assert np.abs(got - layer.weights[head]).max() < TOLERANCE
            assert np.abs(layer.reproduced() - expected[kind][index]).max() < TOLERANCE


@pytest.mark.parametrize("name", ["en-es-transformer", "en-es-transformer-postln", "piglatin-decoder-only"])
def test_the_demos_vectors_reproduce_their_weights(name):
    model = load_checkpoint(f"{DEMOS}/{name}.safetensors").model
    src, output = [5, 9, 12, 7, 20, 3], [8, 14, 6, 30, 2]
    vectors = neuron_vectors(model, src, output)
    with torch.no_grad():
        if name == "piglatin-decoder-only":
            _, intermediates = model(torch.zeros(1, 0, dtype=torch.long), torch.tensor([src + output[:-1]]),
                                     need_weights=True)
        else:
            tgt_in = torch.tensor([[model.config.bos_id] + output[:-1]])
            _, intermediates = model(torch.tensor([src]), tgt_in, need_weights=True)
    expected = {kind: [w[0].numpy() for w in layers] for kind, layers in intermediates.attention.items()}
    assert_reproduces(vectors, expected)
    first = next(iter(vectors.layers.values()))[0]
    assert first.plain_scale and first.bias is None and not first.softcap


def test_a_gru_model_has_no_neuron_view_and_says_why():
    model = load_checkpoint(f"{DEMOS}/piglatin-gru-scaled-dot.safetensors").model
    with pytest.raises(NeuronError) as raised:
        neuron_vectors(model, [5, 6, 7], [8, 9])
    assert str(raised.value) == NOT_TRANSFORMER and "\n" not in NOT_TRANSFORMER


@pytest.fixture(scope="module", params=["gpt2", "llama", "mistral", "qwen3", "gemma2"])
def decoder_lm(request, tmp_path_factory):
    folder = tmp_path_factory.mktemp(request.param) / "model"
    original = test_decoder_only.build(folder, request.param)
    return request.param, original, convert(folder).model, folder


def test_decoder_only_vectors_reproduce_transformers_weights(decoder_lm):
    family, original, model, folder = decoder_lm
    prompt = test_decoder_only.encode(folder, test_decoder_only.SENTENCES[0])
    output = test_decoder_only.encode(folder, test_decoder_only.SENTENCES[2])[:6]
    sequence = prompt + output[:-1]
    assert len(sequence) > 5  # past Mistral's and Gemma 2's windows
    vectors = neuron_vectors(model, prompt, output)
    expected = test_decoder_only.theirs(original, sequence).attentions
    assert_reproduces(vectors, {"dec_self": [w[0].numpy() for w in expected]})
    layer = vectors.layers["dec_self"][0]
    assert vectors.rotated == (family != "gpt2") == layer.rotated
    assert layer.query.shape == (4, len(sequence), model.config.head_dim)
    if family == "gemma2":
        assert layer.softcap == 2.0 and not layer.plain_scale and math.isclose(layer.scale, 16 ** -0.5)
        assert not vectors.layers["dec_self"][0].mask[-1, 0]  # the sliding window of the local layers
    if family in ("llama", "qwen3"):  # grouped queries: each key head serves its group's query heads
        group = 4 // model.config.key_value_heads
        assert np.array_equal(layer.key[0], layer.key[group - 1])


@pytest.mark.parametrize("family", ["bert", "roberta", "distilbert"])
def test_encoder_only_vectors_reproduce_transformers_weights(family, tmp_path):
    original = test_encoder_only.build(tmp_path, family)
    model = convert(tmp_path).model
    ids = test_encoder_only.encode(tmp_path, "the capital of france is paris .")
    vectors = neuron_vectors(model, ids)
    expected = test_encoder_only.theirs(original, torch.tensor([ids]), model.pad_id).attentions
    assert_reproduces(vectors, {"enc_self": [w[0].numpy() for w in expected]})


@pytest.mark.parametrize("version", ["v1.0", "v1.1"])
def test_t5_vectors_with_the_relative_bias_reproduce_transformers_weights(version, tmp_path):
    folder, original, processor = test_import_t5.build(tmp_path, version)
    model = convert(folder).model
    src = test_import_t5.source_ids(version, folder, processor, " ".join(test_import_t5.SENTENCES[:3]))
    output = [5, 9, 12, 7, 20, 3, 11, 4, 1]
    vectors = neuron_vectors(model, src, output)
    tgt_in = torch.tensor([[model.config.bos_id] + output[:-1]])
    with torch.no_grad():
        theirs = original(input_ids=torch.tensor([src]), decoder_input_ids=tgt_in, output_attentions=True)
    expected = {"enc_self": theirs.encoder_attentions, "dec_self": theirs.decoder_attentions,
                "cross": theirs.cross_attentions}
    assert_reproduces(vectors, {kind: [w[0].numpy() for w in layers] for kind, layers in expected.items()})
    for kind in ("enc_self", "dec_self"):
        layer = vectors.layers[kind][0]
        assert layer.bias is not None and layer.scale == 1.0 and not layer.plain_scale
    assert vectors.layers["cross"][0].bias is None
    arrays = vectors.arrays()
    assert arrays["bias_enc_self_L0"].shape == arrays["scale_enc_self_L0"].shape == (4, len(src), len(src))
    assert "bias_cross_L0" not in arrays
    assert arrays["query_dec_self_L1"].shape == (4, len(output), model.config.head_dim_of("decoder"))
