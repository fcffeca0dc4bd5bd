"""Contributions and head importance of decoder-only language models, checked against transformers' own models.

Tiny random-weight GPT-2, Llama (grouped-query attention), Mistral (a sliding window), Qwen2 (q/k/v biases), Qwen3
(q/k norms, one key/value head) and Gemma 2 (sandwich norms, soft-capping) models are built by transformers here
(tests/test_decoder_only.py) and converted by our importer. One prompt and a continuation are fed as one sequence
of n positions; every map is over that sequence, the prompt's columns first. Checked: the traced blocks' inputs
are transformers' hidden states and each block's terms add up to its output (the output continuing into
transformers' next hidden state), ALTI+ rows are shares, value norms are Kobayashi et al.'s formula written out on
transformers' weights, input × gradient and integrated gradients are the formulas computed with transformers'
model (and integrated gradients complete where its path is smooth), value zeroing is the layer's cosine distance
with a token's value zeroed, head importance by NLL equals the continuation's NLL with each head switched off
alone, and head statistics run each pair as one sequence.
"""

from __future__ import annotations

import os
import re

import numpy as np
import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
transformers = pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

from models.analysis.alti import block_terms  # noqa: E402
from models.analysis.contributions import (  # noqa: E402
    CONTRIBUTION_METHODS, capture_forward, corpus_coverage, source_coverage, value_zeroing,
)
from models.analysis.head_stats import corpus_head_stats  # noqa: E402
from models.analysis.importance import ablation_importance, gradient_importance  # noqa: E402
from models.analysis.pruning import prune_curves  # noqa: E402
from models.analysis.methods import contribution_arrays, contributions  # noqa: E402
from models.importers import convert  # noqa: E402
from models.inference.translator import Translator  # noqa: E402
from models.nn.ablation import Ablation  # noqa: E402
from tests.test_decoder_only import EOS, SENTENCES, build, encode  # noqa: E402

FAMILIES = ("gpt2", "llama", "mistral", "qwen2", "qwen3", "gemma2")


@pytest.fixture(scope="module", params=FAMILIES)
def lm(request, tmp_path_factory):
    """(family, transformers model, our model, prompt ids, continuation ids)."""
    folder = tmp_path_factory.mktemp(request.param) / "model"
    original = build(folder, request.param)
    prompt = encode(folder, SENTENCES[0])
    continuation = encode(folder, SENTENCES[2])[:6]
    return request.param, original, convert(folder).model, prompt, continuation


def hidden_states(original, sequence: list[int]):
    with torch.no_grad():
        return original(torch.tensor([sequence]), output_attentions=True, output_hidden_states=True)


def hf_layers(original, family: str):
    return original.transformer.h if family == "gpt2" else original.model.layers


def feed_forward_part(layer, family: str, y: torch.Tensor) -> torch.Tensor:
    """What transformers' layer adds after its attention block: its feed-forward sublayer's residual update."""
    if family == "gpt2":
        return layer.mlp(layer.ln_2(y))
    if family == "gemma2":
        return layer.post_feedforward_layernorm(layer.mlp(layer.pre_feedforward_layernorm(y)))
    return layer.mlp(layer.post_attention_layernorm(y))


def test_each_blocks_terms_add_up_to_its_output_and_the_output_is_transformers(lm):
    family, original, model, prompt, continuation = lm
    captured = capture_forward(model, prompt, continuation)
    sequence = prompt + continuation[:-1]
    assert captured.tgt_in[0].tolist() == sequence and captured.prompt_len == len(prompt)
    reference = hidden_states(original, sequence)
    layers = hf_layers(original, family)
    for index in range(len(layers)):
        block = captured.blocks[("dec_self", index)]
        x = block["x"][0]
        assert (x - reference.hidden_states[index][0]).abs().max() < 1e-4
        terms = block_terms(block)
        output = block["output"][0]
        assert (terms.total() - output).abs().max() <= 1e-4 * output.abs().max()
        if index + 1 < len(layers):  # the block's output continues, through transformers' MLP, into its next input
            with torch.no_grad():
                following = output + feed_forward_part(layers[index], family, output)
            assert (following - reference.hidden_states[index + 1][0]).abs().max() < 1e-4


def test_alti_rows_are_shares_and_the_prompt_share_is_their_prompt_columns(lm):
    family, _, model, prompt, continuation = lm
    maps = contributions("alti", model, prompt, continuation)
    n, p, t = len(prompt) + len(continuation) - 1, len(prompt), len(continuation)
    assert maps.prompt_len == p and [block.shape for block in maps.layers["dec_self"]] == [(n, n)] * 3
    for matrix in [*maps.layers["dec_self"], maps.target]:
        assert matrix.min() >= 0.0
        assert np.allclose(matrix.sum(axis=1), 1.0, atol=1e-5)
        assert np.all(np.triu(matrix, k=1) == 0.0)  # no position takes from a later one
    assert maps.target.shape == (n, n) and maps.source.shape == (t, p)
    assert np.array_equal(maps.source, maps.target[p - 1:, :p])
    share = maps.source_contribution
    assert share.shape == (t,) and np.all((share >= 0.0) & (share <= 1.0 + 1e-6))
    assert share[0] == pytest.approx(1.0, abs=1e-5)  # the first prediction reads the prompt alone
    coverage = source_coverage(maps)
    assert 0.0 <= coverage.avg_source <= 1.0 and 0 <= coverage.least_covered < p


def _values(layer, family: str, normed: torch.Tensor, heads: int) -> tuple[torch.Tensor, torch.Tensor]:
    """transformers' value vectors ``[n, G, D]`` of one layer and its output projection as ``[H, D, E]``."""
    n, width = normed.shape
    if family == "gpt2":  # Conv1D: x @ W + b, W [in, out]; c_attn gives q, k, v side by side
        v = layer.attn.c_attn(normed)[:, 2 * width:].view(n, heads, -1)
        return v, layer.attn.c_proj.weight.view(heads, -1, width)
    attention = layer.self_attn
    head_dim = attention.head_dim
    v = attention.v_proj(normed).view(n, -1, head_dim)
    return v, attention.o_proj.weight.T.reshape(heads, head_dim, -1)


def test_value_norms_are_the_formula_on_transformers_weights(lm):
    """‖α_ij^h · v_{g(h)}(x_j) W_O^h‖: the value vector of the key/value head query head h shares, through h's slice
    of the output projection (Kobayashi et al. 2020)."""
    family, original, model, prompt, continuation = lm
    maps = contributions("value_norms", model, prompt, continuation)
    sequence = prompt + continuation[:-1]
    reference = hidden_states(original, sequence)
    heads = 4
    for index, layer in enumerate(hf_layers(original, family)):
        with torch.no_grad():
            h = reference.hidden_states[index][0]
            normed = layer.ln_1(h) if family == "gpt2" else layer.input_layernorm(h)
            v, w_o = _values(layer, family, normed, heads)
            group = heads // v.shape[1]
            f = torch.stack([v[:, head // group] @ w_o[head] for head in range(heads)])  # [H, n, E]
            expected = reference.attentions[index][0] * f.norm(dim=-1)[:, None, :]
        assert maps.layers["dec_self"][index].shape == expected.shape
        assert np.allclose(maps.layers["dec_self"][index], expected.numpy(), rtol=1e-4, atol=1e-5)


def _log_probs(original, sequence: list[int], embeddings: torch.Tensor) -> torch.Tensor:
    """log p of each next token ``[B, n]`` from transformers' model fed token embeddings ``[B, n, E]`` (the positions
    its own: learned ones added, rotary ones applied)."""
    logits = original(inputs_embeds=embeddings).logits.float()  # [B, n, V]: position i predicts sequence[i + 1]
    targets = torch.tensor(sequence[1: logits.shape[1] + 1], dtype=torch.long)
    return torch.log_softmax(logits, dim=-1).gather(2, targets.expand(len(embeddings), -1)[..., None])[..., 0]


def _token_embeddings(original, family: str, sequence: list[int]) -> torch.Tensor:
    table = original.transformer.wte if family == "gpt2" else original.model.embed_tokens
    with torch.no_grad():
        x = table(torch.tensor(sequence))
    return x  # Gemma scales inside its model: what it looks up is x itself


def _integrated(original, family: str, full: list[int], nodes: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Integrated gradients written out with transformers' model: per row i (predicting full[i + 1]) and position j,
    x_j ⊙ Σ_k w_k ∇_{x_j} log p_i(α_k x), Gauss–Legendre nodes on [0, 1]; ``[n, n, E]`` and the change ``[n]``."""
    x = _token_embeddings(original, family, full)
    points, weights = np.polynomial.legendre.leggauss(nodes)
    alphas, weights = torch.tensor((points + 1) / 2, dtype=torch.float32), torch.tensor(weights / 2)
    n = len(full) - 1
    integral = torch.zeros(n, n, x.shape[-1], dtype=torch.float64)
    for row in range(n):
        scaled = (alphas[:, None, None] * x[None, :n]).requires_grad_(True)
        log_p = _log_probs(original, full[: n + 1], scaled)[:, row]
        (gradient,) = torch.autograd.grad(log_p.sum(), scaled)
        integral[row] = (gradient.double() * weights[:, None, None].double()).sum(dim=0)
    with torch.no_grad():
        ends = _log_probs(original, full[: n + 1], torch.stack([torch.zeros_like(x[:n]), x[:n]]))
    return x[:n].double()[None] * integral, (ends[1] - ends[0]).double()


@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_gradients_are_the_formulas_computed_with_transformers(family, tmp_path):
    folder = tmp_path / family
    original = build(folder, family)
    model = convert(folder).model
    prompt, continuation = encode(folder, SENTENCES[1]), encode(folder, SENTENCES[6])[:4]
    full = prompt + continuation
    n, p = len(full) - 1, len(prompt)
    x = _token_embeddings(original, family, full)[:n].clone().requires_grad_(True)
    log_p = _log_probs(original, full, x[None])[0]
    expected = torch.stack([torch.autograd.grad(log_p[row], x, retain_graph=True)[0] * x for row in range(n)])
    ixg = contributions("input_x_gradient", model, prompt, continuation)
    assert ixg.prompt_len == p and ixg.layers["dec_self"][0].shape == (n, n)
    assert np.allclose(ixg.target, expected.norm(dim=-1).detach().numpy(), rtol=1e-3, atol=1e-6)
    assert np.array_equal(ixg.source, ixg.target[p - 1:, :p])

    attributions, change = _integrated(original, family, full, nodes=16)
    ig = contributions("integrated_gradients", model, prompt, continuation, ig_steps=16)
    assert np.allclose(ig.target, attributions.norm(dim=-1).numpy(), rtol=1e-3, atol=1e-6)
    errors = (attributions.sum(dim=(1, 2)) - change).abs() / change.abs().clamp_min(1e-3)
    assert np.allclose(ig.completeness, errors.numpy(), rtol=1e-2, atol=1e-4)
    if family == "gpt2":  # complete: the attributions add up to the change from the zero embeddings
        adapted = contributions("integrated_gradients", model, prompt, continuation)
        assert adapted.completeness.shape == (n,) and adapted.completeness.max() <= 0.05
        assert not adapted.incomplete and "within 5% at every position" in adapted.completeness_line()
    else:  # the rows that missed are named by position, a continuation row by the token it predicts
        missed = ig.incomplete
        assert missed and missed == [row for row in range(n) if errors[row] > 0.05]
        outputs = [f"out{index}" for index in range(len(continuation))]
        line = ig.completeness_line(outputs)
        assert line.startswith("completeness missed at position")
        named = missed[:8]  # the line names the first eight
        assert all(f"{row} ‘out{row - p + 1}’" in line for row in named if row >= p - 1)
        assert not any(re.search(rf"\b{row} ‘", line) for row in named if row < p - 1)  # a prompt row: no output


def test_value_zeroing_is_the_layers_cosine_distance_with_a_value_zeroed(lm):
    family, original, model, prompt, continuation = lm
    maps = value_zeroing(model, prompt, continuation)
    n = len(prompt) + len(continuation) - 1
    assert maps.prompt_len == len(prompt) and [m.shape for m in maps.layers["dec_self"]] == [(n, n)] * 3
    for matrix in maps.layers["dec_self"]:
        assert matrix.min() >= 0.0 and np.allclose(matrix.sum(axis=1), 1.0, atol=1e-5)
        assert np.all(np.triu(matrix, k=1) == 0.0)
    # one row written out: transformers' layer 1 with each key's value vector zeroed in turn (a hook on its value
    # projection), 1 − cos of the layer's output at the last position, normalised over the keys
    layer, row = 1, n - 1
    sequence = prompt + continuation[:-1]
    reference = hidden_states(original, sequence).hidden_states[layer + 1][0, row].double()
    distances = np.array([1.0 - float(torch.nn.functional.cosine_similarity(
        _with_value_zeroed(original, family, sequence, layer, key)[row].double(), reference, dim=0))
        for key in range(n)])
    assert np.allclose(maps.layers["dec_self"][layer][row], distances / distances.sum(), rtol=1e-3, atol=1e-6)


def _with_value_zeroed(original, family: str, sequence: list[int], layer: int, key: int) -> torch.Tensor:
    """transformers' output ``[n, E]`` of ``layer`` with position ``key``'s value vector zeroed in every head."""
    hf_layer = hf_layers(original, family)[layer]

    def zeroed(_module, _inputs, output):
        output = output.clone()
        if family == "gpt2":  # c_attn gives q, k, v side by side
            output[:, key, 2 * output.shape[-1] // 3:] = 0.0
        else:
            output[:, key] = 0.0
        return output

    handle = (hf_layer.attn.c_attn if family == "gpt2" else hf_layer.self_attn.v_proj).register_forward_hook(zeroed)
    try:
        return hidden_states(original, sequence).hidden_states[layer + 1][0]
    finally:
        handle.remove()


def test_every_method_applies_and_a_head_switched_off_contributes_nothing(lm):
    family, _, model, prompt, continuation = lm
    assert all(method.applies(model) for method in CONTRIBUTION_METHODS.values())
    off = Ablation.of([("dec_self", 1, 2)])
    norms = contributions("value_norms", model, prompt, continuation, ablation=off)
    assert float(np.abs(norms.layers["dec_self"][1][2]).max()) == 0.0
    assert float(np.abs(norms.layers["dec_self"][1][1]).max()) > 0.0
    arrays = contribution_arrays(model, prompt, continuation, ig_steps=4)
    n = len(prompt) + len(continuation) - 1
    assert arrays["alti_dec_self_L0"].shape == (n, n) and arrays["norm_dec_self_L2"].shape == (4, n, n)
    assert arrays["alti_source"].shape == (len(continuation), len(prompt))
    assert arrays["source_contribution"].shape == (len(continuation),)
    assert arrays["ixg_target"].shape == (n, n) and arrays["ig_completeness"].shape == (n,)


PAIRS = [("the cat sat on", "the mat"), ("where is", "the house"), ("i like green", "apples"),
         ("the dog runs in", "the park")]


def _continuation_nll(translator, ablation: Ablation) -> float:
    """The pooled NLL of every pair's continuation and end token given its prompt, one pair at a time."""
    total, tokens = 0.0, 0
    for prompt_text, continuation_text in PAIRS:
        prompt = translator.source(prompt_text).ids
        target = translator.target(continuation_text) + [EOS]
        sequence = torch.tensor([prompt + target[:-1]])
        with torch.no_grad():
            logits, _ = translator.model(sequence[:, :0], sequence, ablation=ablation)
        log_probs = torch.log_softmax(logits[0, len(prompt) - 1:].double(), dim=-1)
        total -= float(log_probs.gather(1, torch.tensor(target)[:, None]).sum())
        tokens += len(target)
    return total / tokens


@pytest.mark.parametrize("family", ["gpt2", "llama", "qwen2"])
def test_head_importance_by_nll_is_each_head_switched_off_alone(family, tmp_path):
    folder = tmp_path / family
    build(folder, family)
    translator = Translator(convert(folder), device="cpu")
    result = ablation_importance(translator, PAIRS, tokens_per_pass=64)  # several passes, heads widened in each
    assert result.baseline == pytest.approx(_continuation_nll(translator, Ablation()), rel=1e-5)
    layers, heads = translator.model.attention_shape()["dec_self"]
    assert result.scores["dec_self"].shape == (layers, heads)
    for layer in range(layers):
        for head in range(heads):
            expected = _continuation_nll(translator, Ablation.of([("dec_self", layer, head)]))
            assert result.scores["dec_self"][layer, head] == pytest.approx(expected, rel=1e-5)
    gradient = gradient_importance(translator, PAIRS)
    assert gradient.baseline == pytest.approx(result.baseline, rel=1e-5)
    curves = prune_curves(translator, PAIRS, result, tokens_per_pass=64)
    assert curves.curves["increasing"][0] == pytest.approx(result.baseline, rel=1e-5)
    every = Ablation.of(curves.orders["decreasing"])
    assert curves.curves["decreasing"][-1] == pytest.approx(_continuation_nll(translator, every), rel=1e-5)


def test_head_statistics_run_each_prompt_and_continuation_as_one_sequence(tmp_path):
    """Each head's mean entropy and weight on the first position, over every position of every pair's sequence
    (the prompt, then the continuation), written out from the model's attention of each sequence alone; a batch
    gives the numbers of its sentences one by one."""
    folder = tmp_path / "llama"
    build(folder, "llama")
    translator = Translator(convert(folder), device="cpu")
    batched = corpus_head_stats(translator, PAIRS, batch_size=4).runs["reference"]
    alone = corpus_head_stats(translator, PAIRS, batch_size=1).runs["reference"]
    entropy, first, rows = 0.0, 0.0, 0
    for prompt_text, continuation_text in PAIRS:
        sequence = torch.tensor([translator.source(prompt_text).ids + translator.target(continuation_text)])
        with torch.no_grad():
            _, intermediates = translator.model(sequence[:, :0], sequence, need_weights=True)
        weights = torch.stack([layer[0] for layer in intermediates.attention["dec_self"]]).double()  # [L, H, n, n]
        entropy += -torch.special.xlogy(weights, weights).sum(-1).sum(-1)
        first += weights[..., 0].sum(-1)
        rows += sequence.shape[1]
    assert np.allclose(batched.mean("dec_self", "entropy"), (entropy / rows).numpy(), rtol=1e-4, atol=1e-6)
    assert np.allclose(batched.mean("dec_self", "bos"), (first / rows).numpy(), rtol=1e-4, atol=1e-6)
    assert np.allclose(batched.mean("dec_self", "entropy"), alone.mean("dec_self", "entropy"), rtol=1e-5, atol=1e-7)
    assert batched.mean("dec_self", "padding").max() == 0.0


def test_corpus_coverage_is_the_prompt_share_of_each_continuation_and_its_end(tmp_path):
    """`attnviz contributions`' ranking of a prompt<TAB>continuation file: each pair's mean prompt share over its
    continuation and end token, and the prompt token that gives the least."""
    folder = tmp_path / "qwen2"
    build(folder, "qwen2")
    translator = Translator(convert(folder), device="cpu")
    ranked = corpus_coverage(translator, PAIRS)
    assert sorted(pair.number for pair in ranked) == [1, 2, 3, 4]
    assert [pair.coverage.avg_source for pair in ranked] == sorted(pair.coverage.avg_source for pair in ranked)
    for pair in ranked:
        prompt_text, continuation_text = PAIRS[pair.number - 1]
        prompt = translator.source(prompt_text).ids
        output = translator.target(continuation_text) + [EOS]
        assert (list(pair.source_ids), list(pair.output_ids)) == (prompt, output)
        maps = contributions("alti", translator.model, prompt, output)
        assert pair.coverage.avg_source == pytest.approx(float(maps.source.sum(axis=1).mean()), abs=1e-6)
        least = int(np.argmin(maps.source.sum(axis=0)))
        assert pair.least_covered_token == translator.source_tokenizer.token(prompt[least])


def test_the_views_show_every_method_as_one_dec_self_map_over_the_sequence(lm):
    """A decoder-only trace (the prompt as its source tokens, every position fed as its decoder rows and keys) takes
    each method's maps in place of its attention, the rollout of ALTI+ and the gradients' one map included, and the
    step's bars are the prompt's share of the prediction."""
    from attnviz.state import contributions as shown
    from attnviz.state.session import Selection
    from models.trace.records import AttentionTrace

    family, _, model, prompt, continuation = lm
    sequence = torch.tensor([prompt + continuation[:-1]])
    with torch.no_grad():
        _, intermediates = model(sequence[:, :0], sequence, need_weights=True)
    n = sequence.shape[1]
    labels = [f"t{index}" for index in range(n)]
    trace = AttentionTrace(labels[: len(prompt)], labels,
                           attention={"dec_self": [layer[0].numpy() for layer in intermediates.attention["dec_self"]]},
                           masks={"dec_self": intermediates.masks["dec_self"][0, 0].numpy()})
    for name, method in CONTRIBUTION_METHODS.items():
        choice = shown.show_choice(method)
        maps = None if name == "weights" else contributions(name, model, prompt, continuation, ig_steps=4)
        if maps is None:
            continue
        head = "rollout" if method.rolls_out else 1 if method.per_head else 0
        state = shown.contribution_heatmap(trace, maps, Selection(kind="dec_self", layer=0, head=head), choice=choice)
        assert not isinstance(state, str), state
        assert state.matrix.shape == (n, n) and state.query_labels == state.key_labels == labels
        expected = maps.target if method.rolls_out or method.whole_model else maps.layers["dec_self"][0]
        per_head_map = method.per_head and not method.rolls_out  # a rollout is one map (ALTI-Logit's too)
        np.testing.assert_allclose(state.matrix, expected[1] if per_head_map else expected, rtol=1e-6)
        if maps.source is not None:
            bars = shown.contribution_bars(trace, maps, Selection(kind="dec_self", step=2), choice=choice)
            np.testing.assert_allclose(bars.values, maps.source[2], rtol=1e-6)


def test_the_corpus_commands_read_a_prompt_and_continuation_file(tmp_path, capsys):
    """`attnviz importance`, `stats` and `contributions` on a saved decoder-only checkpoint and a file of
    prompt<TAB>continuation lines: the numbers the functions above give."""
    import json

    from attnviz.cli import main
    from models.storage.checkpoint import save_checkpoint

    build(tmp_path / "gpt2", "gpt2")
    checkpoint = convert(tmp_path / "gpt2")
    path = save_checkpoint(tmp_path / "lm.safetensors", checkpoint.model, checkpoint.source_tokenizer,
                           checkpoint.target_tokenizer, checkpoint.provenance)
    data = tmp_path / "pairs.tsv"
    data.write_text("".join(f"{prompt}\t{continuation}\n" for prompt, continuation in PAIRS), encoding="utf-8")
    translator = Translator(convert(tmp_path / "gpt2"), device="cpu")
    assert main(["importance", "-c", str(path), "--data", str(data), "--json"]) == 0
    importance = json.loads(capsys.readouterr().out)
    assert importance["baseline"] == pytest.approx(_continuation_nll(translator, Ablation()), rel=1e-5)
    assert np.array(importance["scores"]["dec_self"]).shape == (3, 4)
    assert main(["contributions", "-c", str(path), "--data", str(data), "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)["pairs"]
    expected = {pair.number: pair.coverage.avg_source for pair in corpus_coverage(translator, PAIRS)}
    assert {pair["pair"]: pair["avg_source"] for pair in listed} == pytest.approx(expected, abs=1e-5)
    assert main(["stats", "-c", str(path), "--data", str(data)]) == 0
    assert "no weight on any padded key" in capsys.readouterr().out
