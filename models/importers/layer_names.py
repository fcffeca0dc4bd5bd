"""How each foreign layout names the weights of its layers: one table per format, our name → the foreign name,
read for every layer of a stack by :func:`map_layers`.

A table's keys are our names inside one layer (``self_attention.attention.query.weight``); its values are the
foreign names inside one of that format's layers (``self_attn.q_proj.weight``), or, where the foreign tensor is
not ours as saved, a :class:`From` naming it with the transform that makes ours of it (one part of a fused q/k/v
matrix, a transposed Conv1D weight), or :class:`Zeros` for a bias the format does not have (a zero bias adds
nothing). The stacks' prefixes (and the names, where a layout numbers them so: ``rnn.weight_ih_l{layer}``) hold
``{layer}``, the layer's number. :func:`both`, :func:`attention` and :func:`recurrent` write the entries most
tables repeat.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

import torch
from torch import Tensor

from ..nn.config import TransformerConfig
from .common import WeightMap, check_sinusoid

BOTH = ("weight", "bias")
RECURRENT = ("weight_ih", "weight_hh", "bias_ih", "bias_hh")  # the tensors of one torch RNN layer (or cell)


@dataclass(frozen=True)
class From:
    """A foreign tensor read through ``transform`` (it may return a view: the weight map copies none)."""

    name: str
    transform: Callable[[Tensor], Tensor]


@dataclass(frozen=True)
class Zeros:
    """A bias the foreign layout does not have: ``rows`` zeros; ``name`` stands for it in error lines."""

    name: str
    rows: int


Names = Mapping[str, "str | From | Zeros"]  # our name → the foreign one


def both(ours: str, theirs: str, kinds: Sequence[str] = BOTH) -> dict[str, str]:
    """``{ours}.weight`` ← ``{theirs}.weight`` and ``{ours}.bias`` ← ``{theirs}.bias`` (``kinds``: which)."""
    return {f"{ours}.{kind}": f"{theirs}.{kind}" for kind in kinds}


def attention(ours: str, theirs: str, projections: Mapping[str, str], kinds: Sequence[str] = BOTH) -> dict[str, str]:
    """An attention block's projections: ``{ours}.attention.{query|key|value|output}.{kind}`` ← ``{theirs}{name}
    .{kind}``, ``projections`` mapping our projection to the foreign name."""
    return {f"{ours}.attention.{name}.{kind}": f"{theirs}{foreign}.{kind}"
            for name, foreign in projections.items() for kind in kinds}


def recurrent(ours: str, theirs: str, directions: Sequence[str] = ("",)) -> dict[str, str]:
    """A torch RNN layer's tensors: ``ours``/``theirs`` templates with ``{kind}`` (weight_ih, weight_hh, bias_ih,
    bias_hh) and ``{direction}`` (``""``, ``"_reverse"``), keeping ``{layer}``."""
    return {ours.format(kind=kind, direction=direction, layer="{layer}"):
            theirs.format(kind=kind, direction=direction, layer="{layer}")
            for direction in directions for kind in RECURRENT}


def map_layers(weights: WeightMap, names: Names, *, ours: str, theirs: str, count: int) -> None:
    """Layers 0 to ``count`` - 1 of one stack: each of ``names`` under ``ours`` (e.g. ``"encoder_layers.{layer}."``)
    read from its foreign name under ``theirs`` (e.g. ``"model.encoder.layers.{layer}."``); ``{layer}`` may stand
    in the names too (``rnn.weight_ih_l{layer}``)."""
    for layer in range(count):
        number = str(layer)
        map_names(weights, {name.replace("{layer}", number): _numbered(foreign, number)
                            for name, foreign in names.items()},
                  ours=ours.replace("{layer}", number), theirs=theirs.replace("{layer}", number))


def _numbered(foreign: str | From | Zeros, number: str) -> str | From | Zeros:
    if isinstance(foreign, str):
        return foreign.replace("{layer}", number)
    return replace(foreign, name=foreign.name.replace("{layer}", number))


def map_names(weights: WeightMap, names: Names, *, ours: str = "", theirs: str = "") -> None:
    """Each of ``names`` (prefixed by ``ours``) read from its foreign name (prefixed by ``theirs``)."""
    for name, foreign in names.items():
        if isinstance(foreign, Zeros):
            weights.put(ours + name, theirs + foreign.name, torch.zeros(foreign.rows))
        elif isinstance(foreign, From):
            weights.copy(ours + name, theirs + foreign.name, foreign.transform)
        else:
            weights.copy(ours + name, theirs + foreign)


def fixed_positions(weights: WeightMap, name: str, expected: Tensor) -> None:
    """A stored position table that our model rebuilds from its config: checked to be the sinusoid ``expected``
    (when the file holds one), never loaded."""
    check_sinusoid(weights.source, weights.state.get(name), expected=expected, what=name)
    weights.ignore(name)


def map_stacks(weights: WeightMap, config: TransformerConfig, stacks: Mapping[str, tuple[str, Names]]) -> None:
    """Every layer of an encoder-decoder's stacks: ``"encoder"``/``"decoder"`` → (the foreign prefix of its
    layers, with ``{layer}``; the table of one layer), as many layers as ``config`` says."""
    for side, (theirs, names) in stacks.items():
        count = config.encoder_layers if side == "encoder" else config.decoder_layers
        map_layers(weights, names, ours=side + "_layers.{layer}.", theirs=theirs, count=count)
