"""How each head's attention weights are computed, as plain data (numpy, no torch): the neuron view's numbers.

For one kind and layer, ``LayerVectors`` holds the query vectors ``[heads, q, head_dim]`` and key vectors
``[heads, k, head_dim]`` as the scores read them (a rotary model's after rotation; a grouped-query model's key
vectors repeated for every query head of their group), the scale, the additive bias (T5's relative position bias)
and the soft-cap, the mask and the weights the model computed. The weights are, per head h:

    s = q_h · k_hᵀ · scale                      (scale: a number, or [heads, q, k])
    s = cap · tanh(s / cap)                     (only where the model soft-caps its scores: Gemma 2)
    s = s + bias_h                              (only where the model adds one: T5)
    weights_h = softmax(s over the keys the mask allows), the others exactly 0 (a row with none: all 0)

``LayerVectors.reproduced()`` computes that here; models/analysis/neuron.py fills the vectors from a model.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True)
class LayerVectors:
    """One layer of one kind: ``query`` ``[H, Q, D]``, ``key`` ``[H, K, D]`` float32, ``scale`` (a float, or ``[H, Q,
    K]``), ``bias`` ``[H, Q, K]`` or None, ``softcap`` (0: none), ``mask`` ``[Q, K]`` bool (True = may attend),
    ``weights`` ``[H, Q, K]`` as the model computed them, ``rotated`` (the vectors are after rotary positions)."""

    query: np.ndarray
    key: np.ndarray
    scale: float | np.ndarray
    mask: np.ndarray
    weights: np.ndarray
    bias: np.ndarray | None = None
    softcap: float = 0.0
    rotated: bool = False

    @property
    def head_dim(self) -> int:
        return int(self.query.shape[-1])

    @property
    def plain_scale(self) -> bool:
        """Whether the scale is the usual 1/√head_dim for every score."""
        return np.ndim(self.scale) == 0 and abs(float(self.scale) * np.sqrt(self.head_dim) - 1.0) < 1e-6

    def scale_of(self, head: int) -> np.ndarray:
        """The scale of ``head``'s scores, broadcastable to ``[Q, K]``."""
        return np.asarray(self.scale, np.float32) if np.ndim(self.scale) == 0 else self.scale[head]

    def scores(self, head: int, rows: slice = slice(None)) -> np.ndarray:
        """``head``'s scores ``[Q, K]`` (float64; of the query ``rows`` only, if given) as the softmax reads them:
        scaled, capped, biased; masked cells −inf."""
        dots = self.query[head, rows].astype(np.float64) @ self.key[head].astype(np.float64).T
        scores = dots * np.broadcast_to(self.scale_of(head), self.mask.shape)[rows]
        if self.softcap:
            scores = self.softcap * np.tanh(scores / self.softcap)
        if self.bias is not None:
            scores = scores + self.bias[head, rows]
        return np.where(self.mask[rows], scores, -np.inf)

    def reproduced(self) -> np.ndarray:
        """The weights ``[H, Q, K]`` recomputed from the vectors (float32)."""
        return np.stack([masked_softmax(self.scores(head)) for head in range(self.query.shape[0])]).astype(np.float32)


def masked_softmax(scores: np.ndarray) -> np.ndarray:
    """Softmax over the last axis of scores whose blocked cells are −inf; a row with no finite score is all 0."""
    top = np.max(scores, axis=-1, keepdims=True)
    top = np.where(np.isfinite(top), top, 0.0)
    exp = np.exp(scores - top)
    total = exp.sum(axis=-1, keepdims=True)
    return np.divide(exp, total, out=np.zeros_like(exp), where=total > 0)


@dataclass(frozen=True)
class NeuronVectors:
    """Per kind one ``LayerVectors`` per layer, of one teacher-forced pass laid out as the run's trace."""

    layers: dict[str, list[LayerVectors]] = field(default_factory=dict)
    rotated: bool = False

    def arrays(self) -> dict[str, np.ndarray]:
        """The NPZ export's arrays (README, ``export --vectors``): ``query_{kind}_L{layer}`` ``[H, Q, D]``,
        ``key_{kind}_L{layer}`` ``[H, K, D]``; where the model scales other than by 1/√head_dim
        ``scale_{kind}_L{layer}`` ``[H, Q, K]``; where it adds a bias ``bias_{kind}_L{layer}`` ``[H, Q, K]``; where
        it soft-caps ``softcap_{kind}_L{layer}`` (a number); ``vectors_rotated`` (bool: the vectors are after rotary
        positions)."""
        arrays = {"vectors_rotated": np.array(self.rotated)}
        for kind, layers in self.layers.items():
            for index, layer in enumerate(layers):
                name = f"{kind}_L{index}"
                arrays[f"query_{name}"] = layer.query.astype(np.float32)
                arrays[f"key_{name}"] = layer.key.astype(np.float32)
                if not layer.plain_scale:
                    heads, queries, keys = layer.weights.shape
                    arrays[f"scale_{name}"] = np.broadcast_to(np.asarray(layer.scale, np.float32),
                                                              (heads, queries, keys)).copy()
                if layer.bias is not None:
                    arrays[f"bias_{name}"] = layer.bias.astype(np.float32)
                if layer.softcap:
                    arrays[f"softcap_{name}"] = np.array(layer.softcap, np.float32)
        return arrays
