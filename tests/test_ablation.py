"""Head ablation (models/nn/ablation.py): specs, validation, and zeroed head outputs in every decoding path.

An ablated head's output must equal what the same model computes with that head's value projection zeroed
(its weights · 0 = 0), and a GRU decoder whose attention is off must equal the same decoder whose cell
ignores the context; switching nothing off must be bit-identical to not passing an ablation.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from models import ARCHS
from models.nn.ablation import Ablation, AblationError
from models.storage.checkpoint import load_checkpoint
from models.nn.config import TRANSFORMER_ARCHS
from models.inference.decoding import Capture, beam_search, finish, forced, forced_step_by_step, greedy, run
from models.inference.translator import Translator
from attnviz.state.demos import demo_path
from tests.test_decoding import EOS, LABELS, MAX_LEN, SOURCE, eos_ending_model, tiny_model

ATTENTION_ARCHS = [arch for arch in ARCHS if arch != "gru-none"]


def _zero_values(model, kind: str, layer: int, head: int):
    """A copy of ``model`` whose ``kind`` layer ``layer`` head ``head`` reads zero values."""
    model = copy.deepcopy(model)
    if model.__class__.__name__ == "TransformerSeq2Seq":
        block = model.encoder_layers[layer] if kind == "enc_self" else model.decoder_layers[layer]
        sublayer = block.self_attention if kind != "cross" else block.cross_attention
        attention = sublayer.attention
    elif model.transformer_decoder:
        block = model.decoder.layers[layer]
        attention = block.self_attention if kind == "dec_self" else block.encoder_attention
    elif model.config.arch == "rnn-luong":  # the attentional layer's context columns are zeroed instead
        with torch.no_grad():
            model.decoder.combine.weight[:, :model.config.hidden] = 0.0
        return model
    else:  # recurrent decoder: the cell's context columns are zeroed instead
        with torch.no_grad():
            model.decoder.cell.weight_ih[:, model.config.hidden:] = 0.0
        return model
    size = attention.head_dim
    with torch.no_grad():
        attention.value.weight[head * size:(head + 1) * size] = 0.0
        if attention.value.bias is not None:
            attention.value.bias[head * size:(head + 1) * size] = 0.0
    return model


def _logits(model, ablation=None):
    target = [4, 5, 6, 7, EOS]
    tgt_in = torch.tensor([[2] + target[:-1]])
    extra = {} if ablation is None else {"ablation": ablation}
    with torch.no_grad():
        logits, inter = model(torch.tensor([SOURCE]), tgt_in, need_weights=True, **extra)
    return logits, inter


# ---------------------------------------------------------------------------------------------------
# specs and validation


def test_specs_parse_and_print_back():
    ablation = Ablation.parse(["cross:1:0", "enc_self:0:*", " dec_self : 2 : 3 "])
    assert ablation.entries == {("cross", 1, 0), ("enc_self", 0, None), ("dec_self", 2, 3)}
    assert ablation.specs() == ["enc_self:0:*", "dec_self:2:3", "cross:1:0"]
    assert Ablation.parse(ablation.specs()) == ablation
    assert ablation.heads_off("enc_self", 0, 4) == (0, 1, 2, 3)
    assert ablation.heads_off("cross", 1, 4) == (0,)
    assert ablation.heads_off("cross", 0, 4) == ()
    assert not Ablation() and ablation


@pytest.mark.parametrize("spec, words", [
    ("cross", "must be KIND:LAYER:HEAD"),
    ("cross:0", "must be KIND:LAYER:HEAD"),
    ("encoder:0:1", "the kind must be one of enc_self, dec_self, cross"),
    ("cross:x:1", "the layer must be a number"),
    ("cross:-1:1", "the layer must be a number"),
    ("cross:0:all", "the head must be a number from 0 or *"),
])
def test_bad_specs_are_one_line(spec, words):
    with pytest.raises(AblationError) as failure:
        Ablation.parse([spec])
    assert words in str(failure.value) and "\n" not in str(failure.value)


@pytest.mark.parametrize("spec, words", [
    ("cross:0:2", "cross layer 0 has heads 0 to 1"),
    ("dec_self:2:0", "dec_self has layers 0 to 1"),
    ("enc_self:5:*", "enc_self has layers 0 to 1"),
])
def test_heads_a_transformer_lacks_are_named_with_what_exists(spec, words):
    with pytest.raises(AblationError, match=words):
        Ablation.parse([spec]).validate(tiny_model("transformer-preln").attention_shape())


def test_an_unknown_kind_from_python_is_named_too():
    with pytest.raises(AblationError, match="no encoder attention \\(it has enc_self, dec_self, cross\\)"):
        Ablation.of([("encoder", 0, 0), ("cross", 0, 0)]).validate(tiny_model("transformer-preln").attention_shape())


def test_a_gru_has_one_cross_head_and_no_attention_means_nothing_to_ablate():
    with pytest.raises(AblationError, match="no enc_self attention \\(it has cross\\)"):
        Ablation.parse(["enc_self:0:0"]).validate(tiny_model("gru-additive").attention_shape())
    with pytest.raises(AblationError, match="cross layer 0 has heads 0 to 0"):
        Ablation.parse(["cross:0:1"]).validate(tiny_model("gru-scaled-dot").attention_shape())
    with pytest.raises(AblationError, match="this model has no attention heads to switch off"):
        list(greedy(tiny_model("gru-none"), SOURCE, Capture(**LABELS, ablation=Ablation.parse(["cross:0:0"]))))


def test_toggling_spells_a_whole_layer_out():
    shape = {"cross": (2, 3)}
    ablation = Ablation.parse(["cross:1:*"]).toggled("cross", 1, 2, shape)
    assert ablation.heads(shape) == (("cross", 1, 0), ("cross", 1, 1))
    assert ablation.toggled("cross", 1, 2, shape).heads(shape) == (("cross", 1, 0), ("cross", 1, 1), ("cross", 1, 2))
    assert ablation.with_layer("cross", 0, True, shape).heads(shape)[:3] == (("cross", 0, 0), ("cross", 0, 1),
                                                                            ("cross", 0, 2))
    assert not ablation.with_layer("cross", 1, False, shape)


# ---------------------------------------------------------------------------------------------------
# what switching off computes


@pytest.mark.parametrize("arch", ARCHS)
def test_ablating_nothing_is_bit_identical(arch):
    model, _ = eos_ending_model(arch)
    plain, plain_inter = _logits(model)
    none, none_inter = _logits(model, Ablation())
    assert torch.equal(plain, none)
    for kind, layers in plain_inter.attention.items():
        for a, b in zip(layers, none_inter.attention[kind]):
            assert torch.equal(a, b)
    for decode in (greedy, beam_search):
        (a,) = finish(decode(model, SOURCE, Capture(**LABELS, max_len=MAX_LEN)))[:1]
        (b,) = finish(decode(model, SOURCE, Capture(**LABELS, max_len=MAX_LEN, ablation=Ablation())))[:1]
        assert a.token_ids == b.token_ids and a.log_prob == b.log_prob and b.trace.ablated == ()
        for kind in a.trace.attention:
            for x, y in zip(a.trace.attention[kind], b.trace.attention[kind]):
                assert np.array_equal(x, y)


@pytest.mark.parametrize("arch", ATTENTION_ARCHS)
def test_an_ablated_head_outputs_zero(arch):
    """Switching head h off equals zeroing what head h reads (its values; for a GRU cell, the context)."""
    model = tiny_model(arch, seed=3)
    shape = model.attention_shape()
    kind = "cross"
    layer, head = shape[kind][0] - 1, shape[kind][1] - 1
    ablated, inter = _logits(model, Ablation.of([(kind, layer, head)]))
    reference, reference_inter = _logits(_zero_values(model, kind, layer, head))
    torch.testing.assert_close(ablated, reference, atol=1e-5, rtol=0)
    assert not torch.allclose(ablated, _logits(model)[0], atol=1e-4)
    # the trace keeps the weights the head computed: the same as the zero-value model's
    torch.testing.assert_close(inter.attention[kind][layer], reference_inter.attention[kind][layer])


@pytest.mark.parametrize("arch", TRANSFORMER_ARCHS)
@pytest.mark.parametrize("kind", ["enc_self", "dec_self"])
def test_self_attention_heads_of_a_transformer_switch_off_too(arch, kind):
    model = tiny_model(arch, seed=4)
    ablated, _ = _logits(model, Ablation.of([(kind, 0, 1)]))
    torch.testing.assert_close(ablated, _logits(_zero_values(model, kind, 0, 1))[0], atol=1e-5, rtol=0)


@pytest.mark.parametrize("arch", ATTENTION_ARCHS)
def test_every_decoding_path_applies_the_ablation(arch):
    """Cached greedy, recomputed greedy, beam of one, one-pass forced and step-by-step forced agree."""
    model = tiny_model(arch, seed=5)
    kind = "cross"
    ablation = Ablation.of([(kind, 0, None)])
    cached = finish(greedy(model, SOURCE, Capture(**LABELS, max_len=MAX_LEN, ablation=ablation)))[0]
    recomputed = finish(greedy(model, SOURCE,
                               Capture(**LABELS, max_len=MAX_LEN, ablation=ablation, use_cache=False)))[0]
    beam = finish(beam_search(model, SOURCE, Capture(**LABELS, max_len=MAX_LEN, ablation=ablation), beam=1))[0]
    target = cached.token_ids[:-1] if cached.token_ids[-1] == EOS else cached.token_ids
    one_pass = finish(forced(model, SOURCE, target, Capture(**LABELS, ablation=ablation)))[0]
    stepwise = finish(forced_step_by_step(model, SOURCE, target, Capture(**LABELS, ablation=ablation)))[0]
    plain = finish(greedy(model, SOURCE, Capture(**LABELS, max_len=MAX_LEN)))[0]
    assert cached.token_ids == recomputed.token_ids == beam.token_ids
    assert abs(cached.log_prob - recomputed.log_prob) < 1e-4 and abs(cached.log_prob - beam.log_prob) < 1e-4
    heads = model.attention_shape()[kind][1]
    for result in (cached, recomputed, beam, one_pass, stepwise):
        assert result.trace.ablated == tuple((kind, 0, head) for head in range(heads))
        assert result.trace.is_ablated(kind, 0, 0) and not result.trace.is_ablated(kind, 0, heads)
    np.testing.assert_allclose(one_pass.trace.attention[kind][0], stepwise.trace.attention[kind][0], atol=1e-5)
    steps, _ = run(forced(model, SOURCE, target, Capture(**LABELS, ablation=ablation)))
    unablated, _ = run(forced(model, SOURCE, target, Capture(**LABELS)))
    probabilities = [step.probability for step in steps]
    assert probabilities != [step.probability for step in unablated]
    assert (cached.token_ids, cached.log_prob) != (plain.token_ids, plain.log_prob)


# ---------------------------------------------------------------------------------------------------
# trained demo models


@pytest.mark.parametrize("demo, text, specs", [
    ("piglatin-gru-transformer-decoder", "strength through joy", ["cross:0:*"]),
    ("piglatin-gru-scaled-dot", "impress", ["cross:0:0"]),
    ("en-es-transformer", "The Lord is my shepherd.", ["cross:0:*", "cross:1:*", "cross:2:*"]),
])
def test_switching_off_a_layers_cross_heads_changes_a_trained_models_output(demo, text, specs):
    translator = Translator(load_checkpoint(demo_path(demo)), "cpu")
    plain = translator.translate(text, need_weights=True)
    ablated = translator.translate(text, need_weights=True, ablation=Ablation.parse(specs))
    assert ablated.text != plain.text
    assert ablated.trace.ablated and plain.trace.ablated == ()
    again = translator.translate(text, need_weights=True, ablation=Ablation())
    assert again.text == plain.text and again.log_prob == plain.log_prob


def test_the_translator_checks_an_ablation_before_decoding():
    translator = Translator(load_checkpoint(demo_path("piglatin-gru-no-attention")), "cpu")
    with pytest.raises(AblationError, match="no attention heads to switch off"):
        translator.decode(translator.source("impress"), ablation=Ablation.parse(["cross:0:0"]))
