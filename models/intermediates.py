"""Attention as it travels inside the models (tensors ``[batch, heads, query_len, key_len]``), and its
conversion to the host-side ``AttentionTrace`` (models/trace.py, numpy only)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch
from torch import Tensor

from .masks import expand_for_trace
from .trace import AttentionTrace


@dataclass
class Intermediates:
    """Attention tensors of one batched forward pass, per kind one tensor ``[B, H, Q, K]`` per layer,
    and the mask each kind used (broadcastable to ``[B, 1, Q, K]``)."""

    attention: dict[str, list[Tensor]] = field(default_factory=dict)
    masks: dict[str, Tensor | None] = field(default_factory=dict)


def trace_from_intermediates(intermediates: Intermediates, index: int, src_tokens: list[str],
                             tgt_tokens: list[str], dtype: type = np.float32) -> AttentionTrace:
    """Example ``index`` of a batched forward pass as a trace (trimmed to the given token lists)."""
    attention, masks = {}, {}
    for kind, per_layer in intermediates.attention.items():
        q_len = len(src_tokens) if kind == "enc_self" else len(tgt_tokens)
        k_len = len(tgt_tokens) if kind == "dec_self" else len(src_tokens)
        attention[kind] = [to_numpy(layer[index, :, :q_len, :k_len], dtype) for layer in per_layer]
        mask = intermediates.masks.get(kind)
        masks[kind] = expand_for_trace(mask, index, q_len, k_len)[:q_len, :k_len].numpy().copy()
    return AttentionTrace(list(src_tokens), list(tgt_tokens), attention, masks)


def to_numpy(tensor: Tensor, dtype: type = np.float32) -> np.ndarray:
    return tensor.detach().to("cpu", torch.float32).numpy().astype(dtype, copy=False)
