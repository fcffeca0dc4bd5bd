"""Every contribution method by its registry name (models/analysis/contributions.py ``CONTRIBUTION_METHODS``):
``contributions`` computes one for a sentence, ``contribution_arrays`` the NPZ export's arrays."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from ..nn.ablation import NO_ABLATION, Ablation
from ..nn.base import Seq2Seq
from .contributions import (
    CONTRIBUTION_METHODS, Captured, ContributionError, ContributionMaps, alti, capture_forward, value_norms,
    value_zeroing,
)
from .gradients import input_x_gradient, integrated_gradients


def contributions(method: str, model: Seq2Seq, src_ids: Sequence[int], output_ids: Sequence[int], *,
                  captured: Captured | None = None, ablation: Ablation = NO_ABLATION,
                  ig_steps: int | None = None) -> ContributionMaps:
    """``method`` (a key of ``CONTRIBUTION_METHODS`` other than ``weights``) for one sentence of the model as it
    ran, with the heads ``ablation`` names switched off; ``captured``: the traced pass (with that ablation),
    reused by the methods that need no other; ``ig_steps``: integrated gradients' fixed node count (None: adapted
    until complete)."""
    if method not in CONTRIBUTION_METHODS or method == "weights":
        raise ContributionError(f"unknown contribution method {method!r}; choose one of "
                                f"{', '.join(name for name in CONTRIBUTION_METHODS if name != 'weights')}")
    if method == "integrated_gradients":
        return integrated_gradients(model, src_ids, output_ids, steps=ig_steps, ablation=ablation)
    if method == "input_x_gradient":
        return input_x_gradient(model, src_ids, output_ids, ablation=ablation)
    compute = {"value_norms": value_norms, "alti": alti, "value_zeroing": value_zeroing}[method]
    return compute(model, src_ids, output_ids, captured=captured, ablation=ablation)


def contribution_arrays(model: Seq2Seq, src_ids: Sequence[int], output_ids: Sequence[int]) -> dict[str, np.ndarray]:
    """The NPZ export's contribution arrays (docs/ARCHITECTURE.md): ``norm_{kind}_L{layer}`` ``[heads, q, k]``,
    ``alti_{kind}_L{layer}`` ``[q, k]``, ``alti_source`` ``[T, S]``, ``alti_target`` ``[T, T]``,
    ``source_contribution`` ``[T]``."""
    captured = capture_forward(model, src_ids, output_ids)
    arrays = {}
    for name, maps in (("norm", value_norms(model, src_ids, output_ids, captured=captured)),
                       ("alti", alti(model, src_ids, output_ids, captured=captured))):
        for kind, per_layer in maps.layers.items():
            for layer, array in enumerate(per_layer):
                arrays[f"{name}_{kind}_L{layer}"] = array
        if maps.source is not None:
            arrays.update(alti_source=maps.source, alti_target=maps.target,
                          source_contribution=maps.source_contribution)
    return arrays


