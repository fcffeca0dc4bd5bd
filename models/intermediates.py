"""Attention as it travels inside the models (tensors ``[batch, heads, query_len, key_len]``), and its
conversion to the host-side ``AttentionTrace`` (models/trace.py, numpy only)."""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import Tensor

from .masks import expand_for_trace
from .trace import AttentionTrace, DecodeStep


_KEPT_DTYPE: contextvars.ContextVar[torch.dtype | None] = contextvars.ContextVar("kept_attention_dtype", default=None)


@contextlib.contextmanager
def keeping_attention(dtype: type) -> Iterator[None]:
    """Inside, the models keep each layer's attention weights as ``dtype`` (numpy float32 or float16):
    a float16 copy is made as each layer finishes, so a long forward pass never holds every layer's
    float32 weights at once. Per thread (a context variable)."""
    token = _KEPT_DTYPE.set(torch.float16 if np.dtype(dtype) == np.float16 else None)
    try:
        yield
    finally:
        _KEPT_DTYPE.reset(token)


def kept(weights: Tensor | None) -> Tensor | None:
    """One layer's attention weights as the model keeps them for the trace (see :func:`keeping_attention`)."""
    dtype = _KEPT_DTYPE.get()
    return weights if weights is None or dtype is None else weights.to(dtype)


@dataclass
class Intermediates:
    """Attention tensors of one batched forward pass, per kind one tensor ``[B, H, Q, K]`` per layer,
    and the mask each kind used (broadcastable to ``[B, 1, Q, K]``)."""

    attention: dict[str, list[Tensor]] = field(default_factory=dict)
    masks: dict[str, Tensor | None] = field(default_factory=dict)


def trace_from_intermediates(intermediates: Intermediates, index: int, src_tokens: list[str],
                             tgt_tokens: list[str], dtype: type = np.float32, release: bool = False) -> AttentionTrace:
    """Example ``index`` of a batched forward pass as a trace (trimmed to the given token lists).

    ``release`` empties the intermediates' lists as their tensors are converted, so that a conversion
    to another dtype holds one layer twice at a time, not the whole pass.
    """
    attention, masks = {}, {}
    for kind, per_layer in intermediates.attention.items():
        q_len = len(src_tokens) if kind == "enc_self" else len(tgt_tokens)
        k_len = len(tgt_tokens) if kind == "dec_self" else len(src_tokens)
        attention[kind] = []
        for layer in range(len(per_layer)):
            attention[kind].append(to_numpy(per_layer[layer][index, :, :q_len, :k_len], dtype))
            if release:
                per_layer[layer] = None
        if release:
            per_layer.clear()
        mask = intermediates.masks.get(kind)
        masks[kind] = expand_for_trace(mask, index, query_len=q_len, key_len=k_len)[:q_len, :k_len].numpy().copy()
    return AttentionTrace(list(src_tokens), list(tgt_tokens), attention=attention, masks=masks)


def to_numpy(tensor: Tensor, dtype: type = np.float32) -> np.ndarray:
    """A host array of ``dtype`` (float32 or float16): converted by torch, on the device, before the copy
    to the host (numpy's own float16 conversion is several times slower); a CPU float32 tensor is not copied."""
    half = np.dtype(dtype) == np.float16
    return tensor.detach().to(torch.float16 if half else torch.float32).cpu().numpy().astype(dtype, copy=False)


class RowBuffer:
    """The attention rows of one hypothesis (decoding without a beam), written step by step straight into
    one ``[heads, max_len, key_len]`` array per kind and layer (dec_self rows zero-filled on the right).

    Each step holds views into these arrays, so every attention matrix is held once, and no step's work
    grows with the history. Pages of a zero-filled array that no row touched take no memory, so a short
    output of a model with a long maximum costs what it uses.
    """

    def __init__(self, max_len: int, dtype: type = np.float32):
        self.max_len, self.dtype = max_len, dtype
        self.arrays: dict[str, list[np.ndarray]] = {}

    def add(self, index: int, attention: dict[str, list[Tensor]]) -> dict[str, list[np.ndarray]]:
        """Store step ``index``'s rows (per kind and layer ``[1, heads, key_len]``); returns views of them."""
        views = {}
        for kind, layers in attention.items():
            if kind not in self.arrays:
                key_len = self.max_len if kind == "dec_self" else layers[0].shape[-1]
                self.arrays[kind] = [np.zeros((layer.shape[1], self.max_len, key_len), self.dtype) for layer in layers]
            views[kind] = []
            for array, layer in zip(self.arrays[kind], layers):
                key_len = layer.shape[-1]
                array[:, index, :key_len] = to_numpy(layer[0], self.dtype)
                views[kind].append(array[None, :, index, :key_len])
        return views

    def finish(self, steps: list["DecodeStep"]) -> dict[str, list[np.ndarray]]:
        """The ``[heads, T, key_len]`` arrays of the ``T = len(steps)`` steps taken (dec_self: T keys).

        A run that stopped before ``max_len`` gets compact copies, made layer by layer, and its steps'
        views move into them; the long arrays are then freed.
        """
        length = len(steps)
        for kind, arrays in self.arrays.items():
            for layer, array in enumerate(arrays):
                key_len = length if kind == "dec_self" else array.shape[2]
                if length == self.max_len and key_len == array.shape[2]:
                    continue
                arrays[layer] = compact = np.ascontiguousarray(array[:, :length, :key_len])
                for index, step in enumerate(steps):
                    width = step.attention[kind][layer].shape[-1]
                    step.attention[kind][layer] = compact[None, :, index, :width]
        return self.arrays
