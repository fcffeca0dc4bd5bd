"""The one mask convention of attnviz: boolean, ``True`` = the query may attend to this key.

Masks broadcast against attention scores of shape ``[batch, heads, query_len, key_len]``. Torch's own
APIs use other conventions (``nn.MultiheadAttention``: True = blocked); converters live at the edges.
"""

from __future__ import annotations

import torch
from torch import Tensor


def padding_mask(ids: Tensor, pad_id: int) -> Tensor:
    """Keys that are real tokens.

    Shape: ids ``[batch, key_len]`` → ``[batch, 1, 1, key_len]`` (broadcasts over heads and queries).
    """
    return (ids != pad_id)[:, None, None, :]


def target_mask(tgt_in: Tensor, pad_id: int) -> Tensor:
    """Decoder self-attention mask: causal, and padded target keys blocked.

    Position 0 holds the start token, which is real even where a format uses the pad id to start
    decoding (Marian), so it is never treated as padding.
    Shape: tgt_in ``[batch, T]`` → ``[batch, 1, T, T]``.
    """
    keys = tgt_in != pad_id
    keys[:, 0] = True
    return causal_mask(tgt_in.shape[1], device=tgt_in.device) & keys[:, None, None, :]


def causal_mask(query_len: int, key_len: int | None = None, *, device: torch.device | str | None = None) -> Tensor:
    """Query i may attend to keys 0..i (+ key_len - query_len when the keys include an earlier prefix).

    Shape: ``[query_len, key_len]``.
    """
    key_len = query_len if key_len is None else key_len
    ones = torch.ones(query_len, key_len, dtype=torch.bool, device=device)
    return torch.tril(ones, diagonal=key_len - query_len)


def combine(*masks: Tensor | None) -> Tensor | None:
    """Logical AND of the given masks (broadcast); ``None`` entries mean "no restriction"."""
    present = [mask for mask in masks if mask is not None]
    if not present:
        return None
    result = present[0]
    for mask in present[1:]:
        result = result & mask
    return result


def to_torch_blocked(mask: Tensor) -> Tensor:
    """Convert to the ``True = blocked`` convention of ``nn.MultiheadAttention``'s ``attn_mask``."""
    return ~mask


def expand_for_trace(mask: Tensor | None, batch_index: int, query_len: int, key_len: int) -> Tensor:
    """One example's ``[query_len, key_len]`` mask out of a broadcastable 4-D (or 2-D) mask."""
    if mask is None:
        return torch.ones(query_len, key_len, dtype=torch.bool)
    if mask.dim() == 4:
        mask = mask[batch_index if mask.shape[0] > 1 else 0, 0]
    return mask.expand(query_len, key_len).cpu()
