"""Attention mechanisms. Each returns ``(output, weights)``; weights are a value, never a module attribute.

Dimension legend: B batch, H heads, Q query length, K key length, D per-head size, E model size.
Masks are boolean, True = may attend (models/nn/masks.py). Masked cells come out exactly 0 and a fully
masked row is all zeros (its output is zero), never NaN.
"""

from __future__ import annotations

import math
from typing import Callable, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn


def masked_softmax(scores: Tensor, mask: Tensor | None, *, in_place: bool = False) -> Tensor:
    """Softmax over the last axis restricted to allowed cells; fully masked rows give zeros.

    ``in_place`` lets it overwrite ``scores`` (the caller's own temporary) instead of copying it: at
    1,024 × 1,024 cells per head every new full-size tensor costs as much as the softmax itself.
    """
    blocked = None if mask is None else ~mask
    overwrite = in_place and not scores.requires_grad  # out= has no gradient; without one it saves a tensor
    if overwrite and blocked is not None and scores.device.type == "cpu" and not bool(blocked.any()):
        blocked = None  # nothing masked (one unpadded sentence): no pass over the scores (a GPU would wait here)
    filled = scores
    if blocked is not None:
        filled = scores.masked_fill_(blocked, float("-inf")) if in_place else scores.masked_fill(blocked, float("-inf"))
    weights = torch.softmax(filled, dim=-1, out=filled) if overwrite else torch.softmax(filled, dim=-1)
    if blocked is None:
        return weights
    # A row with no allowed key is softmax(all -inf) = NaN; zero it (every other masked cell is 0 already).
    empty = blocked.all(dim=-1, keepdim=True)
    if not overwrite:  # training: no check, which would make the host wait for the device at every layer
        return weights.masked_fill(empty, 0.0)
    if weights.device.type == "cpu" and not bool(empty.any()):  # a device would make the host wait for this check
        return weights
    return weights.masked_fill_(empty, 0.0)


def scaled_dot_product(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None, *, scale: bool = True,
                       bias: Tensor | None = None, dropout: float = 0.0,
                       need_weights: bool = True) -> tuple[Tensor, Tensor | None]:
    """softmax(q kᵀ / √D + bias) v (without the 1/√D when ``scale`` is False).

    Shape: q ``[B, H, Q, D]``, k ``[B, H, K, D]``, v ``[B, H, K, Dv]``, mask and ``bias`` (added to the scores
    before the mask applies; a relative position bias) broadcastable to ``[B, H, Q, K]`` (mask: True = may
    attend) → output ``[B, H, Q, Dv]``, weights ``[B, H, Q, K]`` or None.
    Without ``need_weights`` torch's fused kernel runs; it gives NaN on fully masked rows, which only
    an all-padding sequence produces.
    """
    if not need_weights:
        attn_mask = mask
        if bias is not None:  # one additive mask: the bias, -inf where blocked
            attn_mask = bias if mask is None else torch.where(mask, bias, float("-inf"))
        return F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, dropout_p=dropout,
                                              scale=None if scale else 1.0), None
    if scale:  # on the queries, [B, H, Q, D], not on the Q × K scores: a pass over 1,024² cells per head saved
        q = q / math.sqrt(q.shape[-1])
    scores = torch.matmul(q, k.transpose(-2, -1))  # [B, H, Q, K]
    if bias is not None:
        scores.add_(bias)
    weights = masked_softmax(scores, mask, in_place=True)
    output = torch.matmul(F.dropout(weights, dropout) if dropout else weights, v)  # [B, H, Q, Dv]
    return output, weights


def switch_heads(heads_out: Tensor, heads_off: "Sequence[int] | Tensor | Callable[[Tensor], Tensor]") -> Tensor:
    """``heads_out`` ``[B, H, ...]`` with an ablation's ``heads_off`` applied (models/nn/ablation.py): the listed
    heads zeroed, or each row's heads multiplied by a gate ``[B or 1, H]`` (``HeadGates``), or the heads' outputs
    handed to a function that returns what the layer combines instead (activation patching's ``HeadEdits``,
    models/analysis/patching.py: a head's output replaced by another run's, or noted)."""
    if callable(heads_off):
        return heads_off(heads_out)
    if isinstance(heads_off, Tensor):
        return heads_out * heads_off.reshape(*heads_off.shape, *[1] * (heads_out.dim() - 2))
    if heads_off:
        return heads_out.index_fill(1, torch.tensor(heads_off, device=heads_out.device), 0.0)
    return heads_out


class MultiHeadAttention(nn.Module):
    """Project q, k, v (one linear each, all heads at once), scaled dot-product per head, combine.

    With ``output_projection=False`` and one head this is the GRU family's scaled-dot attention
    (docs/architectures.md#gru-scaled-dot).
    Incremental decoding projects keys and values once (:meth:`project_kv`) and calls :meth:`attend`.
    """

    def __init__(self, d_model: int, heads: int, *, head_dim: int | None = None, key_dim: int | None = None,
                 bias: bool = True, output_projection: bool = True, dropout: float = 0.0, scale: bool = True):
        super().__init__()
        self.heads = heads
        self.scale = scale  # False: scores are q·k without 1/√D (T5)
        self.head_dim = head_dim or d_model // heads
        inner = heads * self.head_dim
        key_dim = key_dim or d_model
        self.query = nn.Linear(d_model, inner, bias=bias)
        self.key = nn.Linear(key_dim, inner, bias=bias)
        self.value = nn.Linear(key_dim, inner, bias=bias)
        self.output = nn.Linear(inner, d_model, bias=bias) if output_projection else None
        if not output_projection and inner != d_model:
            raise ValueError("without an output projection heads * head_dim must equal d_model")
        self.dropout = dropout

    def split_heads(self, x: Tensor) -> Tensor:
        """``[B, L, H·D]`` → ``[B, H, L, D]``."""
        batch, length, _ = x.shape
        return x.view(batch, length, self.heads, self.head_dim).transpose(1, 2)

    def project_kv(self, key: Tensor, value: Tensor) -> tuple[Tensor, Tensor]:
        """Shape: key, value ``[B, K, key_dim]`` → k, v ``[B, H, K, D]``."""
        return self.split_heads(self.key(key)), self.split_heads(self.value(value))

    def attend(self, query: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None, *, bias: Tensor | None = None,
               need_weights: bool = True, heads_off: Sequence[int] | Tensor = ()) -> tuple[Tensor, Tensor | None]:
        """Shape: query ``[B, Q, E]``, k/v ``[B, H, K, D]``, bias broadcastable to ``[B, H, Q, K]`` → output
        ``[B, Q, E]``, weights ``[B, H, Q, K]``.

        ``heads_off`` (models/nn/ablation.py): these heads' outputs are zeroed (or, a gate ``[B or 1, H]``,
        scaled) before the heads are combined; the weights they computed are still returned.
        """
        q = self.split_heads(self.query(query))  # [B, H, Q, D]
        dropout = self.dropout if self.training else 0.0
        heads_out, weights = scaled_dot_product(q, k, v=v, mask=mask, scale=self.scale, bias=bias, dropout=dropout,
                                                need_weights=need_weights)
        heads_out = switch_heads(heads_out, heads_off)
        batch, _, length, _ = heads_out.shape
        combined = heads_out.transpose(1, 2).reshape(batch, length, self.heads * self.head_dim)  # [B, Q, H·D]
        return (self.output(combined) if self.output is not None else combined), weights

    def forward(self, query: Tensor, key: Tensor, value: Tensor, mask: Tensor | None = None, *,
                need_weights: bool = True) -> tuple[Tensor, Tensor | None]:
        k, v = self.project_kv(key, value)
        return self.attend(query, k, v=v, mask=mask, need_weights=need_weights)


class AdditiveAttention(nn.Module):
    """Bahdanau attention: score = w₂ · act(W₁ [query; key] + b₁) + b₂, softmax over keys
    (docs/architectures.md#gru-additive).

    The concatenated form equals the tutorial's ``Va(tanh(Wa q + Ua k))`` with ``W₁ = [Wa | Ua]``.
    """

    def __init__(self, query_dim: int, key_dim: int, hidden: int, activation: str = "relu"):
        super().__init__()
        self.hidden = nn.Linear(query_dim + key_dim, hidden)
        self.activation = nn.ReLU() if activation == "relu" else nn.Tanh()
        self.score = nn.Linear(hidden, 1)

    def forward(self, query: Tensor, keys: Tensor, values: Tensor, mask: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """Shape: query ``[B, Q, Eq]``, keys ``[B, K, Ek]``, values ``[B, K, Ev]``, mask broadcastable to
        ``[B, 1, Q, K]`` → context ``[B, Q, Ev]``, weights ``[B, 1, Q, K]`` (one head)."""
        q_len, k_len = query.shape[1], keys.shape[1]
        pairs = torch.cat([query[:, :, None, :].expand(-1, -1, k_len, -1),
                           keys[:, None, :, :].expand(-1, q_len, -1, -1)], dim=-1)  # [B, Q, K, Eq+Ek]
        scores = self.score(self.activation(self.hidden(pairs))).squeeze(-1)[:, None]  # [B, 1, Q, K]
        weights = masked_softmax(scores, mask)
        context = torch.matmul(weights[:, 0], values)  # [B, Q, Ev]
        return context, weights
