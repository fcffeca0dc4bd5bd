"""Contrastive explanations (models/analysis/contrast.py) and ALTI-Logit (models/analysis/alti_logit.py).

The gradient methods explain logit(y_t) − logit(y′_t) (Yin & Neubig 2022) where a step has a contrast token y′_t;
checked against autograd written out here and, for integrated gradients, against the change of that difference
from the zero embeddings (completeness). ALTI-Logit (Ferrando et al. 2023) splits the logit (difference) into
every decoder head's update per key token, the feed-forward updates, the embedding and the biases: they add up to
the model's own logit (difference), on both en-es demos (pre- and post-LN), the decoder-only demo and a converted
Marian model; a layer's update per token is the formula written out on the model's weights, and the input
tokens' terms are those updates carried through ALTI+'s per-layer maps."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from models.analysis.alti_logit import alti_logit
from models.analysis.contrast import every_step, one_step
from models.analysis.contributions import (
    COMPLETENESS_TOLERANCE, ContributionError, capture_forward, decoder_input,
)
from models.analysis.gradients import gauss_legendre, input_x_gradient, integrated_gradients, weighted_gradients
from models.analysis.methods import contributions
from tests.test_contributions import OUTPUT, SOURCE, demo, demo_pair, random_model

FOIL = 7  # a token of every test model's vocabulary


def embedding_leaves(model, scale: float = 1.0):
    """Forward hooks making the source and target token embeddings leaves (times ``scale``), kept in a dict."""
    kept = {}

    def hook(name):
        def keep(_module, _inputs, output):
            kept[f"{name}_x"] = output.detach()
            kept[name] = (output.detach() * scale).requires_grad_(True)
            return kept[name]
        return keep
    handles = [model.src_embedding.tokens.register_forward_hook(hook("s")),
               model.tgt_embedding.tokens.register_forward_hook(hook("t"))]
    return kept, handles


def logit_differences(model, src, out, foil: int, scale: float = 1.0):
    """logit(y_t) − logit(foil) per step with the token embeddings times ``scale``, and the leaves."""
    kept, handles = embedding_leaves(model, scale)
    try:
        logits, _ = model(torch.tensor([src]), torch.tensor([decoder_input(model, out)]))
    finally:
        for handle in handles:
            handle.remove()
    steps = torch.arange(len(out))
    return logits[0, steps, torch.tensor(out)] - logits[0, :, foil], kept


# ---------------------------------------------------------------------------------------------- gradients


def test_contrastive_input_x_gradient_is_the_gradient_of_the_logit_difference_written_out():
    model = random_model("transformer-preln")
    maps = input_x_gradient(model, SOURCE, OUTPUT, contrast=every_step(len(OUTPUT), FOIL))
    plain = input_x_gradient(model, SOURCE, OUTPUT)
    for step in range(len(OUTPUT)):
        differences, kept = logit_differences(model, SOURCE, OUTPUT, FOIL)
        source, target = torch.autograd.grad(differences[step], (kept["s"], kept["t"]))
        assert np.abs(maps.source[step] - (kept["s_x"] * source)[0].norm(dim=-1).numpy()).max() < 1e-5
        assert np.abs(maps.target[step] - (kept["t_x"] * target)[0].norm(dim=-1).numpy()).max() < 1e-5
    assert not np.allclose(maps.source, plain.source)
    assert maps.contrast == (FOIL,) * len(OUTPUT) and plain.contrast is None


def test_a_contrast_at_one_step_changes_that_step_alone():
    model = random_model("transformer-postln")
    plain = input_x_gradient(model, SOURCE, OUTPUT)
    maps = contributions("input_x_gradient", model, SOURCE, OUTPUT, contrast=one_step(len(OUTPUT), 2, FOIL))
    others = [step for step in range(len(OUTPUT)) if step != 2]
    assert np.allclose(maps.source[others], plain.source[others], atol=1e-6)
    assert not np.allclose(maps.source[2], plain.source[2])


def test_contrastive_integrated_gradients_are_complete_on_the_logit_difference():
    """Σ x ⊙ ∫₀¹ ∇(logit(y) − logit(y′))(αx) dα equals that difference at x less at the zero embeddings, both
    computed here by two forward passes (512 nodes: the feed-forward's ReLU makes the path piecewise smooth, so the
    quadrature converges slowly); and the adapted method's completeness error is within its tolerance."""
    model = random_model("transformer-preln")
    contrast = every_step(len(OUTPUT), FOIL)
    nodes, weights = gauss_legendre(512)
    found = weighted_gradients(model, SOURCE, OUTPUT, foils=[FOIL] * len(OUTPUT),
                               points=[(step, float(node), float(weight)) for step in range(len(OUTPUT))
                                       for node, weight in zip(nodes, weights)])
    source, target = found.attributions()
    total = (source.sum(dim=(1, 2)) + target.sum(dim=(1, 2))).float()
    with torch.no_grad():
        change = logit_differences(model, SOURCE, OUTPUT, FOIL)[0] - logit_differences(model, SOURCE, OUTPUT, FOIL,
                                                                                       scale=0.0)[0]
    assert torch.allclose(total, change, rtol=0, atol=5e-3), (total, change)
    maps = integrated_gradients(model, SOURCE, OUTPUT, contrast=contrast)
    assert maps.completeness.max() <= COMPLETENESS_TOLERANCE and maps.contrast == contrast


def test_contrastive_integrated_gradients_on_the_en_es_demo():
    translator = demo("en-es-transformer")
    src, out = demo_pair(translator)
    maps = integrated_gradients(translator.model, src, out, contrast=one_step(len(out), 1, FOIL))
    assert maps.completeness[1] <= COMPLETENESS_TOLERANCE, maps.completeness_line()


def test_bad_contrasts_are_one_line_each():
    model = random_model("transformer-preln")
    size = model.config.tgt_vocab_size
    with pytest.raises(ContributionError, match=f"contrast token id {size} is not in the model's vocabulary"):
        input_x_gradient(model, SOURCE, OUTPUT, contrast=every_step(len(OUTPUT), size))
    with pytest.raises(ContributionError, match="step 6 is beyond the output: it has 6 steps"):
        one_step(len(OUTPUT), 6, FOIL)
    with pytest.raises(ContributionError, match="value-weighted norms explains no token's score"):
        contributions("value_norms", model, SOURCE, OUTPUT, contrast=every_step(len(OUTPUT), FOIL))
    with pytest.raises(ContributionError, match="one token per output step: 6 steps, 2 given"):
        alti_logit(model, SOURCE, OUTPUT, contrast=(FOIL, FOIL))


# ---------------------------------------------------------------------------------------------- ALTI-Logit


def assert_alti_logit_adds_up(model, src, out, *, prompt: bool = False) -> None:
    """The terms add up to the model's logit, and with a contrast to the logit difference (1e-4 relative to
    the logit's size); the heads' per-token updates add up to what ALTI+ carries to the input tokens."""
    captured = capture_forward(model, src, out)
    logits = captured.logits[0].float()
    steps = torch.arange(len(out))
    for contrast in (None, every_step(len(out), FOIL)):
        maps = alti_logit(model, src, out, captured=captured, contrast=contrast)
        terms = maps.logit_terms
        rest = terms["embedding"] + terms["bias"] + terms["feed_forward"].sum(axis=0)
        heads = sum(update.sum(axis=(0, 2)) for updates in maps.layers.values() for update in updates)
        inputs = maps.target.sum(axis=1) + (0 if prompt else maps.source.sum(axis=1))
        expected = (logits[steps, torch.tensor(out)] - (0 if contrast is None else logits[:, FOIL])).numpy()
        logit = terms["logit"][len(src) - 1:] if prompt else terms["logit"]
        scale = max(1.0, float(np.abs(expected).max()))
        assert np.abs(logit - expected).max() <= 1e-4 * scale
        assert np.abs(rest + heads - terms["logit"]).max() <= 1e-4 * scale
        assert np.abs(rest + inputs - terms["logit"]).max() <= 1e-4 * scale


@pytest.mark.parametrize("name", ["en-es-transformer", "en-es-transformer-postln"])
def test_alti_logit_adds_up_to_the_logit_and_the_difference_on_the_en_es_demos(name):
    translator = demo(name)
    assert_alti_logit_adds_up(translator.model, *demo_pair(translator))


def test_alti_logit_adds_up_on_the_decoder_only_demo():
    translator = demo("piglatin-decoder-only")
    result = translator.translate("hello world")
    assert_alti_logit_adds_up(translator.model, list(result.prompt_ids), result.token_ids, prompt=True)


ENCODER_DECODERS = {  # family: the import test module and how its builder writes a folder
    "marian": ("test_import_marian", lambda module, folder: module.build_marian(folder)),
    "mbart": ("test_import_hf_bart", lambda module, folder: module.build(folder, "mbart")),
    "t5 v1.1": ("test_import_t5", lambda module, folder: module.build(folder, "v1.1")),
}


@pytest.mark.parametrize("family", list(ENCODER_DECODERS))
def test_alti_logit_adds_up_on_converted_encoder_decoder_families(family, tmp_path):
    """Marian (post-LN, sinusoids), mBART (pre-LN, final norms), T5 v1.1 (RMS norms, no biases, a logit scale)."""
    pytest.importorskip("transformers")
    import importlib

    from models.importers import convert
    from models.inference.translator import Translator

    module, build = ENCODER_DECODERS[family]
    folder, *_ = build(importlib.import_module(f"tests.{module}"), tmp_path)
    translator = Translator(convert(folder))
    text = "the cat sees a big house"
    assert_alti_logit_adds_up(translator.model, translator.source(text).ids,
                              translator.translate(text, max_len=6).token_ids)


@pytest.mark.parametrize("family", ["gpt2", "llama", "gemma2"])
def test_alti_logit_adds_up_on_converted_decoder_only_families(family, tmp_path):
    """GPT-2 (LayerNorm), Llama (RMS norm, grouped-query attention) and Gemma 2 (sandwich norms; its logits are
    soft-capped, c·tanh(z/c): the terms add up to z, the logit before the cap)."""
    pytest.importorskip("transformers")
    from models.importers import convert
    from tests.test_decoder_only import SENTENCES, build, encode

    build(tmp_path / family, family)
    model = convert(tmp_path / family).model
    prompt, continuation = encode(tmp_path / family, SENTENCES[0]), encode(tmp_path / family, SENTENCES[2])[:6]
    logits = capture_forward(model, prompt, continuation).logits[0].float()
    cap = model.config.logit_softcap
    if cap:
        logits = cap * torch.atanh(logits / cap)
    steps = torch.arange(len(continuation))
    for contrast in (None, every_step(len(continuation), FOIL)):
        maps = alti_logit(model, prompt, continuation, contrast=contrast)
        terms = maps.logit_terms
        expected = logits[steps, torch.tensor(continuation)] - (0 if contrast is None else logits[:, FOIL])
        total = terms["embedding"] + terms["bias"] + terms["feed_forward"].sum(axis=0) + maps.target.sum(axis=1)
        assert np.abs(terms["logit"][len(prompt) - 1:] - expected.numpy()).max() <= 1e-4 * max(
            1.0, float(expected.abs().max()))
        assert np.abs(total - terms["logit"]).max() <= 1e-4 * max(1.0, float(expected.abs().max()))


def test_alti_logit_of_random_pre_and_post_ln_models_with_other_norms():
    for arch, overrides in (("transformer-preln", dict(norm_kind="rms", pre_norm_kv=True)),
                            ("transformer-postln", dict(norm_kind="unbiased_std", residual_scale=1.5))):
        assert_alti_logit_adds_up(random_model(arch, **overrides), SOURCE, OUTPUT)


@torch.no_grad()
def test_a_layers_update_is_the_formula_written_out_on_the_decoder_only_demo():
    """Δlogit^{l,h}_{t←j} = α^h_tj (RMS(x_j) W_V^h) W_O^h · r_t, r_t = γ ⊙ (u_y − u_y′) / √(mean(h_t²) + ε) (the
    prompt's rows predict the prompt's next token, with no foil): the
    value projection's output read by a hook, the final stream h_t by a hook on the final norm; and the input
    tokens' terms are Σ_l (Σ_h Δ^l) R^{l−1}, R^l the product of ALTI+'s per-layer maps (R^{−1} the identity)."""
    model = demo("piglatin-decoder-only").model
    result = demo("piglatin-decoder-only").translate("hello world")
    prompt, out = list(result.prompt_ids), result.token_ids
    sequence = prompt + out[:-1]
    predicted = torch.tensor(prompt[1:] + out)
    values, final = {}, {}
    handles = [layer.attention.value.register_forward_hook(
        lambda _m, _i, output, index=index: values.update({index: output[0].detach()}))
        for index, layer in enumerate(model.layers)]
    handles.append(model.norm.register_forward_pre_hook(lambda _m, args: final.update(h=args[0][0].detach())))
    with torch.no_grad():
        _, intermediates = model(torch.zeros(1, 0, dtype=torch.long), torch.tensor([sequence]), need_weights=True)
    for handle in handles:
        handle.remove()
    h = final["h"]
    unembedding = model.output.weight[predicted].clone()
    unembedding[len(prompt) - 1:] -= model.output.weight[FOIL]  # the foil at the continuation's rows alone
    readout = model.norm.weight * unembedding / torch.sqrt(h.pow(2).mean(-1, keepdim=True) + model.norm.eps)
    maps = alti_logit(model, prompt, out, contrast=every_step(len(out), FOIL))
    alti = contributions("alti", model, prompt, out)
    rolled, mixture = 0, np.eye(len(sequence))
    for index, layer in enumerate(model.layers):
        attention = layer.attention
        weights = intermediates.attention["dec_self"][index][0]  # [H, n, n]
        expected = torch.zeros_like(weights)
        for head in range(attention.heads):
            columns = slice(head * attention.head_dim, (head + 1) * attention.head_dim)
            moved = values[index][:, columns] @ attention.output.weight[:, columns].T  # [n, E]
            expected[head] = weights[head] * (readout @ moved.T)
        assert np.abs(maps.layers["dec_self"][index] - expected.numpy()).max() < 1e-4, index
        rolled = rolled + expected.sum(0).numpy() @ mixture
        mixture = alti.layers["dec_self"][index] @ mixture
    assert np.abs(maps.target - rolled).max() < 1e-4


@torch.no_grad()
def test_a_pre_ln_layers_update_is_the_formula_written_out_on_the_en_es_demo():
    """The en-es pre-LN demo's decoder heads: α^h_tj (x_j W_V^h + b_V^h) W_O^h · r_t, r_t the final LayerNorm's
    readout (γ ⊙ u − mean(γ ⊙ u)) / √(var(h_t) + ε); its values read the un-normalised input."""
    translator = demo("en-es-transformer")
    model = translator.model
    src, out = demo_pair(translator)
    values, final = {}, {}
    blocks = [(kind, index, getattr(layer, name).attention) for index, layer in enumerate(model.decoder_layers)
              for kind, name in (("dec_self", "self_attention"), ("cross", "cross_attention"))]
    handles = [attention.value.register_forward_hook(
        lambda _m, _i, output, key=(kind, index): values.update({key: output[0].detach()}))
        for kind, index, attention in blocks]
    handles.append(model.decoder_norm.register_forward_pre_hook(lambda _m, args: final.update(h=args[0][0])))
    with torch.no_grad():
        _, intermediates = model(torch.tensor([src]), torch.tensor([decoder_input(model, out)]), need_weights=True)
    for handle in handles:
        handle.remove()
    h, norm = final["h"], model.decoder_norm
    weighted = norm.weight * model.output.weight[torch.tensor(out)]
    readout = (weighted - weighted.mean(-1, keepdim=True)) / torch.sqrt(h.var(-1, unbiased=False, keepdim=True)
                                                                         + norm.eps)
    maps = alti_logit(model, src, out)
    for kind, index, attention in blocks:
        weights = intermediates.attention[kind][index][0]
        expected = torch.stack([
            weights[head] * (readout @ (values[kind, index][:, head * attention.head_dim:(head + 1)
                                                            * attention.head_dim]
                                        @ attention.output.weight[:, head * attention.head_dim:
                                                                  (head + 1) * attention.head_dim].T).T)
            for head in range(attention.heads)])
        assert np.abs(maps.layers[kind][index] - expected.numpy()).max() < 1e-4, (kind, index)


def test_alti_logit_is_refused_in_one_line_where_it_does_not_apply():
    gru = random_model("gru-additive")
    with pytest.raises(ContributionError, match="ALTI-Logit needs Transformer blocks"):
        alti_logit(gru, SOURCE, OUTPUT)
    encoder = demo("english-encoder-only").model
    with pytest.raises(ContributionError, match="ALTI-Logit explains a decoder's logits"):
        alti_logit(encoder, [5, 6, 7], [])


# ---------------------------------------------------------------------------------------------- command line


def test_export_writes_contrastive_gradients_and_alti_logit(capsys, tmp_path):
    from tests.test_cli import cli

    translator = demo("en-es-transformer")
    text = "The cat sits on the mat."
    src, out = demo_pair(translator, text)
    foil = translator.target_tokenizer.token(FOIL)
    output = tmp_path / "contrast.npz"
    code, _, err = cli(capsys, "export", "-c", "en-es-transformer", "--contributions", "--ig-steps", "8",
                       "--contrast", foil, "--contrast-step", "1", text, "-o", output)
    assert code == 0, err
    contrast = one_step(len(out), 1, FOIL)
    with np.load(output) as arrays:
        assert arrays["contrast_ids"].tolist() == [-1 if token is None else token for token in contrast]
        ixg = input_x_gradient(translator.model, src, out, contrast=contrast)
        np.testing.assert_allclose(arrays["ixg_source"], ixg.source, atol=1e-6)
        maps = alti_logit(translator.model, src, out, contrast=contrast)
        np.testing.assert_allclose(arrays["alti_logit_source"], maps.source, atol=1e-5)
        np.testing.assert_allclose(arrays["alti_logit_dec_self_L0"], maps.layers["dec_self"][0], atol=1e-5)
        terms = sum(arrays[f"alti_logit_{name}"] for name in ("embedding", "bias")) + arrays[
            "alti_logit_feed_forward"].sum(0) + arrays["alti_logit_source"].sum(1) + arrays["alti_logit_target"].sum(1)
        np.testing.assert_allclose(terms, arrays["alti_logit_logit"], atol=1e-4)
        plain = alti_logit(translator.model, src, out)
        assert arrays["alti_logit_logit"][0] == pytest.approx(plain.logit_terms["logit"][0], abs=1e-5)
        assert arrays["alti_logit_logit"][1] != pytest.approx(plain.logit_terms["logit"][1], abs=1e-3)


def test_render_draws_a_contrastive_map_titled_with_the_difference(capsys, tmp_path):
    from tests.test_cli import cli

    output = tmp_path / "alti-logit.svg"
    code, _, err = cli(capsys, "render", "-c", "en-es-transformer", "--kind", "cross", "--head", "rollout",
                       "--show", "alti_logit", "--contrast", "▁el", "The cat.", "-o", output)
    assert code == 0, err
    drawn = output.read_text(encoding="utf-8")
    assert "ALTI-Logit" in drawn and "logit(y) − logit(‘▁el’)" in drawn


def test_bad_contrasts_on_the_command_line_are_one_line_each(capsys, tmp_path):
    from tests.test_cli import assert_one_line_error, cli

    common = ["-c", "en-es-transformer", "The cat."]
    cases = (
        (["export", *common, "--contributions", "--contrast", "zzqqxxyy", "-o", tmp_path / "a.npz"],
         "contrast token 'zzqqxxyy' is not in the model's target vocabulary: it is"),
        (["export", *common, "--contributions", "--contrast", "▁el", "--contrast-step", "99", "-o",
          tmp_path / "a.npz"], "step 99 is beyond the output: it has"),
        (["export", *common, "--contrast", "▁el", "-o", tmp_path / "a.npz"], "add --contributions"),
        (["render", *common, "--kind", "cross", "--contrast", "▁el", "-o", tmp_path / "a.png"], "add --show"),
        (["render", *common, "--kind", "cross", "--show", "alti", "--contrast", "▁el", "-o", tmp_path / "a.png"],
         "ALTI+ explains no token's score"),
        (["export", *common, "--contributions", "--contrast-step", "1", "-o", tmp_path / "a.npz"],
         "give --contrast too"),
    )
    for command, fragment in cases:
        code, _, err = cli(capsys, *command)
        assert_one_line_error(code, err, fragment)
    assert not any(tmp_path.iterdir())
