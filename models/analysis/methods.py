"""Every contribution method by its registry name (models/analysis/contributions.py ``CONTRIBUTION_METHODS``, each
entry carrying its computation once its module is imported, as here): ``contributions`` computes one for a
sentence, ``contribution_arrays`` the NPZ export's arrays."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from ..nn.ablation import NO_ABLATION, Ablation
from ..nn.base import Seq2Seq
from . import encoder_only
from . import alti_logit, gradients  # noqa: F401 (importing them registers their methods' computations)
from .contrast import Contrast, contrasted
from .contributions import CONTRIBUTION_METHODS, Captured, ContributionError, ContributionMaps, capture_forward


def contributions(method: str, model: Seq2Seq, src_ids: Sequence[int], output_ids: Sequence[int], *,
                  captured: Captured | None = None, ablation: Ablation = NO_ABLATION,
                  ig_steps: int | None = None, contrast: Contrast | None = None) -> ContributionMaps:
    """``method`` (a key of ``CONTRIBUTION_METHODS`` other than ``weights``) for one sentence of the model as it
    ran, with the heads ``ablation`` names switched off; ``captured``: the traced pass (with that ablation),
    reused by the methods that need no other; ``ig_steps``: integrated gradients' fixed node count (None: adapted
    until complete); ``contrast``: per output step a foil token or None (models/analysis/contrast.py), for the
    methods that explain a token's score (the catalogue's ``contrastive``)."""
    entry = CONTRIBUTION_METHODS.get(method)
    if entry is None or entry.compute is None:
        raise ContributionError(f"unknown contribution method {method!r}; choose one of "
                                f"{', '.join(name for name, known in CONTRIBUTION_METHODS.items() if known.compute)}")
    if not contrasted(contrast):
        return entry.compute(model, src_ids, output_ids, captured=captured, ablation=ablation, ig_steps=ig_steps)
    if not entry.contrastive:
        raise ContributionError(f"{entry.label} explains no token's score, so it takes no contrast token; "
                                f"these do: {', '.join(contrastive_names())}")
    return entry.compute(model, src_ids, output_ids, captured=captured, ablation=ablation, ig_steps=ig_steps,
                         contrast=contrast)


def contrastive_names() -> list[str]:
    return [name for name, method in CONTRIBUTION_METHODS.items() if method.contrastive]


# The NPZ's name of each method's arrays (the catalogue's ``array_prefix``), every method but the weights.
ARRAY_PREFIXES = {name: method.array_prefix for name, method in CONTRIBUTION_METHODS.items() if method.array_prefix}


def contribution_arrays(model: Seq2Seq, src_ids: Sequence[int], output_ids: Sequence[int], *,
                        ig_steps: int | None = None, contrast: Contrast | None = None) -> dict[str, np.ndarray]:
    """The NPZ export's contribution arrays (docs/ARCHITECTURE.md) of every method the model can give, named by
    ``ARRAY_PREFIXES``: per layer ``{prefix}_{kind}_L{layer}`` (``[heads, q, k]`` per head, ``[q, k]`` per block),
    the whole model's ``{prefix}_source`` ``[T, S]`` and ``{prefix}_target`` ``[T, T]`` (ALTI+ rolled out,
    the gradients), ALTI+'s ``source_contribution`` ``[T]``, and integrated gradients' ``ig_completeness``
    ``[T]`` (each step's relative completeness error) and ``ig_steps`` ``[T]`` (its node count), and value zeroing's
    ``zeroing_rounding_{kind}_L{layer}`` ``[q]`` (True: the row is 0 because every change was at rounding level),
    ALTI-Logit's ``alti_logit_{term}`` (its ``logit_terms``). With a ``contrast``, the contrastive methods explain
    logit(y) − logit(y′) and ``contrast_ids`` ``[T]`` names each step's foil (−1: none)."""
    captured = capture_forward(model, src_ids, output_ids)
    arrays = {}
    if contrasted(contrast):
        arrays["contrast_ids"] = np.array([-1 if token is None else token for token in contrast])
    for name, prefix in ARRAY_PREFIXES.items():
        if not CONTRIBUTION_METHODS[name].applies(model) or encoder_only.nothing_to_attribute(model, src_ids, name):
            continue
        maps = contributions(name, model, src_ids, output_ids=output_ids, captured=captured, ig_steps=ig_steps,
                             contrast=contrast if CONTRIBUTION_METHODS[name].contrastive else None)
        if not CONTRIBUTION_METHODS[name].whole_model:
            for kind, per_layer in maps.layers.items():
                for layer, array in enumerate(per_layer):
                    arrays[f"{prefix}_{kind}_L{layer}"] = array
        if maps.source is not None:  # an encoder-only model's has no target side
            arrays.update({f"{prefix}_source": maps.source})
        if maps.target is not None:
            arrays.update({f"{prefix}_target": maps.target})
        if maps.source_contribution is not None:
            arrays["source_contribution"] = maps.source_contribution
        if maps.completeness is not None:
            arrays.update({f"{prefix}_completeness": maps.completeness, f"{prefix}_steps": maps.ig_steps})
        arrays.update({f"{prefix}_{term}": values for term, values in maps.logit_terms.items()})
        for kind, per_layer in maps.rounding_rows.items():  # value zeroing's rows that are 0 by rounding alone
            for layer, rows in enumerate(per_layer):
                arrays[f"{prefix}_rounding_{kind}_L{layer}"] = rows
    return {name: np.asarray(array, dtype=_stored_dtype(name)) for name, array in arrays.items()}


def _stored_dtype(name: str) -> type:
    if name in ("ig_steps", "contrast_ids"):
        return np.int32
    return bool if name.startswith("zeroing_rounding_") else np.float32
