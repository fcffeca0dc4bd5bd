"""Contributions beyond attention weights (models/analysis/contributions.py) on real models: random-weight
Transformers of every norm placement and kind, the bundled demos and a converted Marian model, checked against
the blocks' real outputs and against direct, one-at-a-time computations."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from models import build_model
from models.storage.checkpoint import load_checkpoint
from models.analysis.contributions import (
    CONTRIBUTION_METHODS, ContributionError, alti, block_terms, capture_forward, decoder_input, source_coverage,
    value_norms, value_zeroing,
)
from models.analysis.gradients import input_x_gradient
from models.analysis.methods import contributions
from models.nn.intermediates import noting_blocks
from models.inference.translator import Translator
from tests.helpers import tiny_config

DEMOS = "resources/checkpoints"
SOURCE, OUTPUT = [5, 7, 9, 4, 6, 11, 8, 3], [6, 9, 5, 10, 4, 3]

RANDOM = {
    "pre-LN": dict(arch="transformer-preln"),
    "post-LN": dict(arch="transformer-postln"),
    "pre-LN, normalised keys": dict(arch="transformer-preln", pre_norm_kv=True),
    "T5-style RMS norm": dict(arch="transformer-preln", norm_kind="rms", scale_attention=False, relative_buckets=8,
                              relative_max_distance=16, positions="none", attention_bias=False,
                              feed_forward_bias=False, gated_ffn=True),
    "post-LN, unbiased std, residual scale": dict(arch="transformer-postln", norm_kind="unbiased_std",
                                                  residual_scale=1.5),
    "pre-LN encoder, post-LN decoder, more decoder heads": dict(arch="transformer-preln", decoder_norm_position="post",
                                                                decoder_heads=8),
}


def random_model(arch: str, **overrides):
    torch.manual_seed(0)
    model = build_model(tiny_config(arch, **overrides)).eval()
    with torch.no_grad():  # norms away from 1 and 0, so that their weights and biases count
        for name, parameter in model.named_parameters():
            if "norm" in name:
                parameter.add_(torch.randn_like(parameter) * 0.3)
    return model


def demo(name: str) -> Translator:
    return Translator(load_checkpoint(f"{DEMOS}/{name}.safetensors"), "cpu")


def demo_pair(translator: Translator, text: str = "The cat sits on the mat.") -> tuple[list[int], list[int]]:
    return translator.source(text).ids, translator.translate(text).token_ids


def assert_terms_add_up(model, src, out) -> None:
    captured = capture_forward(model, src, out)
    assert len(captured.blocks) == len(model.encoder_layers) + 2 * len(model.decoder_layers)
    for key, block in captured.blocks.items():
        terms = block_terms(block)
        relative = (terms.total() - terms.output).norm() / terms.output.norm()
        assert relative < 1e-4, key


def assert_alti_shares(model, src, out) -> None:
    maps = alti(model, src, out)
    assert maps.source.shape == (len(out), len(src)) and maps.target.shape == (len(out), len(out))
    assert maps.source.min() >= 0 and maps.target.min() >= 0
    assert np.abs(maps.source.sum(1) + maps.target.sum(1) - 1).max() < 1e-5
    assert np.allclose(np.triu(maps.target, 1), 0)  # no share from a token not yet fed
    for kind in ("enc_self", "dec_self"):
        for block in maps.layers[kind]:
            assert block.min() >= 0 and np.abs(block.sum(1) - 1).max() < 1e-5
    for cross, residual in zip(maps.layers["cross"], maps.cross_residual):
        assert np.abs(cross.sum(1) + residual - 1).max() < 1e-5


@pytest.mark.parametrize("name", list(RANDOM))
def test_every_block_decomposes_into_its_real_output_on_random_models(name):
    model = random_model(**RANDOM[name])
    assert_terms_add_up(model, SOURCE, OUTPUT)
    assert_alti_shares(model, SOURCE, OUTPUT)


@pytest.mark.parametrize("name", ["en-es-transformer", "en-es-transformer-postln"])
def test_every_block_decomposes_on_the_demos(name):
    translator = demo(name)
    src, out = demo_pair(translator)
    assert_terms_add_up(translator.model, src, out)
    assert_alti_shares(translator.model, src, out)


def test_a_converted_marian_model_decomposes(tmp_path):
    pytest.importorskip("transformers")
    from models.importers import convert
    from tests.test_import_marian import build_marian

    (tmp_path / "opus-mt").mkdir()
    folder, *_ = build_marian(tmp_path / "opus-mt")
    model = convert(folder).model.eval()
    src, out = [5, 9, 12, 7, 0], [7, 11, 6, 0]
    assert_terms_add_up(model, src, out)
    assert_alti_shares(model, src, out)


def test_value_norms_equal_a_direct_computation_per_head():
    model = random_model("transformer-postln")
    src, tgt_in = torch.tensor([SOURCE]), torch.tensor([decoder_input(model, OUTPUT)])
    with torch.no_grad():
        _, inter = model(src, tgt_in, need_weights=True)
        memory, _, _ = model.encode(src, False)
        attention = model.decoder_layers[1].cross_attention.attention
        heads, width = attention.heads, attention.head_dim
        expected = torch.zeros(heads, len(OUTPUT), len(SOURCE))
        for head in range(heads):
            rows = slice(head * width, (head + 1) * width)
            value = memory[0] @ attention.value.weight[rows].T + attention.value.bias[rows]  # [S, D]
            moved = value @ attention.output.weight[:, rows].T  # [S, E]
            expected[head] = inter.attention["cross"][1][0, head] * moved.norm(dim=-1)[None]
    norms = value_norms(model, SOURCE, OUTPUT)
    assert np.abs(norms.layers["cross"][1] - expected.numpy()).max() < 1e-5
    assert [len(norms.layers[kind]) for kind in ("enc_self", "dec_self", "cross")] == [2, 2, 2]


def test_input_x_gradient_equals_a_step_by_step_autograd_loop():
    model = random_model("transformer-preln")
    maps = input_x_gradient(model, SOURCE, OUTPUT)
    src, tgt_in = torch.tensor([SOURCE]), torch.tensor([decoder_input(model, OUTPUT)])
    for step, token in enumerate(OUTPUT):
        kept = {}
        hooks = [model.src_embedding.tokens.register_forward_hook(lambda m, i, o: kept.setdefault("s", o)),
                 model.tgt_embedding.tokens.register_forward_hook(lambda m, i, o: kept.setdefault("t", o))]
        logits, _ = model(src, tgt_in)
        for hook in hooks:
            hook.remove()
        source, target = torch.autograd.grad(torch.log_softmax(logits[0, step], -1)[token], (kept["s"], kept["t"]))
        assert np.abs(maps.source[step] - (kept["s"] * source)[0].norm(dim=-1).detach().numpy()).max() < 1e-5
        assert np.abs(maps.target[step] - (kept["t"] * target)[0].norm(dim=-1).detach().numpy()).max() < 1e-5


def test_integrated_gradients_sum_to_the_log_probability_change_from_zero_embeddings():
    model = random_model("transformer-preln")
    maps = contributions("integrated_gradients", model, SOURCE, OUTPUT)
    assert maps.source.shape == (len(OUTPUT), len(SOURCE)) and maps.source.min() >= 0
    assert maps.method == "integrated_gradients" and not np.allclose(maps.source, 0)


def test_value_zeroing_equals_zeroing_one_token_at_a_time():
    model = random_model("transformer-preln")
    maps = value_zeroing(model, SOURCE, OUTPUT)
    src, tgt_in = torch.tensor([SOURCE]), torch.tensor([decoder_input(model, OUTPUT)])
    for kind, layer, module, keys in (("enc_self", 1, model.encoder_layers[1].self_attention, len(SOURCE)),
                                      ("dec_self", 0, model.decoder_layers[0].self_attention, len(OUTPUT)),
                                      ("cross", 1, model.decoder_layers[1].cross_attention, len(SOURCE))):
        owner = model.encoder_layers[layer] if kind == "enc_self" else model.decoder_layers[layer]
        expected = np.zeros((maps.layers[kind][layer].shape[0], keys))
        original = layer_output(model, owner, src, tgt_in)
        for key in range(keys):
            zero = module.attention.value.register_forward_hook(
                lambda m, i, o, key=key: o.index_fill(1, torch.tensor([key]), 0.0))
            changed = layer_output(model, owner, src, tgt_in)
            zero.remove()
            similarity = torch.nn.functional.cosine_similarity(changed.double(), original.double(), dim=-1)
            expected[:, key] = 1 - similarity.numpy()
        expected /= expected.sum(1, keepdims=True)
        assert np.abs(maps.layers[kind][layer] - expected).max() < 1e-5, kind


def layer_output(model, layer, src, tgt_in) -> torch.Tensor:
    kept = []
    hook = layer.register_forward_hook(lambda m, i, o: kept.append(o[0][0]))
    with torch.no_grad():
        model(src, tgt_in)
    hook.remove()
    return kept[0]


def test_a_gru_gives_gradients_and_refuses_alti_in_one_line():
    translator = demo("piglatin-gru-additive")
    src, out = demo_pair(translator, "hello world")
    with pytest.raises(ContributionError, match="ALTI\\+ needs Transformer blocks .*gru-additive model has none"):
        alti(translator.model, src, out)
    assert not CONTRIBUTION_METHODS["value_zeroing"].applies(translator.model)
    with pytest.raises(ContributionError) as refused:
        contributions("value_zeroing", translator.model, src, out)
    assert "\n" not in str(refused.value) and "gru-additive" in str(refused.value)
    maps = input_x_gradient(translator.model, src, out)
    assert maps.source.shape == (len(out), len(src)) and maps.source.max() > 0


def test_a_recurrent_decoders_gradients_equal_a_step_by_step_loop():
    translator = demo("piglatin-gru-scaled-dot")
    model = translator.model
    src, out = demo_pair(translator, "hello world")
    maps = input_x_gradient(model, src, out)
    for step in (0, len(out) // 2, len(out) - 1):
        source, target = [], []
        hooks = [model.encoder.embedding.register_forward_hook(lambda m, i, o: source.append(o)),
                 model.decoder.embedding.register_forward_hook(lambda m, i, o: target.append(o))]
        logits, _ = model(torch.tensor([src]), torch.tensor([decoder_input(model, out)]))
        for hook in hooks:
            hook.remove()
        gradients = torch.autograd.grad(torch.log_softmax(logits[0, step], -1)[out[step]], source + target,
                                        allow_unused=True)
        expected_source = (source[0] * gradients[0])[0].norm(dim=-1)
        expected_target = torch.stack([torch.zeros(1) if gradient is None else (vector * gradient)[0].norm()[None]
                                       for vector, gradient in zip(target, gradients[1:])])[:, 0]
        assert np.abs(maps.source[step] - expected_source.detach().numpy()).max() < 1e-5
        assert np.abs(maps.target[step] - expected_target.detach().numpy()).max() < 1e-5


@pytest.mark.parametrize("name", ["piglatin-gru-additive", "piglatin-gru-scaled-dot"])
def test_a_gru_decoders_value_norms_are_its_weights_times_the_norms_of_what_the_context_adds(name):
    translator = demo(name)
    model = translator.model
    src, out = demo_pair(translator, "hello world")
    norms = value_norms(model, src, out)
    with torch.no_grad():
        _, inter = model(torch.tensor([src]), torch.tensor([decoder_input(model, out)]), need_weights=True)
        annotations, _ = model.encoder(torch.tensor([src]), model.source_mask(torch.tensor([src])))
        attention = model.decoder.attention
        values = (annotations[0] if name.endswith("additive")
                  else annotations[0] @ attention.value.weight.T + attention.value.bias)
    expected = inter.attention["cross"][0][0, 0] * values.norm(dim=-1)[None]
    assert list(norms.layers) == ["cross"] and norms.layers["cross"][0].shape == (1, len(out), len(src))
    assert np.abs(norms.layers["cross"][0][0] - expected.numpy()).max() < 1e-5


def test_a_transformer_decoder_over_a_gru_has_value_norms_that_add_up_to_what_its_attention_adds():
    translator = demo("piglatin-gru-transformer-decoder")
    model = translator.model.eval()
    src, out = demo_pair(translator, "strength through joy")
    norms = value_norms(model, src, out)
    assert sorted(norms.layers) == ["cross", "dec_self"]  # its encoder is a GRU: no encoder self-attention
    inputs = {}  # each decoder Linear's input: the residual stream before and after each attention
    hooks = [module.register_forward_hook(lambda _m, given, _o, name=name: inputs.update({name: given[0][0]}))
             for name, module in model.decoder.named_modules() if isinstance(module, torch.nn.Linear)]
    with torch.no_grad():
        source = torch.tensor([src])
        _, inter = model(source, torch.tensor([decoder_input(model, out)]), need_weights=True)
        annotations = model.encoder(source, model.source_mask(source))[0][0]  # [S, N]
    for hook in hooks:
        hook.remove()
    for index, layer in enumerate(model.decoder.layers):
        before, between, after = (inputs[f"layers.{index}.{name}"] for name in
                                  ("self_attention.query", "encoder_attention.query", "mlp"))
        for kind, attention, keys, added in (("dec_self", layer.self_attention, before, between - before),
                                             ("cross", layer.encoder_attention, annotations, after - between)):
            # f(x_j) per head: the value vector (these heads are concatenated as they are: no W_O)
            with torch.no_grad():
                values = (keys @ attention.value.weight.T + attention.value.bias).view(len(keys), attention.heads, -1)
            weights = inter.attention[kind][index][0]  # [H, Q, K]
            expected = weights * values.norm(dim=-1).T[:, None, :]
            assert np.abs(norms.layers[kind][index] - expected.numpy()).max() < 1e-5, (kind, index)
            weighted = torch.einsum("hqk,khd->qhd", weights, values).reshape(len(out), -1)
            assert (weighted - added).abs().max() < 1e-4, (kind, index)  # Σ_j α_ij f(x_j): what the block adds
    assert norms.layers["cross"][1].max() > 1  # norms, not shares
    from models.nn.ablation import Ablation

    ablated = value_norms(model, src, out, ablation=Ablation.parse(["cross:1:0"]))
    assert not ablated.layers["cross"][1][0].any() and ablated.layers["cross"][0][0].any()  # one head a layer


def test_a_transformer_decoder_over_a_gru_says_why_alti_does_not_apply():
    translator = demo("piglatin-gru-transformer-decoder")
    src, out = demo_pair(translator, "strength through joy")
    with pytest.raises(ContributionError, match="ALTI\\+ needs .*gru-transformer-decoder model's encoder is recurrent"):
        alti(translator.model, src, out)


def test_a_model_without_attention_has_no_value_norms():
    translator = demo("piglatin-gru-no-attention")
    src, out = demo_pair(translator, "hello")
    with pytest.raises(ContributionError, match="value-weighted norms need .*gru-none model has neither"):
        value_norms(translator.model, src, out)


def test_the_registry_says_what_each_method_is_and_where_it_applies():
    model = random_model("transformer-postln")
    for name, method in CONTRIBUTION_METHODS.items():
        assert method.applies(model) and method.unit and method.label, name
    assert {name for name, method in CONTRIBUTION_METHODS.items() if method.from_forward} == {
        "weights", "value_norms", "alti", "alti_logit"}
    with pytest.raises(ContributionError, match="unknown contribution method 'rollout'"):
        contributions("rollout", model, SOURCE, OUTPUT)


def test_a_normal_forward_notes_nothing_and_a_noting_one_keeps_each_block_once():
    model = random_model("transformer-preln")
    with noting_blocks() as noted:
        with torch.no_grad():
            model(torch.tensor([SOURCE]), torch.tensor([decoder_input(model, OUTPUT)]), need_weights=True)
    assert len(noted) == 6
    with torch.no_grad():
        model(torch.tensor([SOURCE]), torch.tensor([decoder_input(model, OUTPUT)]))
    assert len(noted) == 6  # the context has ended: nothing more was kept


def test_source_coverage_is_the_mean_source_share_and_the_least_used_source_token():
    translator = demo("en-es-transformer")
    src, out = demo_pair(translator)
    maps = alti(translator.model, src, out)
    coverage = source_coverage(maps)
    assert coverage.avg_source == pytest.approx(float(maps.source.sum(1).mean()), abs=1e-6)
    assert coverage.min_source_token == pytest.approx(float(maps.source.sum(0).min()), abs=1e-6)
    assert 0 < coverage.avg_source < 1 and 0 <= coverage.least_covered < len(src)


def test_contributions_of_an_ablated_run_are_of_the_model_as_it_ran():
    from models.nn.ablation import Ablation

    translator = demo("en-es-transformer")
    model = translator.model
    ablation = Ablation.parse(["cross:1:2", "enc_self:0:*", "dec_self:2:0"])
    source = translator.source("The cat sits on the mat.")
    out = translator.translate("The cat sits on the mat.", ablation=ablation).token_ids
    captured = capture_forward(model, source.ids, out, ablation=ablation)
    for key, block in captured.blocks.items():  # the switched-off heads' outputs are no term of the real output
        terms = block_terms(block)
        assert (terms.total() - terms.output).norm() / terms.output.norm() < 1e-4, key
    norms = value_norms(model, source.ids, out, ablation=ablation)
    heads = model.attention_shape()["enc_self"][1]
    assert not norms.layers["cross"][1][2].any() and not norms.layers["dec_self"][2][0].any()
    assert not np.stack(norms.layers["enc_self"][0]).any() and norms.layers["cross"][1][1].any()
    assert norms.layers["enc_self"][0].shape[0] == heads
    every_head_on = {name: contributions(name, model, source.ids, out) for name in ("alti", "input_x_gradient")}
    for name, unablated in every_head_on.items():
        ablated = contributions(name, model, source.ids, out, ablation=ablation)
        assert not np.allclose(ablated.source, unablated.source, atol=1e-4), name
    zeroed = value_zeroing(model, source.ids, out, ablation=ablation)
    assert not np.allclose(zeroed.layers["cross"][1], value_zeroing(model, source.ids, out).layers["cross"][1])
    assert not zeroed.layers["enc_self"][0].any() and zeroed.rounding_rows["enc_self"][0].all()  # no head on there
