"""Views of a trace that combine heads or layers: mean, max and attention rollout.

All take and return numpy arrays; rows of the result still describe query positions. Attention rollout
(Abnar & Zuidema, 2020) follows self-attention through the layers: each layer's head-mean with the
residual added as identity (``0.5·A + 0.5·I``, rows renormalised), multiplied from the first layer up.
For cross-attention, the chosen layer's head-mean is carried back through the encoder's rollout, so
it says which *input tokens* (not encoder states) each output position drew on.
"""

from __future__ import annotations

import numpy as np

from .records import AttentionTrace

AGGREGATES = ("mean", "max", "rollout")


def head_mean(weights: np.ndarray) -> np.ndarray:
    """``[heads, q, k]`` → ``[q, k]``, at least float32 (also of a float16 trace)."""
    return weights.mean(axis=0, dtype=np.promote_types(weights.dtype, np.float32))


def head_max(weights: np.ndarray) -> np.ndarray:
    return weights.max(axis=0).astype(np.promote_types(weights.dtype, np.float32), copy=False)


def _with_residual(weights: np.ndarray) -> np.ndarray:
    """Head-mean plus identity (the residual path), rows renormalised. Square ``[heads, n, n]`` → ``[n, n]``."""
    mixed = 0.5 * head_mean(weights) + 0.5 * np.eye(weights.shape[-1], dtype=np.float64)
    totals = mixed.sum(axis=-1, keepdims=True)
    return mixed / np.where(totals == 0, 1, totals)


def self_rollout(layers: list[np.ndarray], upto: int) -> np.ndarray:
    """Rollout of square self-attention through layers ``0..upto`` → ``[n, n]``."""
    result = np.eye(layers[0].shape[-1], dtype=np.float64)
    for weights in layers[: upto + 1]:
        result = _with_residual(weights.astype(np.float64)) @ result
    return result.astype(np.float32)


def aggregate(trace: AttentionTrace, kind: str, layer: int, how: str) -> np.ndarray:
    """The ``[q, k]`` matrix for ``how`` in :data:`AGGREGATES` at ``layer`` of ``kind``."""
    weights = trace.attention[kind][layer]
    if how == "mean":
        return head_mean(weights)
    if how == "max":
        return head_max(weights)
    if how != "rollout":
        raise ValueError(f"unknown aggregate {how!r}; choose from {AGGREGATES}")
    if kind in ("enc_self", "dec_self"):
        return self_rollout(trace.attention[kind], layer)
    cross = head_mean(weights).astype(np.float64)
    if "enc_self" in trace.attention:
        encoder = trace.attention["enc_self"]
        cross = cross @ self_rollout(encoder, len(encoder) - 1).astype(np.float64)
    return cross.astype(np.float32)
