"""The interface every attnviz model implements, and the decoder state that incremental decoding carries.

A model is used two ways, and both return attention as values:
- ``forward(src_ids, tgt_in)``: teacher-forced over whole sequences (training, forced decoding, export);
- ``start(src_ids)`` once, then ``step(tokens, state)`` per output token (greedy and beam search), with
  keys/values cached so a step costs one query position, not the whole prefix.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Callable

import torch
from torch import Tensor, nn

from .ablation import NO_ABLATION, Ablation
from .config import ModelConfig
from .masks import padding_mask
from .intermediates import Intermediates


@dataclass
class LayerCache:
    """Keys and values one decoder layer already computed. Shape of each: ``[B, H, len, D]``.

    The self-attention prefix lives at the start of ``room_k``/``room_v``, buffers that double when
    full: a step copies only its own keys/values, where concatenating would copy the whole prefix at
    every step (and leave the process' memory fragmented by ever larger freed blocks).
    """

    self_k: Tensor | None = None
    self_v: Tensor | None = None
    cross_k: Tensor | None = None
    cross_v: Tensor | None = None
    room_k: Tensor | None = None
    room_v: Tensor | None = None
    spare_k: Tensor | None = None  # the buffers the last beam reorder copied from: the next one copies into them
    spare_v: Tensor | None = None
    limit: int | None = None  # the most positions the prefix will hold, where the decoding knows it: no room beyond

    def extend_self(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Append this step's keys/values and return the whole prefix's."""
        start = 0 if self.self_k is None else self.self_k.shape[2]
        end = start + k.shape[2]
        if self.room_k is None or end > self.room_k.shape[2]:
            self.room_k, self.room_v = (_room_for(self.self_k, k, end, limit=self.limit),
                                        _room_for(self.self_v, v, end, limit=self.limit))
        self.room_k[:, :, start:end] = k
        self.room_v[:, :, start:end] = v
        self.self_k, self.self_v = self.room_k[:, :, :end], self.room_v[:, :, :end]
        return self.self_k, self.self_v

    def cross_kv(self, project: Callable[[], tuple[Tensor, Tensor]]) -> tuple[Tensor, Tensor]:
        """The keys/values of the encoder output: ``project()`` once per sentence, then the cached ones."""
        if self.cross_k is None:
            self.cross_k, self.cross_v = project()
        return self.cross_k, self.cross_v

    def reorder(self, index: Tensor, *, one_source: bool = False) -> "LayerCache":
        """Follow beam parents; the buffers keep their spare room, so the next step copies nothing more.

        The prefix is copied into the buffers the previous reorder copied from, so a long beam search
        allocates no new buffer per step (a few megabytes each at a long output, and freed blocks of that
        size that small allocations then split would leave the process' memory in pieces); this cache is
        not to be used afterwards. ``one_source``: every row encodes the same source, so the cross
        keys/values stay as they are when the number of rows does."""
        pick = lambda t: None if t is None else t.index_select(0, index)  # noqa: E731
        room_k, room_v = (self.room_k, self.room_v) if self.room_k is not None else (self.self_k, self.self_v)
        same = one_source and self.cross_k is not None and self.cross_k.shape[0] == len(index)
        cache = LayerCache(cross_k=self.cross_k if same else pick(self.cross_k),
                           cross_v=self.cross_v if same else pick(self.cross_v),
                           room_k=_select_into(room_k, index, self.spare_k),
                           room_v=_select_into(room_v, index, self.spare_v), spare_k=room_k, spare_v=room_v,
                           limit=self.limit)
        if self.self_k is not None:
            length = self.self_k.shape[2]
            cache.self_k, cache.self_v = cache.room_k[:, :, :length], cache.room_v[:, :, :length]
        return cache


def _select_into(tensor: Tensor | None, index: Tensor, spare: Tensor | None) -> Tensor | None:
    """Rows ``index`` of ``tensor``, written into ``spare`` where it has the right shape."""
    if tensor is None:
        return None
    shape = (len(index), *tensor.shape[1:])
    if spare is None or spare.shape != shape or spare.dtype != tensor.dtype or spare.device != tensor.device:
        return tensor.index_select(0, index)
    return torch.index_select(tensor, 0, index, out=spare)


def _room_for(prefix: Tensor | None, new: Tensor, length: int, *, limit: int | None = None) -> Tensor:
    """A buffer with room for twice ``length`` positions (at most ``limit``, at least ``length``), holding ``prefix``
    at its start."""
    size = max(2 * length, 16)
    if limit is not None:
        size = max(min(size, limit), length)
    room = new.new_empty(new.shape[0], new.shape[1], size, new.shape[3])
    if prefix is not None:
        room[:, :, : prefix.shape[2]] = prefix
    return room


@dataclass
class DecoderState:
    """Everything a decoding step needs. ``memory`` is the encoder output ``[B, S, E]``, ``src_mask``
    ``[B, 1, 1, S]`` (True = real token), ``position`` the number of tokens fed so far."""

    memory: Tensor
    src_mask: Tensor
    position: int = 0
    hidden: Tensor | None = None  # GRU decoders: [B, H]
    caches: list[LayerCache] = field(default_factory=list)
    ablation: Ablation = NO_ABLATION  # the heads every step switches off (models/nn/ablation.py)

    def limit_caches(self, positions: int) -> None:
        """The decoder's self-attention caches will hold at most ``positions`` positions (the prompt's and the
        output's): their buffers grow no further."""
        for cache in self.caches:
            cache.limit = positions

    def reorder(self, index: Tensor, *, one_source: bool = False) -> "DecoderState":
        """Follow beam parents: row i of the result is row ``index[i]`` of this state. ``one_source``: every
        row encodes the same source (a beam over one sentence), so the source side is not copied while the
        number of rows stays the same (a beam step would otherwise copy the encoder output and every
        layer's cross keys/values, megabytes at a long source)."""
        same = one_source and self.memory.shape[0] == len(index)
        return replace(
            self,
            memory=self.memory if same else self.memory.index_select(0, index),
            src_mask=self.src_mask if same else self.src_mask.index_select(0, index),
            hidden=None if self.hidden is None else self.hidden.index_select(0, index),
            caches=[cache.reorder(index, one_source=one_source) for cache in self.caches],
        )


@dataclass
class StepOutput:
    """One decoding step: next-token logits ``[B, V]``, per kind and layer the attention row
    ``[B, H, K]`` of the query just fed, and per kind the mask row ``[B, K]`` it used."""

    logits: Tensor
    attention: dict[str, list[Tensor]]
    masks: dict[str, Tensor]
    state: DecoderState


class Seq2Seq(nn.Module):
    """Base of every architecture. Subclasses set ``kinds`` (the attention kinds they produce); ``decodes`` is False
    for a model that only encodes (encoder-only: models/inference/fill_mask.py runs it)."""

    kinds: tuple[str, ...] = ()
    decodes: bool = True

    def __init__(self, config: ModelConfig):
        super().__init__()
        config.validate()
        self.config = config

    @property
    def pad_id(self) -> int:
        return self.config.pad_id

    def source_mask(self, src_ids: Tensor) -> Tensor:
        return padding_mask(src_ids, self.config.pad_id)

    def forward(self, src_ids: Tensor, tgt_in: Tensor, *, need_weights: bool = False,
                ablation: Ablation = NO_ABLATION) -> tuple[Tensor, Intermediates]:
        """Shape: src_ids ``[B, S]``, tgt_in ``[B, T]`` (starts with the start token) → logits ``[B, T, V]``.

        ``ablation``: heads whose output is zeroed (models/nn/ablation.py); their weights are still returned."""
        raise NotImplementedError

    def start(self, src_ids: Tensor, *, need_weights: bool = True,
              ablation: Ablation = NO_ABLATION) -> tuple[DecoderState, Intermediates]:
        """Encode once; returns the state for :meth:`step` (which keeps ``ablation``) and the encoder's own
        attention."""
        raise NotImplementedError

    def attention_shape(self) -> dict[str, tuple[int, int]]:
        """Per attention kind the model has, ``(layers, heads)``."""
        raise NotImplementedError

    def step(self, tokens: Tensor, state: DecoderState, *, need_weights: bool = True) -> StepOutput:
        """Feed one token per row (``[B]``); the state's caches grow by one position."""
        raise NotImplementedError

    def parameter_count(self) -> int:
        return sum(p.numel() for p in self.parameters())


def init_normal(module: nn.Module, std: float = 0.02) -> None:
    """GPT-2's and BERT's initialisation, for the models trained here in their shapes: every bias zero, every matrix
    (projections, token and position tables) normal with ``std``, norm weights left at their ones."""
    for name, parameter in module.named_parameters():
        if name.endswith("bias"):
            nn.init.zeros_(parameter)
        elif parameter.dim() > 1:
            nn.init.normal_(parameter, std=std)


def sinusoid_table(length: int, dim: int, layout: str = "interleaved") -> Tensor:
    """Sinusoidal positions ``[length, dim]``, angle = pos / 10000^(2i/dim).

    ``interleaved``: dims 2i = sin, 2i+1 = cos (the 2017 paper). ``half_split``: first half sin, second
    half cos (Marian). ``fairseq``: first half sin, second half cos with angle pos / 10000^(i/(dim/2 − 1)), a
    zero last column for an odd dim, computed in float32 as fairseq does.
    """
    if layout == "fairseq":
        half = dim // 2
        step = math.log(10000) / max(half - 1, 1)
        angles = torch.arange(length, dtype=torch.float32)[:, None] * torch.exp(torch.arange(half).float() * -step)
        return torch.cat([torch.sin(angles), torch.cos(angles), torch.zeros(length, dim - 2 * half)], dim=1)
    position = torch.arange(length, dtype=torch.float64)[:, None]
    inverse_frequency = torch.exp(-math.log(10000.0) * torch.arange(0, dim, 2, dtype=torch.float64) / dim)
    angles = position * inverse_frequency  # [length, ceil(dim/2)]
    table = torch.zeros(length, dim, dtype=torch.float64)
    if layout == "interleaved":
        table[:, 0::2] = torch.sin(angles)
        table[:, 1::2] = torch.cos(angles[:, : dim // 2])
    else:
        half = (dim + 1) // 2
        table[:, :half] = torch.sin(angles)
        table[:, half:] = torch.cos(angles[:, : dim - half])
    return table.float()
