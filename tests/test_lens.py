"""The logit lens and DecoderLens (models/analysis/lens.py) against their definitions written out here: the residual
stream after each layer through the final norm and the output projection (nostalgebraist 2020), and the decoder
reading each encoder layer's output through the encoder's final norm (Langedijk et al. 2023); at the last layer both
are the model itself. On the bundled demos, a tiny random model, and models transformers itself built (BART with its
final_logits_bias, Gemma 2 with its final logit soft-capping), whose own modules give the reference."""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
transformers = pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

from models.analysis import catalogue  # noqa: E402
from models.analysis.contributions import capture_forward  # noqa: E402
from models.analysis.lens import (  # noqa: E402
    NO_DECODER, NO_ENCODER, NOT_TRANSFORMER, LensError, decoder_lens, logit_lens,
)
from models.importers import convert  # noqa: E402
from models.inference.decoding import Capture, finish, greedy  # noqa: E402
from models.inference.translator import Translator  # noqa: E402
from models.nn.build import build_model  # noqa: E402
from models.nn.masks import target_mask  # noqa: E402
from models.storage.checkpoint import load_checkpoint  # noqa: E402
from tests import test_decoder_only, test_import_hf_bart, test_import_marian, test_import_t5  # noqa: E402
from tests.helpers import tiny_config  # noqa: E402

DEMOS = "resources/checkpoints"
SENTENCE = "the old man went to the market and bought bread for his family"


@pytest.fixture(scope="module")
def en_es():
    return Translator(load_checkpoint(f"{DEMOS}/en-es-transformer.safetensors"))


def own_probabilities(model, src_ids, output_ids) -> np.ndarray:
    """softmax of the model's own logits (its plain forward pass) at each output step: p(y_t) ``[T]``."""
    src = torch.tensor([list(src_ids)])
    if hasattr(model, "layers"):  # decoder-only: the prompt, then the output but its last token
        logits, _ = model(src, torch.tensor([list(output_ids)[:-1]]))
        logits = torch.cat([model(src[:, :-1], src[:, -1:])[0], logits], dim=1)
    else:
        logits, _ = model(src, torch.tensor([[model.config.bos_id] + list(output_ids)[:-1]]))
    probs = torch.softmax(logits[0].double(), dim=-1)
    return probs.gather(1, torch.tensor(list(output_ids))[:, None])[:, 0].numpy()


def layer_outputs(layers, run) -> list[torch.Tensor]:
    """Each module of ``layers``' output (its first value), recorded by forward hooks while ``run()`` runs."""
    outputs = []
    handles = [layer.register_forward_hook(lambda _m, _a, out: outputs.append(out[0] if isinstance(out, tuple)
                                                                              else out)) for layer in layers]
    try:
        with torch.no_grad():
            run()
    finally:
        for handle in handles:
            handle.remove()
    return outputs


def layer_norm(x: torch.Tensor, norm) -> torch.Tensor:
    """(x − mean) / √(var + ε) · γ + β, written out."""
    x = x.double()
    mean = x.mean(-1, keepdim=True)
    var = ((x - mean) ** 2).mean(-1, keepdim=True)
    return (x - mean) / torch.sqrt(var + norm.eps) * norm.weight.double() + norm.bias.double()


# ------------------------------------------------------------------------------------------- the logit lens


@pytest.mark.parametrize("name, text", [("en-es-transformer", SENTENCE), ("en-es-transformer-postln", SENTENCE),
                                        ("piglatin-decoder-only", "hello world")])
def test_the_lens_at_the_last_layer_is_the_models_own_distribution(name, text):
    translator = Translator(load_checkpoint(f"{DEMOS}/{name}.safetensors"))
    source = translator.source(text)
    result = translator.translate(text)
    src_ids = result.prompt_ids if result.prompt_ids is not None else source.ids
    lens = logit_lens(translator.model, src_ids, result.token_ids, top_k=7)
    layers = translator.model.attention_shape()["dec_self"][0]
    assert lens.probs.shape == lens.ranks.shape == (layers + 1, len(result.token_ids))
    assert lens.top_ids.shape == lens.top_probs.shape == (layers + 1, len(result.token_ids), 7)
    with torch.no_grad():
        own = own_probabilities(translator.model, src_ids, result.token_ids)
    assert np.abs(lens.probs[-1] - own).max() < 1e-5
    steps = result.steps  # the decoding run's own report of each step
    assert np.abs(lens.probs[-1] - np.array([step.probabilities[0] for step in steps])).max() < 1e-5
    assert list(lens.ranks[-1]) == [0] * len(steps)  # greedy took the most likely token every time
    assert np.array_equal(lens.top_ids[-1, :, 0], lens.token_ids)
    assert (np.diff(lens.top_probs, axis=-1) <= 0).all() and (lens.probs >= 0).all() and (lens.probs <= 1).all()
    top_in_lens = lens.top_probs[:, :, 0] >= lens.probs - 1e-7
    assert top_in_lens.all() and ((lens.ranks == 0) == np.isclose(lens.top_probs[:, :, 0], lens.probs)).all()


@torch.no_grad()
def test_the_lens_is_the_residual_stream_through_the_final_norm_and_projection_written_out():
    """A tiny random pre-LN model: the residual stream after each decoder layer (recorded by hooks on the layers,
    the embeddings as the first layer's input), LayerNorm written out, x·Wᵀ + b, softmax."""
    torch.manual_seed(3)
    model = build_model(tiny_config("transformer-preln", decoder_layers=3)).eval()
    src, output = [5, 6, 7, 8, 9, 2], [7, 10, 4, 11, 2]
    tgt_in = torch.tensor([[model.config.bos_id] + output[:-1]])
    inputs = []
    hook = model.decoder_layers[0].register_forward_pre_hook(lambda _m, args: inputs.append(args[0]))
    states = layer_outputs(model.decoder_layers, lambda: model(torch.tensor([src]), tgt_in))
    hook.remove()
    lens = logit_lens(model, src, output, top_k=3)
    assert lens.probs.shape == (4, 5)
    for layer, h in enumerate([inputs[0], *states]):
        logits = layer_norm(h[0], model.decoder_norm) @ model.output.weight.double().T + model.output.bias.double()
        probs = torch.softmax(logits * model.config.logit_scale, dim=-1)  # [T, V]
        chosen = probs.gather(1, torch.tensor(output)[:, None])[:, 0]
        assert np.abs(lens.probs[layer] - chosen.numpy()).max() < 1e-5, layer
        ranks = (probs > chosen[:, None]).sum(-1)
        assert list(lens.ranks[layer]) == ranks.tolist()
        top = probs.topk(3, dim=-1)
        assert np.array_equal(lens.top_ids[layer], top.indices.numpy())
        assert np.abs(lens.top_probs[layer] - top.values.numpy()).max() < 1e-5


def test_the_lens_reads_the_traced_pass_it_is_given(en_es):
    source = en_es.source(SENTENCE)
    result = en_es.translate(SENTENCE)
    captured = capture_forward(en_es.model, source.ids, result.token_ids)
    assert len(captured.residuals["decoder"]) == en_es.model.attention_shape()["dec_self"][0] + 1
    assert len(captured.residuals["encoder"]) == en_es.model.attention_shape()["enc_self"][0] + 1
    given = logit_lens(en_es.model, source.ids, result.token_ids, captured=captured)
    alone = logit_lens(en_es.model, source.ids, result.token_ids)
    assert np.array_equal(given.probs, alone.probs) and np.array_equal(given.top_ids, alone.top_ids)


def test_a_beam_hypothesis_has_its_own_lens(en_es):
    source = en_es.source(SENTENCE)
    results = finish(en_es.decode(source, mode="beam", beam=3, need_weights=False))
    second = results[1]
    lens = logit_lens(en_es.model, source.ids, second.token_ids)
    assert list(lens.token_ids) == second.token_ids
    reported = np.array([step.probabilities[row] for step, row in zip(second.steps, second.rows)])
    assert np.abs(lens.probs[-1] - reported).max() < 1e-5


# ------------------------------------------------------------------------- families transformers built


@pytest.fixture(scope="module", params=["bart", "mbart"])
def bart(request, tmp_path_factory):
    folder, original, tokenizer = test_import_hf_bart.build(tmp_path_factory.mktemp(request.param), request.param)
    return original, convert(folder).model, tokenizer


@torch.no_grad()
def test_a_bart_lens_equals_transformers_hidden_states_through_its_head_and_final_logits_bias(bart):
    """transformers' BART and mBART: each decoder layer's output (and the embeddings after their norm) through the
    decoder's final LayerNorm where it has one (mBART, pre-LN; BART, post-LN, has none), its lm_head plus
    final_logits_bias, softmax."""
    original, model, tokenizer = bart
    src = tokenizer.encode(test_import_hf_bart.SENTENCES[1]).ids
    output = finish(greedy(model, src, Capture(need_weights=False, max_len=8)))[0].token_ids
    decoder = original.model.decoder
    tgt_in = torch.tensor([[model.config.bos_id] + output[:-1]])
    states = layer_outputs([decoder.layernorm_embedding, *decoder.layers],
                           lambda: original(input_ids=torch.tensor([src]), decoder_input_ids=tgt_in))
    lens = logit_lens(model, src, output)
    assert lens.probs.shape == (len(decoder.layers) + 1, len(output))
    for layer, h in enumerate(states):
        final_norm = getattr(decoder, "layer_norm", None)
        h = final_norm(h) if final_norm is not None else h
        logits = original.lm_head(h[0]) + original.final_logits_bias[0]
        expected = torch.softmax(logits.double(), -1).gather(1, torch.tensor(output)[:, None])[:, 0].numpy()
        assert np.abs(lens.probs[layer] - expected).max() < 1e-5, layer
    own = own_probabilities(model, src, output)
    assert np.abs(lens.probs[-1] - own).max() < 1e-5


@torch.no_grad()
def test_a_marian_lens_and_decoder_lens_equal_transformers_layers_through_its_head(tmp_path):
    """transformers' Marian (opus-mt, post-LN, no final norm): each decoder layer's output (the scaled embeddings
    plus positions as the first layer's input) through its lm_head plus final_logits_bias; DecoderLens at the last
    encoder layer is the model's greedy output, here one cut at its run's limit of 10 tokens (an output that ends:
    the demo's and BART's tests)."""
    folder, original, tokenizer, _ = test_import_marian.build_marian(tmp_path)
    model = convert(folder).model
    src = tokenizer(test_import_marian.SENTENCES[0]).input_ids
    result = finish(greedy(model, src, Capture(need_weights=False, max_len=10)))[0]
    output = result.token_ids
    layers = original.model.decoder.layers
    first = []
    hook = layers[0].register_forward_pre_hook(lambda _m, args, kwargs: first.append(args[0] if args else
                                                                                     kwargs["hidden_states"]),
                                               with_kwargs=True)
    tgt_in = torch.tensor([[model.config.bos_id] + output[:-1]])
    states = layer_outputs(layers, lambda: original(input_ids=torch.tensor([src]), decoder_input_ids=tgt_in))
    hook.remove()
    lens = logit_lens(model, src, output)
    assert lens.probs.shape == (len(layers) + 1, len(output))
    for layer, h in enumerate([first[0], *states]):
        logits = original.lm_head(h[0]) + original.final_logits_bias[0]
        expected = torch.softmax(logits.double(), -1).gather(1, torch.tensor(output)[:, None])[:, 0].numpy()
        assert np.abs(lens.probs[layer] - expected).max() < 1e-5, layer
    readings = decoder_lens(model, src, output)  # an output cut at 10 tokens: every layer's is cut there too
    assert output[-1] != model.config.eos_id and all(len(reading.token_ids) <= 10 for reading in readings)
    assert list(readings[-1].token_ids) == output
    assert abs(readings[-1].nll + result.log_prob) < 1e-4 * max(1.0, abs(result.log_prob))


@torch.no_grad()
def test_a_gemma2_lens_goes_through_its_final_norm_and_logit_soft_capping(tmp_path):
    folder = tmp_path / "model"
    original = test_decoder_only.build(folder, "gemma2")
    model = convert(folder).model
    prompt = test_decoder_only.encode(folder, test_decoder_only.SENTENCES[0])
    output = test_decoder_only.encode(folder, test_decoder_only.SENTENCES[2])[:6]
    layers = original.model.layers
    first = []
    hook = layers[0].register_forward_pre_hook(lambda _m, args, kwargs: first.append(args[0] if args else
                                                                                     kwargs["hidden_states"]),
                                               with_kwargs=True)
    states = layer_outputs(layers, lambda: original(torch.tensor([prompt + output[:-1]])))
    hook.remove()
    cap = original.config.final_logit_softcapping
    lens = logit_lens(model, prompt, output)
    assert lens.probs.shape == (len(layers) + 1, len(output))
    for layer, h in enumerate([first[0], *states]):
        with torch.no_grad():
            logits = original.lm_head(original.model.norm(h[0, len(prompt) - 1:])).double()
        probs = torch.softmax(cap * torch.tanh(logits / cap), -1)
        expected = probs.gather(1, torch.tensor(output)[:, None])[:, 0].numpy()
        assert np.abs(lens.probs[layer] - expected).max() < 1e-5, layer
    with torch.no_grad():
        theirs = torch.softmax(original(torch.tensor([prompt + output[:-1]])).logits[0, len(prompt) - 1:].double(), -1)
    assert np.abs(lens.probs[-1] - theirs.gather(1, torch.tensor(output)[:, None])[:, 0].numpy()).max() < 1e-5


@torch.no_grad()
def test_a_t5_lens_goes_through_its_final_norm_and_the_tied_heads_scaling(tmp_path):
    """transformers' T5 v1.0 (tied output projection): each decoder block's output (the embeddings as the first
    block's input) through the decoder's final RMSNorm, × d_model^-0.5, then its lm_head."""
    folder, original, processor = test_import_t5.build(tmp_path, "v1.0")
    model = convert(folder).model
    src = test_import_t5.source_ids("v1.0", folder, processor, test_import_t5.SENTENCES[1])
    output = finish(greedy(model, src, Capture(need_weights=False, max_len=8)))[0].token_ids
    blocks = original.decoder.block
    first = []
    hook = blocks[0].register_forward_pre_hook(lambda _m, args, kwargs: first.append(args[0] if args else
                                                                                     kwargs["hidden_states"]),
                                               with_kwargs=True)
    tgt_in = torch.tensor([[model.config.bos_id] + output[:-1]])
    states = layer_outputs(blocks, lambda: original(input_ids=torch.tensor([src]), decoder_input_ids=tgt_in))
    hook.remove()
    lens = logit_lens(model, src, output)
    assert lens.probs.shape == (len(blocks) + 1, len(output))
    for layer, h in enumerate([first[0], *states]):
        logits = original.lm_head(original.decoder.final_layer_norm(h[0]) * original.config.d_model ** -0.5)
        expected = torch.softmax(logits.double(), -1).gather(1, torch.tensor(output)[:, None])[:, 0].numpy()
        assert np.abs(lens.probs[layer] - expected).max() < 1e-5, layer
    theirs = original(input_ids=torch.tensor([src]), decoder_input_ids=tgt_in).logits[0].double()
    own = torch.softmax(theirs, -1).gather(1, torch.tensor(output)[:, None])[:, 0].numpy()
    assert np.abs(lens.probs[-1] - own).max() < 1e-5


# -------------------------------------------------------------------------------------------- DecoderLens


def test_decoder_lens_at_the_last_encoder_layer_is_the_models_own_greedy_output_and_nll(en_es):
    source = en_es.source(SENTENCE)
    result = en_es.translate(SENTENCE)
    readings = decoder_lens(en_es.model, source.ids, result.token_ids)
    assert [reading.layer for reading in readings] == list(range(en_es.model.attention_shape()["enc_self"][0] + 1))
    assert list(readings[-1].token_ids) == result.token_ids
    assert abs(readings[-1].nll + result.log_prob) < 1e-4 * max(1.0, abs(result.log_prob))
    assert readings[0].token_ids != readings[-1].token_ids  # the embeddings alone do not translate the sentence
    assert readings[0].nll > readings[-1].nll


def test_decoder_lens_keeps_the_heads_switched_off_that_the_run_had_off(en_es):
    from models.nn.ablation import Ablation

    ablation = Ablation.parse(["cross:2:*", "enc_self:1:0"])
    source = en_es.source(SENTENCE)
    result = en_es.translate(SENTENCE, ablation=ablation)
    assert result.token_ids != en_es.translate(SENTENCE).token_ids  # the heads matter to this sentence
    readings = decoder_lens(en_es.model, source.ids, result.token_ids, ablation=ablation)
    assert list(readings[-1].token_ids) == result.token_ids
    assert abs(readings[-1].nll + result.log_prob) < 1e-4 * max(1.0, abs(result.log_prob))
    lens = logit_lens(en_es.model, source.ids, result.token_ids, ablation=ablation)
    assert np.abs(lens.probs[-1] - np.array([step.probabilities[0] for step in result.steps])).max() < 1e-5


@torch.no_grad()
def test_decoder_lens_is_the_decoder_reading_each_encoder_layer_through_the_final_norm_written_out(en_es):
    """Each encoder layer's output (hooks on the layers; the embeddings as the first one's input) through the
    encoder's LayerNorm written out, read by the decoder alone (one row, not the batch): its NLL of the model's
    output, and its greedy output decoded here token by token (the whole prefix fed each time, padding never
    chosen)."""
    model = en_es.model
    assert model.config.min_output_len == 0 and not model.config.suppress_bos
    source = en_es.source("where is the house of my friend")
    result = en_es.translate("where is the house of my friend")
    inputs = []
    hook = model.encoder_layers[0].register_forward_pre_hook(lambda _m, args: inputs.append(args[0]))
    states = layer_outputs(model.encoder_layers, lambda: model.start(torch.tensor([source.ids])))
    hook.remove()
    readings = decoder_lens(model, source.ids, result.token_ids)
    src = torch.tensor([source.ids])
    src_mask = model.source_mask(src)
    output = torch.tensor(result.token_ids)
    for layer, h in enumerate([inputs[0], *states]):
        memory = layer_norm(h, model.encoder_norm).float()
        tgt_in = torch.tensor([[model.config.bos_id] + result.token_ids[:-1]])
        with torch.no_grad():
            logits, _, _ = model.decode(tgt_in, memory, src_mask, self_mask=target_mask(tgt_in, model.pad_id),
                                        caches=None, offset=0, need_weights=False)
        nll = -torch.log_softmax(logits[0].double(), -1).gather(1, output[:, None]).sum().item()
        assert abs(readings[layer].nll - nll) < 1e-3, layer
        prefix = [model.config.bos_id]
        for _ in range(2 * len(result.token_ids) + 10):
            with torch.no_grad():
                fed = torch.tensor([prefix])
                logits, _, _ = model.decode(fed, memory, src_mask, self_mask=target_mask(fed, model.pad_id),
                                            caches=None, offset=0, need_weights=False)
            scores = logits[0, -1].clone()
            scores[model.pad_id] = float("-inf")
            prefix.append(int(scores.argmax()))
            if prefix[-1] == model.config.eos_id:
                break
        assert list(readings[layer].token_ids) == prefix[1:], layer


def test_decoder_lens_of_an_imported_bart_reproduces_its_greedy_output(bart):
    _, model, tokenizer = bart
    for sentence in test_import_hf_bart.SENTENCES[:3]:
        src = tokenizer.encode(sentence).ids
        result = finish(greedy(model, src, Capture(need_weights=False)))[0]
        readings = decoder_lens(model, src, result.token_ids)
        assert len(readings) == len(model.encoder_layers) + 1
        assert list(readings[-1].token_ids) == result.token_ids
        assert abs(readings[-1].nll + result.log_prob) < 1e-4 * max(1.0, abs(result.log_prob))


# ---------------------------------------------------------------------------------------- what does not apply


def test_models_without_the_layers_a_lens_reads_say_so_in_one_line():
    gru = Translator(load_checkpoint(f"{DEMOS}/piglatin-gru-additive.safetensors")).model
    for lens in (logit_lens, decoder_lens):
        with pytest.raises(LensError) as raised:
            lens(gru, [5, 6, 7], [8, 9])
        assert str(raised.value) == NOT_TRANSFORMER and "\n" not in NOT_TRANSFORMER
    decoder_only = Translator(load_checkpoint(f"{DEMOS}/piglatin-decoder-only.safetensors")).model
    with pytest.raises(LensError, match="decoder-only model has no encoder") as raised:
        decoder_lens(decoder_only, [5, 6, 7], [8, 9])
    assert str(raised.value) == NO_ENCODER
    encoder_only = Translator(load_checkpoint(f"{DEMOS}/english-encoder-only.safetensors")).model
    with pytest.raises(LensError) as raised:
        logit_lens(encoder_only, [5, 6, 7], [8, 9])
    assert str(raised.value) == NO_DECODER


def test_a_step_beyond_the_output_and_an_empty_output_are_one_line(en_es):
    source = en_es.source("hello")
    result = en_es.translate("hello")
    lens = logit_lens(en_es.model, source.ids, result.token_ids)
    with pytest.raises(LensError, match=f"step {lens.steps + 1} is beyond the output, which has {lens.steps} step"):
        lens.check_step(lens.steps)
    with pytest.raises(LensError, match="no tokens"):
        logit_lens(en_es.model, source.ids, [])


def test_each_reading_method_is_in_the_catalogue_with_its_computation():
    from models.analysis.lens import COMPUTATIONS

    assert set(COMPUTATIONS) == set(catalogue.READING_METHODS) == {catalogue.LOGIT_LENS, catalogue.DECODER_LENS}
    assert catalogue.READING_METHODS[catalogue.DECODER_LENS].decoder_only is False
