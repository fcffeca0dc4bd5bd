"""Edits of a forward pass's activations for activation patching (docs/ARCHITECTURE.md#activation-patching): read
by the Transformer models through the same two calls as an ``Ablation`` or ``HeadGates`` (models/nn/ablation.py),
so the models carry no code of their own for it.

- ``widened(kind, layer, x, …)``, which a model calls before each layer (a decoder layer as ``dec_self``), sees the
  residual stream entering that layer: layer 0 is the embeddings, layer l the output of layer l − 1. The output of
  the last layer (before the final norm) is seen by a forward hook on that layer (``edits_applied``).
- ``heads_off(kind, layer, heads)`` returns a function of the heads' outputs ``[B, H, Q, D]`` (before the output
  projection combines them; ``attention.switch_heads`` calls it).

``Notes`` keeps what a pass computed there (optionally as a graph for a gradient); ``Patches`` replaces, in row
``r`` of a batch of ``copies`` rows, the activations a mask selects by another run's. Rows are made at the first
patched layer (``HeadGates.widened``): the layers below it run once for every row.
"""

from __future__ import annotations

import contextlib
from typing import Iterator, Mapping

import torch
from torch import Tensor, nn

from .ablation import HeadGates

ENCODER, DECODER = "encoder", "decoder"  # the two residual streams (a decoder-only model has the decoder's)

Stage = tuple[bool, int]  # where a layer runs: the encoder's layers, then the decoder's (models/nn/ablation.py)


def side_of(kind: str) -> str:
    return ENCODER if kind == "enc_self" else DECODER


def stage(side: str, layer: int) -> Stage:
    """Where the residual stream entering ``layer`` of ``side`` is read; the encoder's output (its last layer's)
    is read before the decoder's first layer."""
    return side == DECODER, layer


def stacks(model: nn.Module) -> dict[str, nn.ModuleList]:
    """The layers of each residual stream a Transformer has, by side."""
    if hasattr(model, "encoder_layers"):
        return {ENCODER: model.encoder_layers, DECODER: model.decoder_layers}
    return {DECODER: model.layers}


class Notes(HeadGates):
    """Notes every residual stream and every head's output a pass computes. With ``gradient`` the embeddings of
    each side become leaves that need a gradient, so every noted tensor is part of a graph the metric can be
    differentiated through."""

    def __init__(self, *, gradient: bool = False):
        super().__init__({})
        self.gradient = gradient
        self.residual: dict[tuple[str, int], Tensor] = {}
        self.heads: dict[tuple[str, int], Tensor] = {}

    def __bool__(self) -> bool:
        return True

    def widened(self, kind: str, layer: int, *tensors):
        x, *rest = tensors
        if layer == 0 and self.gradient:
            x = x.detach().requires_grad_()
        self.residual[(side_of(kind), layer)] = x
        return (x, *rest)

    def after_last(self, side: str, layer: int, x: Tensor) -> Tensor:
        self.residual[(side, layer)] = x
        return x

    def heads_off(self, kind: str, layer: int, heads: int):
        def note(heads_out: Tensor) -> Tensor:
            self.heads[(kind, layer)] = heads_out
            return heads_out
        return note


class Patches(HeadGates):
    """``copies`` rows of one pass; in row r the residual positions ``residual[(side, layer)][0][r]`` (a bool mask
    ``[rows, positions]``) take the values of ``…[1]`` ``[1, positions, E]``, and the heads ``heads[(kind,
    layer)][0][r]`` (``[rows, H]``) take ``…[1]`` ``[1, H, Q, D]``. Every tensor a layer reads is repeated from the
    stage ``widen_at`` on (None: the patch makes the rows itself, as one at the last layer's output does)."""

    def __init__(self, copies: int, widen_at: Stage | None, *,
                 residual: Mapping[tuple[str, int], tuple[Tensor, Tensor]],
                 heads: Mapping[tuple[str, int], tuple[Tensor, Tensor]]):
        super().__init__({}, copies=copies)
        self.start = widen_at
        self.residual, self.head_edits = dict(residual), dict(heads)

    def __bool__(self) -> bool:
        return True

    def widened(self, kind: str, layer: int, *tensors):
        side = side_of(kind)
        if self.start is not None and stage(side, layer) >= self.start:
            tensors = tuple(tensor if tensor is None or tensor.shape[0] != 1 else
                            tensor.repeat(self.copies, *[1] * (tensor.dim() - 1)) for tensor in tensors)
        x, *rest = tensors
        return (self.after_last(side, layer, x), *rest)

    def after_last(self, side: str, layer: int, x: Tensor) -> Tensor:
        edit = self.residual.get((side, layer))
        if edit is None:
            return x
        mask, values = edit
        return torch.where(mask[:, :, None], values, x)

    def heads_off(self, kind: str, layer: int, heads: int):
        edit = self.head_edits.get((kind, layer))
        if edit is None:
            return ()
        mask, values = edit
        return lambda heads_out: torch.where(mask[:, :, None, None], values, heads_out)


@contextlib.contextmanager
def edits_applied(model: nn.Module, edits: "Notes | Patches") -> Iterator[None]:
    """Hooks on each stack's last layer hand its output (the residual stream after it) to ``edits.after_last``."""
    handles = []
    for side, layers in stacks(model).items():
        if len(layers):
            handles.append(layers[-1].register_forward_hook(_after_last(edits, side, len(layers))))
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


def _after_last(edits, side: str, layer: int):
    def hook(_module, _args, output):
        return (edits.after_last(side, layer, output[0]), *output[1:])
    return hook
