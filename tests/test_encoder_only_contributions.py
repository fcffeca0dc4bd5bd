"""Contributions, head statistics and head importance of encoder-only models (BERT, RoBERTa, DistilBERT), checked
against transformers' own random-weight models (tests/test_encoder_only.py builds them) converted by the hf-encoder
importer. A sentence's positions are both the rows and the columns: each post-LN block's terms add up to its output
(its input is transformers' hidden state), ALTI+'s rows are shares and their rollout is the product of the blocks,
value norms are ‖α_ij (x_j W_V + b_V) W_O^h‖ on transformers' weights, the gradients of each mask's most likely token
are written out with transformers' autograd and integrated gradients are complete, and head importance by the masked
tokens' NLL equals each head switched off alone. A plain sentence is masked at 15 % by a hash (the same every run)."""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
transformers = pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

from attnviz.cli import main  # noqa: E402
from models.analysis.alti import block_terms  # noqa: E402
from models.analysis.contributions import CONTRIBUTION_METHODS, capture_forward, corpus_coverage  # noqa: E402
from models.analysis.encoder_only import masked_corpus  # noqa: E402
from models.analysis.head_stats import corpus_head_stats  # noqa: E402
from models.analysis.importance import (  # noqa: E402
    ablation_importance, encode_references, gradient_importance,
)
from models.analysis.pruning import prune_curves  # noqa: E402
from models.analysis.methods import contribution_arrays, contributions  # noqa: E402
from models.errors import InputError  # noqa: E402
from models.importers import convert  # noqa: E402
from models.inference.translator import Translator  # noqa: E402
from models.nn.ablation import Ablation  # noqa: E402
from models.storage.checkpoint import save_checkpoint  # noqa: E402
from models.text.masking import MASK_SHARE, hashed_mask_positions  # noqa: E402
from tests.test_encoder_only import FAMILIES, MASK, build, encode  # noqa: E402

HEADS = 4


@pytest.fixture(scope="module", params=FAMILIES)
def enc(request, tmp_path_factory):
    """(family, transformers model, our model, the ids of a sentence with two masks)."""
    family = request.param
    folder = tmp_path_factory.mktemp(family)
    original = build(folder, family)
    ids = encode(folder, f"the {MASK[family]} of france is {MASK[family]} .")
    model = convert(folder).model
    assert ids.count(model.config.mask_id) == 2
    return family, original, model, ids


def hf_layers(original, family: str):
    return original.distilbert.transformer.layer if family == "distilbert" else \
        getattr(original, family).encoder.layer


def hf_values(layer, family: str) -> tuple[torch.nn.Linear, torch.nn.Linear]:
    """A layer's value projection and its attention's output projection."""
    if family == "distilbert":
        return layer.attention.v_lin, layer.attention.out_lin
    return layer.attention.self.value, layer.attention.output.dense


def word_embeddings(original, family: str) -> torch.nn.Embedding:
    return getattr(original, family).embeddings.word_embeddings


def run(original, ids: list[int]):
    with torch.no_grad():
        return original(input_ids=torch.tensor([ids]), output_attentions=True, output_hidden_states=True)


def test_each_blocks_terms_add_up_to_its_output_from_transformers_hidden_states(enc):
    family, original, model, ids = enc
    captured = capture_forward(model, ids, [])
    reference = run(original, ids)
    assert captured.logits.shape[1] == len(ids)
    assert torch.allclose(captured.logits, reference.logits, atol=1e-4)
    for index in range(len(hf_layers(original, family))):
        block = captured.blocks[("enc_self", index)]
        assert (block["x"][0] - reference.hidden_states[index][0]).abs().max() < 1e-4  # the block reads theirs
        assert torch.allclose(block["weights"][0], reference.attentions[index][0], atol=1e-5)
        terms = block_terms(block)
        output = block["output"][0]
        assert (terms.total() - output).abs().max() <= 1e-4 * output.abs().max()


def test_alti_rows_are_shares_and_the_rollout_is_the_product_of_the_blocks(enc):
    family, _, model, ids = enc
    maps = contributions("alti", model, ids, [])
    n = len(ids)
    assert [block.shape for block in maps.layers["enc_self"]] == [(n, n)] * 2
    for matrix in [*maps.layers["enc_self"], maps.source]:
        assert matrix.min() >= 0.0
        assert np.allclose(matrix.sum(axis=1), 1.0, atol=1e-5)
    product = maps.layers["enc_self"][1].astype(np.float64) @ maps.layers["enc_self"][0]
    assert np.allclose(maps.source, product, atol=1e-5)
    assert maps.target is None and maps.source_contribution is None  # no target side to share with


def test_value_norms_are_the_formula_on_transformers_weights(enc):
    """‖α_ij^h · (x_j W_V + b_V)^h W_O^h‖ (Kobayashi et al. 2020), x_j the layer's input (post-LN: as it is)."""
    family, original, model, ids = enc
    maps = contributions("value_norms", model, ids, [])
    reference = run(original, ids)
    for index, layer in enumerate(hf_layers(original, family)):
        value, output = hf_values(layer, family)
        with torch.no_grad():
            x = reference.hidden_states[index][0]  # [n, E]
            v = value(x).view(len(ids), HEADS, -1)  # [n, H, D]
            w_o = output.weight.T.reshape(HEADS, v.shape[-1], -1)  # [H, D, E]
            f = torch.stack([v[:, head] @ w_o[head] for head in range(HEADS)])  # [H, n, E]
            expected = reference.attentions[index][0] * f.norm(dim=-1)[:, None, :]
        assert maps.layers["enc_self"][index].shape == (HEADS, len(ids), len(ids))
        assert np.allclose(maps.layers["enc_self"][index], expected.numpy(), rtol=1e-4, atol=1e-5)


def _mask_log_probs(original, family: str, ids: list[int], embeddings: torch.Tensor, rows) -> torch.Tensor:
    """log p of each mask's token ``[B, M]`` from transformers' model fed token embeddings ``[B, n, E]`` (its own
    positions and token types added)."""
    logits = original(inputs_embeds=embeddings).logits.float()  # [B, n, V]
    positions, tokens = rows
    return torch.log_softmax(logits[:, positions], dim=-1).gather(2, torch.tensor(tokens).expand(
        len(embeddings), -1)[..., None])[..., 0]


def test_gradients_of_each_masks_top_token_are_the_formulas_with_transformers(enc):
    family, original, model, ids = enc
    positions = [index for index, token in enumerate(ids) if token == model.config.mask_id]
    reference = run(original, ids)
    tokens = [int(reference.logits[0, position].argmax()) for position in positions]  # the most likely: attributed
    with torch.no_grad():
        x = word_embeddings(original, family)(torch.tensor(ids))
    leaf = x.clone().requires_grad_(True)
    log_p = _mask_log_probs(original, family, ids, leaf[None], (positions, tokens))[0]
    expected = torch.stack([torch.autograd.grad(log_p[row], leaf, retain_graph=True)[0] * x
                            for row in range(len(positions))])
    ixg = contributions("input_x_gradient", model, ids, [])
    assert ixg.source.shape == (2, len(ids)) and ixg.layers["enc_self"][0].shape == (2, len(ids))
    assert np.allclose(ixg.source, expected.norm(dim=-1).detach().numpy(), rtol=1e-3, atol=1e-6)

    nodes, weights = np.polynomial.legendre.leggauss(16)
    alphas, weights = torch.tensor((nodes + 1) / 2, dtype=torch.float32), torch.tensor(weights / 2).double()
    integral = torch.zeros(len(positions), len(ids), x.shape[-1], dtype=torch.float64)
    for row in range(len(positions)):
        scaled = (alphas[:, None, None] * x[None]).requires_grad_(True)
        chosen = _mask_log_probs(original, family, ids, scaled, (positions, tokens))[:, row]
        (gradient,) = torch.autograd.grad(chosen.sum(), scaled)
        integral[row] = (gradient.double() * weights[:, None, None]).sum(dim=0)
    attributions = x.double()[None] * integral
    with torch.no_grad():
        ends = _mask_log_probs(original, family, ids, torch.stack([torch.zeros_like(x), x]), (positions, tokens))
    change = (ends[1] - ends[0]).double()
    ig = contributions("integrated_gradients", model, ids, [], ig_steps=16)
    assert np.allclose(ig.source, attributions.norm(dim=-1).numpy(), rtol=1e-3, atol=1e-6)
    errors = (attributions.sum(dim=(1, 2)) - change).abs() / change.abs().clamp_min(1e-3)
    assert np.allclose(ig.completeness, errors.numpy(), rtol=1e-2, atol=1e-4)
    complete = contributions("integrated_gradients", model, ids, [], ig_steps=256)
    assert complete.completeness.max() <= 0.05  # the attributions add up to the change from the zero embeddings


def test_value_zeroing_is_transformers_layers_cosine_distance_with_a_value_zeroed(enc):
    """Mohebbi et al. (2023): 1 − cos(y_i, y_i with token j's value zeroed in every head), y the whole layer's output
    (attention block and feed-forward), each row divided by its sum; written with transformers' layers."""
    family, original, model, ids = enc
    maps = contributions("value_zeroing", model, ids, [])
    reference = run(original, ids)
    for index, layer in enumerate(hf_layers(original, family)):
        value, _ = hf_values(layer, family)
        x = reference.hidden_states[index]

        def output():
            with torch.no_grad():
                y = layer(x)
            return (y[0] if isinstance(y, tuple) else y)[0].double()

        original_output = output()
        columns = []
        for key in range(len(ids)):
            zeroed = lambda _m, _i, out, key=key: out.index_fill(1, torch.tensor([key]), 0.0)  # noqa: E731
            handle = value.register_forward_hook(zeroed)
            changed = output()
            handle.remove()
            columns.append(1 - torch.nn.functional.cosine_similarity(changed, original_output, dim=-1))
        distances = torch.stack(columns, dim=1)
        expected = distances / distances.sum(dim=1, keepdim=True)
        assert np.allclose(maps.layers["enc_self"][index], expected.numpy(), atol=2e-5)


def test_every_method_applies_and_a_head_switched_off_contributes_nothing(enc):
    family, _, model, ids = enc
    # every method but ALTI-Logit, which explains a decoder's logits (a masked LM's head is not linear)
    assert all(method.applies(model) for name, method in CONTRIBUTION_METHODS.items() if name != "alti_logit")
    assert "decodes nothing" in CONTRIBUTION_METHODS["alti_logit"].unavailable(model)
    off = Ablation.of([("enc_self", 1, 2)])
    norms = contributions("value_norms", model, ids, [], ablation=off)
    assert float(np.abs(norms.layers["enc_self"][1][2]).max()) == 0.0
    assert float(np.abs(norms.layers["enc_self"][1][1]).max()) > 0.0
    zeroing = contributions("value_zeroing", model, ids, [])
    for shares, rounding in zip(zeroing.layers["enc_self"], zeroing.rounding_rows["enc_self"]):
        assert shares.shape == (len(ids), len(ids)) and shares.min() >= 0.0
        assert np.allclose(shares.sum(axis=1)[~np.asarray(rounding, dtype=bool)], 1.0, atol=1e-5)
    arrays = contribution_arrays(model, ids, [], ig_steps=4)
    n = len(ids)
    assert arrays["alti_enc_self_L0"].shape == (n, n) and arrays["norm_enc_self_L1"].shape == (HEADS, n, n)
    assert arrays["alti_source"].shape == (n, n) and "alti_target" not in arrays
    assert arrays["ixg_source"].shape == (2, n) and arrays["ig_completeness"].shape == (2,)
    plain = [token for token in ids if token != model.config.mask_id]  # no mask: nothing for the gradients
    assert "ixg_source" not in contribution_arrays(model, plain, [])
    with pytest.raises(InputError, match="mask"):
        contributions("input_x_gradient", model, plain, [])


def test_a_bare_encoder_gives_every_map_but_the_gradients(tmp_path):
    """A bare BertModel (no MLM head): ALTI+, value norms and value zeroing over its sentence; the gradients of a
    mask's prediction need the head (left out of the export, one line when asked for)."""
    build(tmp_path, "bert", head=False)
    model = convert(tmp_path).model
    assert not model.has_predictions
    ids = encode(tmp_path, "the [MASK] sat on the mat .")
    arrays = contribution_arrays(model, ids, [])
    assert arrays["alti_source"].shape == (len(ids), len(ids)) and "ig_source" not in arrays
    with pytest.raises(InputError, match="predictions need the head"):
        contributions("integrated_gradients", model, ids, [])


SENTENCES = ["the capital of france is paris .", "the cat sat on the mat .", "she reads the book that the cat wrote .",
             "paris is a city in france ."]


def _masked_nll(translator, rows, ablation: Ablation) -> float:
    """The pooled NLL of every row's masked tokens ``(input ids, answer ids)``, one sentence at a time."""
    total, tokens = 0.0, 0
    for masked, filled in rows:
        with torch.no_grad():
            logits, _ = translator.model(torch.tensor([masked]), ablation=ablation)
        log_probs = torch.log_softmax(logits[0].double(), dim=-1)
        for position, token in enumerate(masked):
            if token == translator.config.mask_id:
                total -= float(log_probs[position, filled[position]])
                tokens += 1
    return total / tokens


def _hashed(translator, sentence: str) -> tuple[list[int], list[int]]:
    """A plain sentence masked as documented: of its tokens but the framing [CLS]/[SEP], those whose hash unit
    sha256("mask:{sentence}:{i}") (i counting those tokens) is below 0.15, or the one of least hash."""
    import hashlib

    ids = translator.source(sentence).ids
    framing = {translator.config.bos_id, translator.config.eos_id, translator.config.pad_id}
    candidates = [index for index, token in enumerate(ids) if token not in framing]
    units = [int.from_bytes(hashlib.sha256(f"mask:{sentence}:{i}".encode()).digest()[:8], "big") / 2**64
             for i in range(len(candidates))]
    chosen = [candidates[i] for i, unit in enumerate(units) if unit < 0.15] or [candidates[int(np.argmin(units))]]
    return [translator.config.mask_id if index in chosen else token for index, token in enumerate(ids)], ids


@pytest.mark.parametrize("family", ["bert", "distilbert"])
def test_head_importance_by_masked_nll_is_each_head_switched_off_alone(family, tmp_path):
    folder = tmp_path / family
    build(folder, family)
    translator = Translator(convert(folder), device="cpu")
    mask = MASK[family]
    lines = [(f"the capital of {mask} is paris .", "the capital of france is paris ."),
             (f"the {mask} sat on the {mask} .", "the cat sat on the mat ."),
             ("she reads the book that the cat wrote .", "she reads the book that the cat wrote .")]  # by hash
    rows = [(translator.source(masked).ids, translator.source(filled).ids) for masked, filled in lines[:2]]
    rows.append(_hashed(translator, lines[2][0]))
    assert [(ids, answers) for ids, answers, _ in encode_references(translator, lines)[0]] == rows
    result = ablation_importance(translator, lines, tokens_per_pass=64)  # several passes, heads widened in each
    assert result.baseline == pytest.approx(_masked_nll(translator, rows, Ablation()), rel=1e-5)
    layers, heads = translator.model.attention_shape()["enc_self"]
    assert result.scores["enc_self"].shape == (layers, heads)
    for layer in range(layers):
        for head in range(heads):
            expected = _masked_nll(translator, rows, Ablation.of([("enc_self", layer, head)]))
            assert result.scores["enc_self"][layer, head] == pytest.approx(expected, rel=1e-5)
    gradient = gradient_importance(translator, lines)
    assert gradient.baseline == pytest.approx(result.baseline, rel=1e-5)
    curves = prune_curves(translator, lines, result, tokens_per_pass=64)
    assert curves.curves["increasing"][0] == pytest.approx(result.baseline, rel=1e-5)
    every = Ablation.of(curves.orders["decreasing"])
    assert curves.curves["decreasing"][-1] == pytest.approx(_masked_nll(translator, rows, every), rel=1e-5)


def test_a_line_whose_filled_sentence_does_not_match_is_one_line(tmp_path):
    build(tmp_path, "bert")
    translator = Translator(convert(tmp_path), device="cpu")
    with pytest.raises(InputError, match="pair 1: the filled sentence must be the masked one"):
        encode_references(translator, [("the [MASK] sat .", "the cat sat on the mat .")])
    with pytest.raises(InputError, match="pair 1: the sentence has no mask token and is not its filled sentence"):
        encode_references(translator, [("the cat sat .", "the dog sat .")])


def test_plain_sentences_are_masked_at_15_percent_by_a_hash_the_same_every_run():
    first = [hashed_mask_positions(f"sentence {index}", 40) for index in range(400)]
    assert first == [hashed_mask_positions(f"sentence {index}", 40) for index in range(400)]
    share = sum(len(chosen) for chosen in first) / (400 * 40)
    assert abs(share - MASK_SHARE) < 0.02
    assert all(chosen == sorted(chosen) and all(0 <= i < 40 for i in chosen) for chosen in first)
    assert all(len(hashed_mask_positions(f"short {index}", 2)) >= 1 for index in range(50))  # one at least
    assert hashed_mask_positions("anything", 0) == []
    assert masked_corpus(["a [MASK] .\ta cat .", "", "plain words"]) == [("a [MASK] .", "a cat ."),
                                                                         ("plain words", "plain words")]
    from pathlib import Path

    documented = (Path(__file__).resolve().parent.parent / "docs" / "ARCHITECTURE.md").read_text(encoding="utf-8")
    assert "15 %" in documented and "masking.py" in documented


def test_head_statistics_run_each_sentence_alone(tmp_path):
    build(tmp_path, "roberta")
    translator = Translator(convert(tmp_path), device="cpu")
    pairs = [(sentence, sentence) for sentence in SENTENCES]
    batched = corpus_head_stats(translator, pairs, batch_size=4).runs["reference"]
    alone = corpus_head_stats(translator, pairs, batch_size=1).runs["reference"]
    entropy, rows = 0.0, 0
    for sentence in SENTENCES:
        ids = torch.tensor([translator.source(sentence).ids])
        with torch.no_grad():
            _, _, weights = translator.model.encode(ids, True)
        weights = torch.stack([layer[0] for layer in weights]).double()  # [L, H, n, n]
        entropy += -torch.special.xlogy(weights, weights).sum(-1).sum(-1)
        rows += ids.shape[1]
    assert np.allclose(batched.mean("enc_self", "entropy"), (entropy / rows).numpy(), rtol=1e-4, atol=1e-6)
    assert np.allclose(batched.mean("enc_self", "entropy"), alone.mean("enc_self", "entropy"), rtol=1e-5, atol=1e-7)
    assert batched.mean("enc_self", "padding").max() == 0.0


def test_the_commands_read_an_encoder_only_checkpoint(tmp_path, capsys):
    """importance, stats and contributions on a file of masked<TAB>filled lines and plain sentences, and export
    --contributions, on an encoder-only checkpoint (they refused it before)."""
    build(tmp_path / "bert", "bert")
    checkpoint = convert(tmp_path / "bert")
    path = save_checkpoint(tmp_path / "bert.safetensors", checkpoint.model, checkpoint.source_tokenizer,
                           target_tokenizer=checkpoint.target_tokenizer)
    data = tmp_path / "lines.txt"
    data.write_text("the capital of [MASK] is paris .\tthe capital of france is paris .\nthe cat sat on the mat .\n",
                    encoding="utf-8")
    assert main(["importance", "-c", str(path), "--data", str(data)]) == 0
    out = capsys.readouterr().out
    assert "2 sentences" in out and "encoder self-attention" in out.lower()
    assert main(["stats", "-c", str(path), "--data", str(data)]) == 0
    assert "enc" in capsys.readouterr().out.lower()
    assert main(["contributions", "-c", str(path), "--data", str(data), "--ig-steps", "8"]) == 0
    listed = capsys.readouterr().out
    assert "the capital of [MASK] is paris" in listed and "share of the masks' final states" in listed
    output = tmp_path / "run.npz"
    assert main(["export", "-c", str(path), "the capital of [MASK] is paris .", "--contributions", "--ig-steps", "4",
                 "-o", str(output)]) == 0
    with np.load(output) as written:
        n = len(written["src_ids"])
        assert written["alti_source"].shape == (n, n) and written["ig_source"].shape == (1, n)
        assert written["masked_positions"].tolist() == [4]


def test_corpus_coverage_of_an_encoder_only_model_is_the_context_share_of_its_masks(tmp_path):
    build(tmp_path, "distilbert")
    translator = Translator(convert(tmp_path), device="cpu")
    lines = [("the capital of [MASK] is paris .", "the capital of france is paris ."),
             ("the cat sat on the mat .", "the cat sat on the mat .")]
    scored = corpus_coverage(translator, lines)
    assert [pair.number for pair in sorted(scored, key=lambda pair: pair.number)] == [1, 2]
    for pair in scored:
        maps = contributions("alti", translator.model, list(pair.source_ids), [])
        masks = [i for i, token in enumerate(pair.source_ids) if token == translator.config.mask_id]
        context = np.mean([1.0 - maps.source[m, m] for m in masks])
        assert pair.coverage.avg_source == pytest.approx(context, abs=1e-6)
        assert 0.0 <= pair.coverage.avg_source <= 1.0
        assert len(pair.output_ids) == len(masks)  # the answer at each mask (the gradients' tokens)
