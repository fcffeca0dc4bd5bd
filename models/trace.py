"""What attention did, as plain data: ``AttentionTrace`` (one sentence) and ``DecodeStep`` (one step).

Inside models, attention travels as tensors ``[batch, heads, query_len, key_len]`` (``Intermediates``);
these classes hold numpy arrays on the host so they can cross threads and be saved. Kinds:
``enc_self`` (encoder self-attention), ``dec_self`` (decoder self-attention), ``cross``. Masks are boolean,
True = may attend.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch
from torch import Tensor

from .masks import expand_for_trace

KINDS = ("enc_self", "dec_self", "cross")


@dataclass
class Intermediates:
    """Attention tensors of one batched forward pass, per kind one tensor ``[B, H, Q, K]`` per layer,
    and the mask each kind used (broadcastable to ``[B, 1, Q, K]``)."""

    attention: dict[str, list[Tensor]] = field(default_factory=dict)
    masks: dict[str, Tensor | None] = field(default_factory=dict)


@dataclass
class AttentionTrace:
    """One sentence's attention: per kind, one array ``[heads, query_len, key_len]`` per layer.

    ``src_tokens`` label encoder positions; ``tgt_tokens`` label decoder query positions and start with
    the start token fed to the decoder. ``masks[kind]`` is ``[query_len, key_len]``, True = may attend.
    """

    src_tokens: list[str]
    tgt_tokens: list[str]
    attention: dict[str, list[np.ndarray]]
    masks: dict[str, np.ndarray]

    @property
    def kinds(self) -> list[str]:
        return [kind for kind in KINDS if kind in self.attention]

    def layers(self, kind: str) -> int:
        return len(self.attention[kind])

    def heads(self, kind: str) -> int:
        return self.attention[kind][0].shape[0]

    def query_tokens(self, kind: str) -> list[str]:
        return self.src_tokens if kind == "enc_self" else self.tgt_tokens

    def key_tokens(self, kind: str) -> list[str]:
        return self.tgt_tokens if kind == "dec_self" else self.src_tokens

    @classmethod
    def from_intermediates(cls, intermediates: Intermediates, index: int, src_tokens: list[str],
                           tgt_tokens: list[str], dtype: type = np.float32, release: bool = False) -> "AttentionTrace":
        """Take example ``index`` of a batched forward pass (trimmed to the given token lists).

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
            masks[kind] = expand_for_trace(mask, index, q_len, k_len)[:q_len, :k_len].numpy().copy()
        return cls(list(src_tokens), list(tgt_tokens), attention, masks)


@dataclass
class DecodeStep:
    """One decoding step over a beam of ``K`` hypotheses (``K = 1`` for greedy and forced decoding).

    Row ``i`` of every array describes hypothesis ``i`` *after* this step: it extended hypothesis
    ``parents[i]`` of the previous step with ``token_ids[i]``. ``probabilities``/``ranks`` are that
    token's probability and rank (0 = most likely) in the parent's next-token distribution, whose top
    ``k`` entries are ``top_ids``/``top_probs``. ``attention[kind]`` holds, per layer, ``[K, heads, key_len]``:
    the attention row of the query that produced this step's distribution (reordered through ``parents``
    so row ``i`` belongs to hypothesis ``i``'s own history), and ``masks[kind]`` ``[K, key_len]`` the mask
    row it used (True = may attend). ``scores`` are cumulative log-probabilities. A beam row that had
    already finished is extended by padding with probability 1 and rank 0.
    """

    step: int
    token_ids: np.ndarray
    tokens: list[str]
    probabilities: np.ndarray
    ranks: np.ndarray
    top_ids: np.ndarray
    top_tokens: list[list[str]]
    top_probs: np.ndarray
    parents: np.ndarray
    scores: np.ndarray
    finished: np.ndarray
    attention: dict[str, list[np.ndarray]]
    masks: dict[str, np.ndarray]

    @property
    def token_id(self) -> int:
        return int(self.token_ids[0])

    @property
    def token(self) -> str:
        return self.tokens[0]

    @property
    def probability(self) -> float:
        return float(self.probabilities[0])

    @property
    def rank(self) -> int:
        return int(self.ranks[0])

    @property
    def beam_size(self) -> int:
        return len(self.token_ids)


@dataclass
class DecodeResult:
    """A finished hypothesis: its tokens (without the start token), text, scores and own trace.

    ``steps[t]`` is decoding step t and ``rows[t]`` this hypothesis' row in it (always 0 without a beam).
    """

    token_ids: list[int]
    tokens: list[str]
    text: str
    log_prob: float
    score: float  # log_prob after the length penalty; what beams are ranked by
    trace: AttentionTrace | None
    steps: list[DecodeStep]
    truncated_source: bool = False
    rows: list[int] = field(default_factory=list)


def to_numpy(tensor: Tensor, dtype: type = np.float32) -> np.ndarray:
    return tensor.detach().to("cpu", torch.float32).numpy().astype(dtype, copy=False)


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
