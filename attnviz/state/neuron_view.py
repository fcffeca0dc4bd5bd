"""The Neuron pane's state (no Qt, no torch): how the selected head computes the selected query's attention, from
its query vector and every key vector (models/trace/vectors.py ``LayerVectors``) to the softmax.

``neuron_state`` answers a frozen ``NeuronState``: the query vector ``[D]``, the key vectors ``[K, D]``, their
elementwise products q ⊙ k ``[K, D]`` (each row sums to the dot product), then per key the dot product, the
scaled score, the soft-capped score (Gemma 2), the bias (T5), whether the mask allows it and the softmax; or the one
line saying why there is nothing to show. The worker computes the vectors on request (``NeuronJob``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from models.trace.records import AttentionTrace

from .jobs import Answer, ResultJob
from .session import Selection
from .viewmodel import KIND_LABELS, head_name

WAITING = "Neuron view: computing the query and key vectors…"
CHOOSE_A_HEAD = "The neuron view shows one head: choose a head number, not {head}."


@dataclass(frozen=True)
class NeuronJob(ResultJob):
    """The query and key vectors of one result of one run (the fields: :class:`ResultJob`)."""


@dataclass(frozen=True)
class NeuronAnswer(Answer):
    """The worker's answer to a :class:`NeuronJob`: its ``NeuronVectors`` (``value``), or the line saying why not."""


@dataclass(frozen=True)
class KeyColumn:
    """One number per key: its ``name`` ("q·k", "× scale", "+ bias", "softmax"), the ``values`` ``[K]`` and how to
    read them (``unit``)."""

    name: str
    values: np.ndarray
    unit: str = ""


@dataclass(frozen=True)
class NeuronState:
    """What the Neuron pane draws for one head and one query row (see the module's docstring)."""

    title: str
    notes: tuple[str, ...]  # "rotated", the scale, the soft-cap, the bias: each one line
    query_label: str
    key_labels: list[str]
    query: np.ndarray  # [D]
    keys: np.ndarray  # [K, D]
    products: np.ndarray  # [K, D]
    columns: tuple[KeyColumn, ...]  # per key: q·k, × scale, (soft-cap), (+ bias, score), softmax
    allowed: np.ndarray  # [K] bool
    weights: np.ndarray  # [K]: the softmax, as the model computed it
    query_limit: float  # the colour scale of q: −limit…limit (its own: a query is often far shorter than its keys)
    vector_limit: float  # the colour scale of k
    product_limit: float  # the colour scale of q ⊙ k
    query_row: int
    rotated: bool

    @property
    def head_dim(self) -> int:
        return int(self.query.shape[0])

    def readout(self, row: str, key: int | None, dim: int | None) -> str:
        """The hover line of a cell: ``row`` "q", "k" or "q⊙k" (``dim`` its column), or a per-key column's name."""
        key_name = "" if key is None else f"key {key} ‘{self.key_labels[key]}’"
        if row == "q" and dim is not None:
            return f"q[{dim}] of ‘{self.query_label}’ = {self.query[dim]:.4g}"
        if row == "k" and key is not None and dim is not None:
            return f"k[{dim}] of {key_name} = {self.keys[key, dim]:.4g}"
        if row == "q⊙k" and key is not None and dim is not None:
            return (f"q[{dim}]·k[{dim}] for {key_name} = {self.products[key, dim]:.4g}"
                    f" (the row sums to q·k = {self.products[key].sum():.4g})")
        for column in self.columns:
            if column.name == row and key is not None:
                masked = "" if self.allowed[key] else "  (masked: not allowed to attend)"
                return f"{column.name} for {key_name} = {column.values[key]:.4g}{masked}"
        return ""


def neuron_state(vectors, trace: AttentionTrace, selection: Selection, query_row: int) -> NeuronState | str:
    """The selected head's computation for query ``query_row`` (clamped to the kind's rows), or why not."""
    kind, layer, head = selection.kind, selection.layer, selection.head
    if kind not in vectors.layers or layer >= len(vectors.layers[kind]):
        return f"The neuron view has no {KIND_LABELS.get(kind, kind).lower()} layer {layer} for this model."
    if not isinstance(head, int):
        return CHOOSE_A_HEAD.format(head=head_name(head))
    vectors_of = vectors.layers[kind][layer]
    rows = vectors_of.query.shape[1]
    row = min(max(query_row, 0), rows - 1)
    q = vectors_of.query[head, row].astype(np.float32)
    keys = vectors_of.key[head].astype(np.float32)
    products = keys * q[None, :]
    scores = vectors_of.scores(head, rows=slice(row, row + 1))[0]  # masked keys −inf
    dots = products.astype(np.float64).sum(axis=1)
    scale = np.broadcast_to(np.asarray(vectors_of.scale_of(head), np.float64), vectors_of.mask.shape)[row]
    columns = [KeyColumn("q·k", dots), KeyColumn("× scale", dots * scale)]
    notes = [_scale_note(vectors_of)]
    if vectors_of.softcap:
        cap = vectors_of.softcap
        columns.append(KeyColumn("soft-cap", cap * np.tanh(dots * scale / cap)))
        notes.append(f"soft-capped as the model does: {cap:g}·tanh(s / {cap:g})")
    if vectors_of.bias is not None:
        columns.append(KeyColumn("+ bias", vectors_of.bias[head, row].astype(np.float64)))
        notes.append("+ bias: the model's relative position bias, added before the softmax")
    allowed = vectors_of.mask[row].copy()
    weights = vectors_of.weights[head, row].astype(np.float64)
    if len(columns) > 2:  # capped or biased: the score the softmax reads is a step of its own
        columns.append(KeyColumn("score", np.where(allowed, scores, np.nan)))
    columns.append(KeyColumn("softmax", weights))
    if vectors_of.rotated:
        notes.insert(0, "q and k rotated: after rotary positions, as the scores read them")
    query_labels, key_labels = trace.query_tokens(kind), trace.key_tokens(kind)
    query_label = query_labels[row] if row < len(query_labels) else str(row)
    title = (f"<b>{KIND_LABELS[kind]}</b> · layer {layer} · head {head} · query {row} ‘{query_label}’"
             + (" · rotated" if vectors_of.rotated else ""))
    labels = [key_labels[j] if j < len(key_labels) else str(j) for j in range(keys.shape[0])]
    return NeuronState(title=title, notes=tuple(notes), query_label=query_label, key_labels=labels, query=q,
                       keys=keys, products=products, columns=tuple(columns), allowed=allowed, weights=weights,
                       query_limit=_limit(q), vector_limit=_limit(keys), product_limit=_limit(products),
                       query_row=row, rotated=vectors_of.rotated)


def _scale_note(layer) -> str:
    if layer.plain_scale:
        return f"× scale: 1/√{layer.head_dim} = {float(layer.scale):.4g}"
    if np.ndim(layer.scale) == 0:
        return f"× scale: {float(layer.scale):.4g} (this model's own, not 1/√{layer.head_dim})"
    return "× scale: per score, as the model scales them"


def _limit(values: np.ndarray) -> float:
    finite = np.abs(values[np.isfinite(values)])
    return float(finite.max()) if finite.size and finite.max() > 0 else 1.0


def diverging_rgb(values: np.ndarray, limit: float) -> np.ndarray:
    """``values`` ``[R, C]`` as RGB ``[R, C, 3]`` uint8: blue at −limit, white at 0, red at +limit (the pane's and
    the figure's colours of q, k and q ⊙ k)."""
    t = np.clip(np.nan_to_num(values / (limit or 1.0)), -1.0, 1.0)[..., None]
    white, red, blue = np.array([250.0, 250, 250]), np.array([200.0, 40, 40]), np.array([40.0, 80, 200])
    rgb = np.where(t >= 0, white + (red - white) * t, white + (blue - white) * (-t))
    return np.ascontiguousarray(rgb.astype(np.uint8))


def default_row(kind: str, selection: Selection) -> int:
    """The query row shown before one is clicked: the selected decoding step for the decoder's kinds, else 0."""
    return selection.step if kind in ("dec_self", "cross") else 0
