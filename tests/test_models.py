"""Every architecture of models.nn.config.ARCHS, tiny and seeded.

- padding invariance: a sentence alone equals the same sentence right-padded in a batch;
- ``forward`` returns the attention kinds and shapes docs/architectures.md#trace-shapes documents;
- pre-LN and post-LN layers (docs/architectures.md) against references written out by hand;
- sinusoid tables against the formula, in both layouts;
- tied/shared embeddings are one Parameter.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from models import ARCHS, build_model, make_config
from models.nn.base import sinusoid_table
from models.nn.config import TRANSFORMER_ARCHS
from models.nn.masks import causal_mask, padding_mask

SRC_VOCAB, TGT_VOCAB = 13, 11
PAD, BOS, EOS = 0, 2, 3
ENCODER_LAYERS, DECODER_LAYERS, HEADS = 2, 3, 2  # all different, so a swapped list shows


def tiny_config(arch: str, **overrides):
    if arch in TRANSFORMER_ARCHS:
        base = {"d_model": 16, "heads": HEADS, "d_ff": 24, "encoder_layers": ENCODER_LAYERS,
                "decoder_layers": DECODER_LAYERS, "max_len": 32, "dropout": 0.0}
    else:
        base = {"hidden": 16, "max_len": 32, "dropout": 0.0, "decoder_layers": DECODER_LAYERS,
                "decoder_heads": HEADS}
    return make_config(arch, SRC_VOCAB, TGT_VOCAB, **{**base, **overrides})


def tiny_model(arch: str, seed: int = 0, **overrides):
    torch.manual_seed(seed)
    return build_model(tiny_config(arch, **overrides)).eval()


def _pad(rows: list[list[int]]) -> torch.Tensor:
    width = max(len(row) for row in rows)
    return torch.tensor([row + [PAD] * (width - len(row)) for row in rows])


SHORT_SRC, LONG_SRC = [5, 6, 7, EOS], [8, 9, 10, 11, 12, 4, EOS]
SHORT_TGT, LONG_TGT = [BOS, 4, 5], [BOS, 6, 7, 8, 9, 10]


# ---------------------------------------------------------------------------------------------------
# padding invariance


@pytest.mark.parametrize("arch", ARCHS)
def test_padding_does_not_change_a_sentence(arch):
    model = tiny_model(arch, seed=1)
    with torch.no_grad():
        alone_logits, alone = model(torch.tensor([SHORT_SRC]), torch.tensor([SHORT_TGT]), need_weights=True)
        batch_logits, batch = model(_pad([SHORT_SRC, LONG_SRC]), _pad([SHORT_TGT, LONG_TGT]), need_weights=True)
    s, t = len(SHORT_SRC), len(SHORT_TGT)
    torch.testing.assert_close(batch_logits[0, :t], alone_logits[0], atol=1e-5, rtol=0)
    assert set(batch.attention) == set(alone.attention) == set(model.kinds)
    for kind, layers in batch.attention.items():
        q_len = s if kind == "enc_self" else t
        k_len = t if kind == "dec_self" else s
        for layer, (batched, single) in enumerate(zip(layers, alone.attention[kind])):
            where = f"{kind} layer {layer}"
            torch.testing.assert_close(batched[0, :, :q_len, :k_len], single[0], atol=1e-5, rtol=0,
                                       msg=lambda message, where=where: f"{where}: {message}")
            if kind == "dec_self":  # real queries never see the padded target keys
                assert (batched[0, :, :q_len, k_len:] == 0.0).all()
            else:  # no query, padded or not, sees a padded source key
                assert (batched[0, :, :, k_len:] == 0.0).all()
    # The longer sentence is unaffected by being batched too.
    with torch.no_grad():
        long_logits, _ = model(torch.tensor([LONG_SRC]), torch.tensor([LONG_TGT]))
    torch.testing.assert_close(batch_logits[1], long_logits[0], atol=1e-5, rtol=0)


# ---------------------------------------------------------------------------------------------------
# forward's attention: kinds and shapes


def _expected_shapes(arch: str, batch: int, s: int, t: int) -> dict[str, list[tuple[int, ...]]]:
    if arch in TRANSFORMER_ARCHS:
        return {"enc_self": [(batch, HEADS, s, s)] * ENCODER_LAYERS,
                "dec_self": [(batch, HEADS, t, t)] * DECODER_LAYERS,
                "cross": [(batch, HEADS, t, s)] * DECODER_LAYERS}
    if arch == "gru-transformer-decoder":
        return {"dec_self": [(batch, HEADS, t, t)] * DECODER_LAYERS, "cross": [(batch, HEADS, t, s)] * DECODER_LAYERS}
    if arch == "gru-none":
        return {}
    return {"cross": [(batch, 1, t, s)]}  # GRU attention decoders: one layer, one head


@pytest.mark.parametrize("arch", ARCHS)
def test_forward_returns_the_documented_attention(arch):
    model = tiny_model(arch, seed=2)
    src, tgt = _pad([SHORT_SRC, LONG_SRC]), _pad([SHORT_TGT, LONG_TGT])
    with torch.no_grad():
        logits, inter = model(src, tgt, need_weights=True)
    assert logits.shape == (2, tgt.shape[1], TGT_VOCAB)
    expected = _expected_shapes(arch, 2, src.shape[1], tgt.shape[1])
    assert tuple(model.kinds) == tuple(kind for kind in ("enc_self", "dec_self", "cross") if kind in expected)
    assert {kind: [tuple(w.shape) for w in layers] for kind, layers in inter.attention.items()} == expected
    for kind, layers in inter.attention.items():
        mask = inter.masks[kind]
        assert mask is not None and mask.dtype == torch.bool
        q_len = src.shape[1] if kind == "enc_self" else tgt.shape[1]
        k_len = tgt.shape[1] if kind == "dec_self" else src.shape[1]
        full = mask.expand(2, 1, q_len, k_len)
        for weights in layers:
            assert (weights[~full.expand_as(weights)] == 0).all()
            torch.testing.assert_close(weights.sum(-1), torch.ones(weights.shape[:-1]), atol=1e-5, rtol=0)
        src_keep = src != PAD  # [B, S]
        if kind == "dec_self":  # look-ahead ∧ target padding
            expected_mask = causal_mask(q_len)[None] & (tgt != PAD)[:, None, :]
        elif kind == "cross" and arch == "gru-causal-scaled-dot":  # output step t sees source 0..t
            expected_mask = torch.ones(q_len, k_len, dtype=torch.bool).tril()[None] & src_keep[:, None, :]
        else:
            expected_mask = src_keep[:, None, :].expand(2, q_len, k_len)
        assert torch.equal(full[:, 0], expected_mask), kind
    with torch.no_grad():
        quiet_logits, quiet = model(src, tgt, need_weights=False)
    assert quiet.attention == {}
    torch.testing.assert_close(quiet_logits, logits, atol=1e-5, rtol=0)


# ---------------------------------------------------------------------------------------------------
# pre-LN / post-LN layers against hand-written references


def _layer_norm(x, norm):
    mean = x.mean(-1, keepdim=True)
    variance = ((x - mean) ** 2).mean(-1, keepdim=True)
    return (x - mean) / torch.sqrt(variance + norm.eps) * norm.weight + norm.bias


def _linear(x, linear):
    return x @ linear.weight.T + (linear.bias if linear.bias is not None else 0)


def _attention(attention, query_input, kv_input, mask):
    """Multi-head attention written out: project, split heads, softmax(q kᵀ/√d), combine, project
    (when the module has an output projection)."""
    batch, q_len, _ = query_input.shape
    heads, dim = attention.heads, attention.head_dim

    def split(x):
        return x.view(batch, -1, heads, dim).transpose(1, 2)

    q = split(_linear(query_input, attention.query))
    k = split(_linear(kv_input, attention.key))
    v = split(_linear(kv_input, attention.value))
    scores = (q @ k.transpose(-2, -1)) / math.sqrt(dim)
    weights = torch.softmax(scores.masked_fill(~mask, -math.inf), dim=-1)
    combined = (weights @ v).transpose(1, 2).reshape(batch, q_len, heads * dim)
    return (combined if attention.output is None else _linear(combined, attention.output)), weights


def _feed_forward(x, sublayer):
    return _linear(F.relu(_linear(x, sublayer.linear_in)), sublayer.linear_out)


def _randomise_norms(model, seed: int) -> None:
    """LayerNorms start as the identity; random gains and biases make the references discriminating."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, torch.nn.LayerNorm):
                module.weight.copy_(1 + 0.5 * torch.randn(module.weight.shape, generator=generator))
                module.bias.copy_(0.5 * torch.randn(module.bias.shape, generator=generator))


def _layer_input(model, seed: int):
    torch.manual_seed(seed)
    x = torch.randn(2, 5, model.config.d_model) * 2 + 1  # far from normalised, so LN(x) ≠ x
    ids = _pad([[5, 6, 7, 8, 9], [5, 6, 7]])
    return x, padding_mask(ids, PAD)


def test_preln_encoder_layer_reads_keys_from_the_unnormalised_input():
    model = tiny_model("transformer-preln", seed=3)
    assert model.config.pre_norm_kv is False and model.config.norm_position == "pre"
    _randomise_norms(model, seed=4)
    layer = model.encoder_layers[0]
    x, mask = _layer_input(model, seed=5)
    with torch.no_grad():
        actual, actual_weights = layer(x, mask, True)
        sub = layer.self_attention
        # Pre-LN as defined here: LayerNorm on the query only; keys/values from x; residual to the un-normalised x.
        attended, weights = _attention(sub.attention, _layer_norm(x, sub.norm), x, mask)
        hidden = x + attended
        expected = hidden + _feed_forward(_layer_norm(hidden, layer.feed_forward.norm), layer.feed_forward)
        # The nn.Transformer variant (keys and values normalised too) is measurably different.
        normed = _layer_norm(x, sub.norm)
        other_attended, _ = _attention(sub.attention, normed, normed, mask)
    torch.testing.assert_close(actual, expected, atol=1e-5, rtol=0)
    torch.testing.assert_close(actual_weights, weights, atol=1e-6, rtol=0)
    assert (x + other_attended - hidden).abs().max() > 1e-2


def test_preln_with_normalised_keys_option():
    model = tiny_model("transformer-preln", seed=3, pre_norm_kv=True)
    _randomise_norms(model, seed=4)
    layer = model.encoder_layers[0]
    x, mask = _layer_input(model, seed=5)
    with torch.no_grad():
        actual, _ = layer(x, mask, True)
        sub = layer.self_attention
        normed = _layer_norm(x, sub.norm)
        hidden = x + _attention(sub.attention, normed, normed, mask)[0]
        expected = hidden + _feed_forward(_layer_norm(hidden, layer.feed_forward.norm), layer.feed_forward)
    torch.testing.assert_close(actual, expected, atol=1e-5, rtol=0)


def test_preln_decoder_layer_matches_reference():
    model = tiny_model("transformer-preln", seed=6)
    _randomise_norms(model, seed=7)
    layer = model.decoder_layers[0]
    x, src_mask = _layer_input(model, seed=8)
    memory = torch.randn(2, 5, model.config.d_model)
    tgt = x[:, :4]
    self_mask = causal_mask(4)
    with torch.no_grad():
        actual, self_weights, cross_weights = layer(tgt, memory, self_mask=self_mask, cross_mask=src_mask, cache=None,
                                                    need_weights=True)
        a = layer.self_attention
        attended, expected_self = _attention(a.attention, _layer_norm(tgt, a.norm), tgt, self_mask)
        h = tgt + attended
        c = layer.cross_attention
        attended, expected_cross = _attention(c.attention, _layer_norm(h, c.norm), memory, src_mask)
        h = h + attended
        expected = h + _feed_forward(_layer_norm(h, layer.feed_forward.norm), layer.feed_forward)
    torch.testing.assert_close(actual, expected, atol=1e-5, rtol=0)
    torch.testing.assert_close(self_weights, expected_self, atol=1e-6, rtol=0)
    torch.testing.assert_close(cross_weights, expected_cross, atol=1e-6, rtol=0)


def test_postln_encoder_layer_normalises_after_the_residual():
    model = tiny_model("transformer-postln", seed=9)
    assert model.config.norm_position == "post"
    _randomise_norms(model, seed=10)
    layer = model.encoder_layers[0]
    x, mask = _layer_input(model, seed=11)
    with torch.no_grad():
        actual, actual_weights = layer(x, mask, True)
        sub = layer.self_attention
        attended, weights = _attention(sub.attention, x, x, mask)  # sublayer on the raw input
        hidden = _layer_norm(x + attended, sub.norm)  # then add, then LayerNorm
        expected = _layer_norm(hidden + _feed_forward(hidden, layer.feed_forward), layer.feed_forward.norm)
    torch.testing.assert_close(actual, expected, atol=1e-5, rtol=0)
    torch.testing.assert_close(actual_weights, weights, atol=1e-6, rtol=0)


@pytest.mark.parametrize("arch", TRANSFORMER_ARCHS)
def test_encoder_stack_composition(arch):
    """Embedding + sinusoid positions, the layers in order, final LayerNorm for pre-LN only."""
    model = tiny_model(arch, seed=12)
    _randomise_norms(model, seed=13)
    src = _pad([SHORT_SRC, LONG_SRC])
    mask = padding_mask(src, PAD)
    with torch.no_grad():
        memory, _, _ = model.encode(src, need_weights=False)
        x = model.src_embedding.tokens.weight[src] + sinusoid_table(src.shape[1], model.config.d_model)
        for layer in model.encoder_layers:
            x, _ = layer(x, mask, False)
        if arch == "transformer-preln":
            x = _layer_norm(x, model.encoder_norm)
        else:
            assert model.encoder_norm is None and model.decoder_norm is None
    torch.testing.assert_close(memory, x, atol=1e-5, rtol=0)


@pytest.mark.parametrize("arch", ["gru-none", "gru-additive", "gru-scaled-dot", "gru-causal-scaled-dot"])
def test_gru_decoders_match_their_definition(arch):
    """Written out step by step: initial hidden = encoder final; attention with the previous hidden state
    as query over the annotations; the GRU cell reads [embedding; context]; a linear layer gives logits."""
    model = tiny_model(arch, seed=19)
    encoder, decoder = model.encoder, model.decoder
    src, tgt = torch.tensor([LONG_SRC]), torch.tensor([LONG_TGT])
    with torch.no_grad():
        logits, inter = model(src, tgt, need_weights=True)
        annotations, _ = encoder.gru(encoder.embedding(src))  # [1, S, N]
        hidden = annotations[:, -1]
        expected_logits, expected_rows = [], []
        for t in range(tgt.shape[1]):
            embedded = decoder.embedding(tgt[:, t])
            cell_input = embedded
            if arch == "gru-additive":
                pairs = torch.cat([hidden[:, None].expand(-1, src.shape[1], -1), annotations], dim=-1)
                scores = _linear(F.relu(_linear(pairs, decoder.attention.hidden)), decoder.attention.score)[..., 0]
                weights = torch.softmax(scores, dim=-1)  # [1, S]
                context = weights @ annotations[0]
            elif arch != "gru-none":
                attention = decoder.attention
                q, k = _linear(hidden, attention.query), _linear(annotations[0], attention.key)
                scores = q @ k.T / math.sqrt(q.shape[-1])
                if arch == "gru-causal-scaled-dot":
                    scores[:, t + 1:] = -math.inf  # output step t sees source positions 0..t
                weights = torch.softmax(scores, dim=-1)
                context = weights @ _linear(annotations[0], attention.value)
            if arch != "gru-none":
                cell_input = torch.cat([embedded, context], dim=-1)
                expected_rows.append(weights)
            hidden = decoder.cell(cell_input, hidden)
            expected_logits.append(_linear(hidden, decoder.output))
    torch.testing.assert_close(logits[0], torch.cat(expected_logits), atol=1e-5, rtol=0)
    if arch == "gru-none":
        assert inter.attention == {}
    else:
        torch.testing.assert_close(inter.attention["cross"][0][0, 0], torch.cat(expected_rows), atol=1e-6, rtol=0)


def test_gru_transformer_decoder_block_matches_its_definition():
    """Per layer: causal self-attention, attention over the annotations, Linear→ReLU, each added to its
    input; single-head-style attention without output projection or LayerNorm."""
    model = tiny_model("gru-transformer-decoder", seed=17)
    block = model.decoder.layers[0]
    assert block.self_attention.output is None and block.encoder_attention.output is None
    torch.manual_seed(18)
    x, memory = torch.randn(2, 4, 16), torch.randn(2, 5, 16)
    self_mask, cross_mask = causal_mask(4), padding_mask(_pad([[5, 6, 7, 8, 9], [5, 6]]), PAD)
    with torch.no_grad():
        actual, self_weights, cross_weights = block(x, memory, self_mask=self_mask, cross_mask=cross_mask, cache=None)

        attended, expected_self = _attention(block.self_attention, x, x, self_mask)
        h = x + attended
        attended, expected_cross = _attention(block.encoder_attention, h, memory, cross_mask)
        h = h + attended
        expected = h + F.relu(_linear(h, block.mlp))
    torch.testing.assert_close(actual, expected, atol=1e-5, rtol=0)
    torch.testing.assert_close(self_weights, expected_self, atol=1e-6, rtol=0)
    torch.testing.assert_close(cross_weights, expected_cross, atol=1e-6, rtol=0)


# ---------------------------------------------------------------------------------------------------
# sinusoid tables


@pytest.mark.parametrize("dim", [8, 7])
def test_sinusoid_interleaved_layout(dim):
    table = sinusoid_table(6, dim, "interleaved")
    assert table.shape == (6, dim) and table.dtype == torch.float32
    for pos in range(6):
        for j in range(dim):
            angle = pos / 10000 ** (2 * (j // 2) / dim)
            expected = math.sin(angle) if j % 2 == 0 else math.cos(angle)
            assert table[pos, j].item() == pytest.approx(expected, abs=1e-6), (pos, j)


@pytest.mark.parametrize("dim", [8, 7])
def test_sinusoid_half_split_layout(dim):
    table = sinusoid_table(6, dim, "half_split")
    half = (dim + 1) // 2
    for pos in range(6):
        for j in range(dim):
            i = j if j < half else j - half
            angle = pos / 10000 ** (2 * i / dim)
            expected = math.sin(angle) if j < half else math.cos(angle)
            assert table[pos, j].item() == pytest.approx(expected, abs=1e-6), (pos, j)


def test_model_uses_the_configured_position_layout():
    model = tiny_model("transformer-preln", seed=14, positions="half_split")
    torch.testing.assert_close(model.src_embedding.positions, sinusoid_table(32, 16, "half_split"), atol=0, rtol=0)
    assert not torch.allclose(model.src_embedding.positions, sinusoid_table(32, 16, "interleaved"))


# ---------------------------------------------------------------------------------------------------
# tied and shared embeddings


def test_shared_and_tied_embeddings_are_one_parameter():
    torch.manual_seed(15)
    config = make_config("transformer-preln", TGT_VOCAB, TGT_VOCAB, d_model=16, heads=2, d_ff=24,
                         encoder_layers=1, decoder_layers=1, max_len=32, share_embeddings=True, tie_output=True)
    model = build_model(config)
    source, target, output = model.src_embedding.tokens.weight, model.tgt_embedding.tokens.weight, model.output.weight
    assert source is target and target is output
    assert isinstance(source, torch.nn.Parameter)
    assert sum(p is source for p in model.parameters()) == 1  # counted once
    # Training one of them trains all three.
    model.train()
    logits, _ = model(torch.tensor([SHORT_SRC]), torch.tensor([SHORT_TGT]))
    logits.sum().backward()
    assert source.grad is not None and source.grad is output.grad


def test_separate_embeddings_are_distinct_parameters():
    model = tiny_model("transformer-preln", seed=16)
    weights = [model.src_embedding.tokens.weight, model.tgt_embedding.tokens.weight, model.output.weight]
    assert len({id(w) for w in weights}) == 3
    tied = tiny_model("transformer-preln", seed=16, tie_output=True)
    assert tied.output.weight is tied.tgt_embedding.tokens.weight
    assert tied.src_embedding.tokens.weight is not tied.tgt_embedding.tokens.weight


def test_a_start_token_equal_to_pad_is_still_attended():
    """Formats that start decoding with the pad id (Marian) must not see their start position masked."""
    import torch

    from models import build_model
    from tests.helpers import tiny_config

    torch.manual_seed(0)
    model = build_model(tiny_config("transformer-postln", bos_id=0)).eval()
    src = torch.tensor([[5, 6, 7, 3]])
    tgt_in = torch.tensor([[0, 8, 9]])  # start token = pad id
    _, intermediates = model(src, tgt_in, need_weights=True)
    first_row = intermediates.attention["dec_self"][0][0, :, 0, :]  # the start token's own row
    assert torch.allclose(first_row[:, 0], torch.ones(first_row.shape[0]))
    assert bool(intermediates.masks["dec_self"][0, 0, 2, 0])


@pytest.mark.parametrize("scale", [False, True])
def test_token_embeddings_start_at_the_scale_of_the_positions(scale):
    """Otherwise the sinusoids drown the tokens and a large-vocabulary model barely learns."""
    import torch

    from models import build_model, make_config

    torch.manual_seed(0)
    model = build_model(make_config("transformer-preln", 8000, 8000, d_model=256, heads=4, scale_embedding=scale))
    embedded = model.src_embedding.tokens.weight * model.src_embedding.scale
    assert 0.9 < embedded.std().item() < 1.1
