"""The Lens pane's state (no Qt, no torch): the logit lens of the selected hypothesis as a layers × steps map, and
DecoderLens as a table (models/analysis/lens.py computes both; docs/ARCHITECTURE.md "The Lens pane").

The worker answers a :class:`LensJob` with :class:`LensReadings` (plain numpy and labels). ``lens_state`` turns them
into a frozen :class:`LensState`: per layer boundary (rows, the output layer on top) and output step (columns), a
colour for the chosen token's rank on a log scale (rank 1 brightest, the vocabulary's last darkest), the text a
hover reads out (p, rank, the top tokens at that layer), the selected step, and DecoderLens' rows (encoder layer,
NLL of the model's own output, the greedy output), or the line saying why DecoderLens does not apply.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


from .jobs import Answer, ResultJob

WAITING = "Lens: reading every layer's prediction…"
# viridis at five stops: a rank's colour runs from the first (the vocabulary's last rank) to the last (rank 1)
RAMP = np.array([[68, 1, 84], [59, 82, 139], [33, 145, 140], [94, 201, 98], [253, 231, 37]], dtype=np.float64)


@dataclass(frozen=True)
class LensJob(ResultJob):
    """The lenses of one result of one run (the fields: :class:`ResultJob`)."""


@dataclass(frozen=True)
class LensAnswer(Answer):
    """The worker's answer to a :class:`LensJob`: its :class:`LensReadings` (``value``), or the line saying why not."""


@dataclass(frozen=True)
class EncoderRow:
    """DecoderLens at one encoder layer boundary: the decoder's greedy output reading it and the NLL (nats) of the
    model's own output."""

    layer: int
    output: str
    nll: float


@dataclass(frozen=True)
class LensReadings:
    """What the worker computed: the logit lens' ``probs``, ``ranks`` (0: the most likely) ``[L + 1, T]``, the
    ``top_tokens`` (labels) and ``top_probs`` ``[L + 1, T, k]``, the output ``tokens``, the ``vocab_size``;
    DecoderLens' rows, or ``encoder_note``, the line saying why it does not apply."""

    tokens: tuple[str, ...]
    probs: np.ndarray
    ranks: np.ndarray
    top_tokens: tuple[tuple[tuple[str, ...], ...], ...]
    top_probs: np.ndarray
    vocab_size: int
    encoder: tuple[EncoderRow, ...] = ()
    encoder_note: str = ""


@dataclass(frozen=True)
class LensState:
    """What the pane draws: ``rgb`` ``[rows, steps, 3]`` (uint8; row 0 is the output layer, the last row the
    embeddings), ``row_labels``, ``col_labels`` (the output tokens), ``tips`` ``[rows][steps]`` (what a hover reads
    out), the ``selected`` step's column (None: none), the colour legend, and DecoderLens' ``encoder`` rows or its
    ``encoder_note``."""

    rgb: np.ndarray
    row_labels: tuple[str, ...]
    col_labels: tuple[str, ...]
    tips: tuple[tuple[str, ...], ...]
    selected: int | None
    legend: str
    encoder: tuple[EncoderRow, ...]
    encoder_note: str

    @property
    def shape(self) -> tuple[int, int]:
        return self.rgb.shape[0], self.rgb.shape[1]


def rank_colours(ranks: np.ndarray, vocab_size: int) -> np.ndarray:
    """``ranks`` (0-based) as RGB ``[..., 3]`` uint8 on a log scale: log(1 + rank) / log(vocab_size) from RAMP's last
    colour (rank 0) to its first (the last rank)."""
    scale = np.log1p(ranks.astype(np.float64)) / np.log(max(vocab_size, 2))
    position = (1.0 - np.clip(scale, 0.0, 1.0)) * (len(RAMP) - 1)
    low = np.floor(position).astype(int).clip(0, len(RAMP) - 2)
    share = (position - low)[..., None]
    return np.rint(RAMP[low] * (1 - share) + RAMP[low + 1] * share).astype(np.uint8)


def layer_label(layer: int, layers: int) -> str:
    """Boundary ``layer`` of ``layers`` (0: the embeddings, the last: the output)."""
    if layer == 0:
        return "embeddings"
    return f"layer {layer} (output)" if layer == layers - 1 else f"layer {layer}"


def lens_state(readings: LensReadings, *, step: int | None = None) -> LensState:
    """The pane's state of ``readings``, with output step ``step`` (from 0) outlined when it is one of them."""
    layers, steps = readings.probs.shape
    order = list(range(layers - 1, -1, -1))  # the output layer on top
    tips = tuple(tuple(_tip(readings, layer, column) for column in range(steps)) for layer in order)
    return LensState(rgb=rank_colours(readings.ranks[order], readings.vocab_size),
                     row_labels=tuple(layer_label(layer, layers) for layer in order), col_labels=readings.tokens,
                     tips=tips, selected=step if step is not None and 0 <= step < steps else None,
                     legend=f"colour: rank of the chosen token at each layer, log scale (bright: rank 1; dark: "
                            f"rank {readings.vocab_size})",
                     encoder=readings.encoder, encoder_note=readings.encoder_note)


def _tip(readings: LensReadings, layer: int, step: int) -> str:
    top = ", ".join(f"‘{token}’ {p:.3f}" for token, p in zip(readings.top_tokens[layer][step],
                                                            readings.top_probs[layer, step]))
    layers = readings.probs.shape[0]
    return (f"step {step + 1} ‘{readings.tokens[step]}’ at {layer_label(layer, layers)}: "
            f"p = {readings.probs[layer, step]:.3f}, rank {int(readings.ranks[layer, step]) + 1}; top: {top}")
