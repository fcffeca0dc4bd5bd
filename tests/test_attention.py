"""Attention mechanisms and the mask convention, checked against independent references.

- ``MultiHeadAttention`` against ``torch.nn.MultiheadAttention`` with the same weights copied in;
- ``masked_softmax`` and every attention kind: masked cells exactly 0, rows sum to 1, no NaN;
- ``AdditiveAttention`` against Bahdanau's ``Va(tanh(Wa q + Ua k))`` written out by hand;
- the builders of ``models/nn/masks.py``.
"""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from models.nn.attention import AdditiveAttention, MultiHeadAttention, masked_softmax, scaled_dot_product
from models.nn.masks import causal_mask, combine, expand_for_trace, padding_mask, to_torch_blocked

D_MODEL, HEADS = 16, 4
PAD = 0


def _pair(seed: int = 0) -> tuple[MultiHeadAttention, nn.MultiheadAttention]:
    """Our attention and torch's, holding the same (random, non-zero bias) weights."""
    torch.manual_seed(seed)
    theirs = nn.MultiheadAttention(D_MODEL, HEADS, batch_first=True).eval()
    with torch.no_grad():
        theirs.in_proj_bias.normal_()  # torch zeroes the biases; random ones test that they are copied
        theirs.out_proj.bias.normal_()
    ours = MultiHeadAttention(D_MODEL, HEADS).eval()
    w_q, w_k, w_v = theirs.in_proj_weight.detach().chunk(3, dim=0)
    b_q, b_k, b_v = theirs.in_proj_bias.detach().chunk(3, dim=0)
    with torch.no_grad():
        for linear, weight, bias in ((ours.query, w_q, b_q), (ours.key, w_k, b_k), (ours.value, w_v, b_v),
                                     (ours.output, theirs.out_proj.weight, theirs.out_proj.bias)):
            linear.weight.copy_(weight)
            linear.bias.copy_(bias)
    return ours, theirs


def _ids(lengths: list[int], total: int, seed: int) -> torch.Tensor:
    """Right-padded token ids ``[B, total]`` with the given real lengths (ids ≥ 1 are real)."""
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(1, 50, (len(lengths), total), generator=generator)
    for row, length in enumerate(lengths):
        ids[row, length:] = PAD
    return ids


def _assert_same(ours_result, theirs_result) -> None:
    (out, weights), (their_out, their_weights) = ours_result, theirs_result
    assert weights.shape == their_weights.shape
    torch.testing.assert_close(out, their_out, atol=1e-6, rtol=0)
    torch.testing.assert_close(weights, their_weights, atol=1e-6, rtol=0)


# ---------------------------------------------------------------------------------------------------
# MultiHeadAttention == torch.nn.MultiheadAttention


def test_self_attention_with_key_padding_matches_torch():
    ours, theirs = _pair(0)
    torch.manual_seed(1)
    x = torch.randn(3, 7, D_MODEL)
    ids = _ids([7, 4, 2], 7, seed=2)
    keep = ids != PAD  # [B, K]
    with torch.no_grad():
        expected = theirs(x, x, x, key_padding_mask=~keep, need_weights=True, average_attn_weights=False)
        actual = ours(x, x, x, padding_mask(ids, PAD))
    _assert_same(actual, expected)
    # The padding really was applied (a mask that is ignored would also "match" an unmasked torch).
    assert (actual[1][1, :, :, 4:] == 0).all() and (actual[1][2, :, :, 2:] == 0).all()


def test_self_attention_with_causal_mask_matches_torch():
    ours, theirs = _pair(3)
    torch.manual_seed(4)
    x = torch.randn(2, 6, D_MODEL)
    mask = causal_mask(6)
    with torch.no_grad():
        expected = theirs(x, x, x, attn_mask=to_torch_blocked(mask), need_weights=True, average_attn_weights=False)
        actual = ours(x, x, x, mask)
    _assert_same(actual, expected)
    assert (actual[1][..., ~mask] == 0).all()


def test_causal_and_padding_combined_matches_torch():
    ours, theirs = _pair(5)
    torch.manual_seed(6)
    x = torch.randn(2, 6, D_MODEL)
    ids = _ids([6, 3], 6, seed=7)
    mask = combine(causal_mask(6), padding_mask(ids, PAD))  # [B, 1, Q, K]
    with torch.no_grad():
        expected = theirs(x, x, x, attn_mask=to_torch_blocked(causal_mask(6)), key_padding_mask=ids == PAD,
                          need_weights=True, average_attn_weights=False)
        actual = ours(x, x, x, mask)
    _assert_same(actual, expected)


def test_cross_attention_with_longer_keys_matches_torch():
    ours, theirs = _pair(8)
    torch.manual_seed(9)
    query = torch.randn(2, 4, D_MODEL)
    memory = torch.randn(2, 9, D_MODEL)
    ids = _ids([9, 5], 9, seed=10)
    with torch.no_grad():
        expected = theirs(query, memory, memory, key_padding_mask=ids == PAD, need_weights=True,
                          average_attn_weights=False)
        actual = ours(query, memory, memory, padding_mask(ids, PAD))
    _assert_same(actual, expected)
    assert actual[1].shape == (2, HEADS, 4, 9)


def test_cross_attention_with_distinct_value_input_matches_torch():
    """Keys and values from different tensors catch a swapped key/value projection."""
    ours, theirs = _pair(11)
    torch.manual_seed(12)
    query, key, value = torch.randn(2, 3, D_MODEL), torch.randn(2, 5, D_MODEL), torch.randn(2, 5, D_MODEL)
    with torch.no_grad():
        expected = theirs(query, key, value, need_weights=True, average_attn_weights=False)
        actual = ours(query, key, value)
    _assert_same(actual, expected)


def test_cached_projection_path_equals_forward():
    """``project_kv`` + ``attend`` (what the KV cache uses) is the same computation as ``forward``."""
    ours, _ = _pair(13)
    torch.manual_seed(14)
    query, memory = torch.randn(2, 3, D_MODEL), torch.randn(2, 5, D_MODEL)
    mask = padding_mask(_ids([5, 2], 5, seed=15), PAD)
    with torch.no_grad():
        k, v = ours.project_kv(memory, memory)
        assert k.shape == v.shape == (2, HEADS, 5, D_MODEL // HEADS)
        split = ours.attend(query, k, v, mask)
        whole = ours(query, memory, memory, mask)
    torch.testing.assert_close(split[0], whole[0], atol=0, rtol=0)
    torch.testing.assert_close(split[1], whole[1], atol=0, rtol=0)


def test_fused_path_without_weights_gives_the_same_output():
    ours, _ = _pair(16)
    torch.manual_seed(17)
    x = torch.randn(2, 6, D_MODEL)
    mask = combine(causal_mask(6), padding_mask(_ids([6, 4], 6, seed=18), PAD))
    with torch.no_grad():
        with_weights, _ = ours(x, x, x, mask, need_weights=True)
        fused, no_weights = ours(x, x, x, mask, need_weights=False)
    assert no_weights is None
    torch.testing.assert_close(fused, with_weights, atol=1e-6, rtol=0)


# ---------------------------------------------------------------------------------------------------
# masked softmax and every attention kind: exact zeros, rows sum to 1, no NaN


def _random_mask(shape: tuple[int, ...], seed: int) -> torch.Tensor:
    """A random boolean mask whose row 0 (of every batch/head) is fully masked and row 1 fully allowed."""
    generator = torch.Generator().manual_seed(seed)
    mask = torch.rand(shape, generator=generator) > 0.4
    mask[..., 0, :] = False
    mask[..., 1, :] = True
    return mask


def _check_weights(weights: torch.Tensor, mask: torch.Tensor) -> None:
    mask = mask.expand_as(weights)
    assert not torch.isnan(weights).any()
    assert (weights[~mask] == 0.0).all()  # exactly zero, not just small
    sums = weights.sum(dim=-1)
    allowed_rows = mask.any(dim=-1)
    torch.testing.assert_close(sums[allowed_rows], torch.ones_like(sums[allowed_rows]), atol=1e-6, rtol=0)
    assert (sums[~allowed_rows] == 0.0).all()
    assert (~allowed_rows).any() and allowed_rows.any()  # both cases were exercised
    assert (weights[mask] > 0).all()  # softmax over allowed keys leaves none at zero


def test_masked_softmax_zeros_masked_cells_and_fully_masked_rows():
    torch.manual_seed(20)
    scores = torch.randn(2, 3, 5, 7) * 5
    mask = _random_mask((2, 3, 5, 7), seed=21)
    weights = masked_softmax(scores, mask)
    _check_weights(weights, mask)
    # Allowed cells are the softmax of the allowed scores alone.
    row = scores[1, 2, 3][mask[1, 2, 3]]
    torch.testing.assert_close(weights[1, 2, 3][mask[1, 2, 3]], torch.softmax(row, dim=0), atol=1e-7, rtol=0)


def test_masked_softmax_in_place_gives_the_same_weights_and_only_then_overwrites_the_scores():
    torch.manual_seed(24)
    scores = torch.randn(2, 3, 5, 7) * 5
    mask = _random_mask((2, 3, 5, 7), seed=25)
    kept = scores.clone()
    copied = masked_softmax(scores, mask)
    torch.testing.assert_close(scores, kept, atol=0, rtol=0)  # the caller's scores are left alone
    in_place = masked_softmax(scores, mask, in_place=True)
    torch.testing.assert_close(in_place, copied, atol=0, rtol=0)
    _check_weights(in_place, mask)
    assert in_place.data_ptr() == scores.data_ptr()  # no new full-size tensor


def test_masked_softmax_in_place_still_trains():
    torch.manual_seed(26)
    mask = _random_mask((2, 3, 5, 7), seed=27)
    leaf = torch.randn(2, 3, 5, 7, requires_grad=True)
    (masked_softmax(leaf * 2, mask, in_place=True) ** 2).sum().backward()
    expected_leaf = leaf.detach().clone().requires_grad_(True)
    (masked_softmax(expected_leaf * 2, mask) ** 2).sum().backward()
    torch.testing.assert_close(leaf.grad, expected_leaf.grad, atol=0, rtol=0)


def test_masked_softmax_with_broadcast_mask_and_without_mask():
    torch.manual_seed(22)
    scores = torch.randn(2, 3, 4, 6)
    ids = _ids([6, 2], 6, seed=23)
    mask = padding_mask(ids, PAD)  # [2, 1, 1, 6] broadcasts over heads and queries
    weights = masked_softmax(scores, mask)
    assert weights.shape == scores.shape
    assert (weights[1, :, :, 2:] == 0).all()
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, 3, 4), atol=1e-6, rtol=0)
    torch.testing.assert_close(masked_softmax(scores, None), torch.softmax(scores, -1), atol=0, rtol=0)


def test_scaled_dot_product_fully_masked_row_outputs_zero():
    torch.manual_seed(24)
    q, k, v = torch.randn(2, 3, 5, 4), torch.randn(2, 3, 7, 4), torch.randn(2, 3, 7, 4)
    mask = _random_mask((2, 3, 5, 7), seed=25)
    output, weights = scaled_dot_product(q, k, v, mask)
    _check_weights(weights, mask)
    assert not torch.isnan(output).any()
    assert (output[:, :, 0] == 0).all()  # row 0 is fully masked
    expected = torch.softmax((q @ k.transpose(-2, -1) / 2.0).masked_fill(~mask, -math.inf), -1)[:, :, 1:] @ v
    torch.testing.assert_close(output[:, :, 1:], expected, atol=1e-6, rtol=0)


def test_unscaled_scores_with_an_additive_bias_on_both_paths():
    """T5's attention: softmax(q·kᵀ + bias) under the mask, no 1/√D; the fused path folds the mask into the
    bias, and a fully masked row still gives zeros on the weighted path."""
    torch.manual_seed(27)
    q, k, v = torch.randn(2, 3, 5, 4), torch.randn(2, 3, 7, 4), torch.randn(2, 3, 7, 4)
    bias = torch.randn(1, 3, 5, 7)  # one bias per head, shared by the batch
    mask = padding_mask(torch.tensor([[5, 5, 5, 5, 5, 5, 5], [5, 5, 5, 5, PAD, PAD, PAD]]), PAD)
    output, weights = scaled_dot_product(q, k, v, mask, scale=False, bias=bias)
    expected = torch.softmax((q @ k.transpose(-2, -1) + bias).masked_fill(~mask, -math.inf), -1)
    torch.testing.assert_close(weights, expected, atol=1e-6, rtol=0)
    assert (weights[1, :, :, 4:] == 0).all()
    fused, none = scaled_dot_product(q, k, v, mask, scale=False, bias=bias, need_weights=False)
    assert none is None
    torch.testing.assert_close(fused, output, atol=1e-5, rtol=0)
    unmasked, _ = scaled_dot_product(q, k, v, None, scale=False, bias=bias, need_weights=False)
    torch.testing.assert_close(unmasked, torch.softmax(q @ k.transpose(-2, -1) + bias, -1) @ v, atol=1e-5, rtol=0)
    blocked = _random_mask((2, 3, 5, 7), seed=25)  # row 0 fully masked
    output, weights = scaled_dot_product(q, k, v, blocked, scale=False, bias=bias)
    assert (weights[:, :, 0] == 0).all() and (output[:, :, 0] == 0).all()


@pytest.mark.parametrize("output_projection", [True, False])
def test_multi_head_attention_masked_rows(output_projection):
    torch.manual_seed(26)
    heads = HEADS if output_projection else 1
    attention = MultiHeadAttention(D_MODEL, heads, output_projection=output_projection).eval()
    query, memory = torch.randn(2, 5, D_MODEL), torch.randn(2, 7, D_MODEL)
    mask = _random_mask((2, 1, 5, 7), seed=27)
    with torch.no_grad():
        output, weights = attention(query, memory, memory, mask)
    _check_weights(weights, mask)
    assert not torch.isnan(output).any()
    # A fully masked row combines no values: zero before the output projection, i.e. only its bias after.
    expected = attention.output.bias.expand(2, D_MODEL) if output_projection else torch.zeros(2, D_MODEL)
    torch.testing.assert_close(output[:, 0], expected, atol=0, rtol=0)


@pytest.mark.parametrize("activation", ["relu", "tanh"])
def test_additive_attention_masked_rows(activation):
    torch.manual_seed(28)
    attention = AdditiveAttention(6, 8, 10, activation).eval()
    query, keys, values = torch.randn(2, 5, 6), torch.randn(2, 7, 8), torch.randn(2, 7, 3)
    mask = _random_mask((2, 1, 5, 7), seed=29)
    with torch.no_grad():
        context, weights = attention(query, keys, values, mask)
    assert weights.shape == (2, 1, 5, 7) and context.shape == (2, 5, 3)
    _check_weights(weights, mask)
    assert not torch.isnan(context).any()
    assert (context[:, 0] == 0).all()


# ---------------------------------------------------------------------------------------------------
# AdditiveAttention == Bahdanau's formula


def test_additive_attention_equals_bahdanau_formula():
    torch.manual_seed(30)
    query_dim, key_dim, hidden = 6, 8, 10
    w_a, u_a, v_a = nn.Linear(query_dim, hidden), nn.Linear(key_dim, hidden), nn.Linear(hidden, 1)
    attention = AdditiveAttention(query_dim, key_dim, hidden, activation="tanh").eval()
    with torch.no_grad():
        attention.hidden.weight.copy_(torch.cat([w_a.weight, u_a.weight], dim=1))  # W1 = [Wa | Ua]
        attention.hidden.bias.copy_(w_a.bias + u_a.bias)
        attention.score.weight.copy_(v_a.weight)
        attention.score.bias.copy_(v_a.bias)
    query, keys, values = torch.randn(2, 3, query_dim), torch.randn(2, 5, key_dim), torch.randn(2, 5, 4)
    lengths = [5, 3]
    mask = padding_mask(_ids(lengths, 5, seed=31), PAD)
    with torch.no_grad():
        context, weights = attention(query, keys, values, mask)
        for b in range(2):
            for i in range(3):
                scores = torch.stack([v_a(torch.tanh(w_a(query[b, i]) + u_a(keys[b, j])))[0]
                                      for j in range(lengths[b])])  # Va(tanh(Wa q + Ua k_j))
                expected = torch.softmax(scores, dim=0)
                torch.testing.assert_close(weights[b, 0, i, : lengths[b]], expected, atol=1e-6, rtol=0)
                assert (weights[b, 0, i, lengths[b]:] == 0).all()
                torch.testing.assert_close(context[b, i], expected @ values[b, : lengths[b]], atol=1e-6, rtol=0)


# ---------------------------------------------------------------------------------------------------
# masks.py


def test_padding_mask_shape_and_values():
    ids = torch.tensor([[5, 6, 7, 0, 0], [5, 0, 6, 7, 8]])
    mask = padding_mask(ids, 0)
    assert mask.dtype == torch.bool and mask.shape == (2, 1, 1, 5)
    assert mask[:, 0, 0].tolist() == [[True, True, True, False, False], [True, False, True, True, True]]
    assert padding_mask(ids, 5)[:, 0, 0].tolist() == [[False, True, True, True, True],
                                                       [False, True, True, True, True]]


def test_causal_mask_square_and_with_prefix():
    square = causal_mask(3)
    assert square.dtype == torch.bool and square.tolist() == [[True, False, False],
                                                                 [True, True, False],
                                                                 [True, True, True]]
    # Three new queries over five keys: the first two keys are an earlier prefix every query sees.
    prefix = causal_mask(3, 5)
    assert prefix.tolist() == [[True, True, True, False, False],
                               [True, True, True, True, False],
                               [True, True, True, True, True]]
    # One query (a decoding step) sees every key so far.
    assert causal_mask(1, 4).tolist() == [[True, True, True, True]]


def test_combine_masks():
    assert combine() is None and combine(None, None) is None
    causal = causal_mask(4)
    assert combine(None, causal) is causal
    padding = padding_mask(torch.tensor([[5, 6, 0, 0], [5, 6, 7, 8]]), 0)
    combined = combine(causal, None, padding)
    assert combined.shape == (2, 1, 4, 4)
    assert combined[0, 0].tolist() == [[True, False, False, False],
                                       [True, True, False, False],
                                       [True, True, False, False],
                                       [True, True, False, False]]
    assert torch.equal(combined[1, 0], causal)


def test_torch_blocked_convention_and_trace_expansion():
    causal = causal_mask(3)
    assert torch.equal(to_torch_blocked(causal), torch.triu(torch.ones(3, 3, dtype=torch.bool), diagonal=1))
    padding = padding_mask(torch.tensor([[5, 6, 0], [5, 6, 7]]), 0)
    assert expand_for_trace(padding, 0, 2, 3).tolist() == [[True, True, False], [True, True, False]]
    assert expand_for_trace(padding, 1, 2, 3).tolist() == [[True, True, True], [True, True, True]]
    assert expand_for_trace(None, 0, 2, 3).all() and expand_for_trace(None, 0, 2, 3).shape == (2, 3)
    assert torch.equal(expand_for_trace(causal, 0, 3, 3), causal)
