"""Contrastive explanations (Yin & Neubig 2022, "Interpreting Language Models with Contrastive Explanations"): a
method explains logit(y_t) − logit(y′_t), why the model chose y_t rather than a contrast token y′_t (the foil),
instead of the chosen token's own score.

A contrast is given per output step: ``contrast[t]`` is the foil's token id at step t, or None where step t keeps
its own score (log p(y_t) for the gradient methods, logit(y_t) for ALTI-Logit). ``one_step`` makes the contrast
of one chosen step (the window's click on a top-k entry or a sibling hypothesis, the CLI's ``--contrast TOKEN
--contrast-step N``), ``every_step`` the same foil at every step (``--contrast TOKEN`` alone).

The difference of logits is the difference of log-probabilities (the softmax's normaliser cancels out), so a
gradient method explains the same number either way; the gradients read the logits, as Yin & Neubig's code does.
"""

from __future__ import annotations

from typing import Sequence

from .contributions import ContributionError

Contrast = Sequence[int | None]
NO_FOIL = -1  # a row that keeps its own score


def one_step(steps: int, step: int, token: int) -> tuple[int | None, ...]:
    """The contrast of ``token`` at output step ``step`` alone, of an output of ``steps`` tokens (a step beyond it:
    one line)."""
    if not 0 <= step < steps:
        raise ContributionError(f"step {step} is beyond the output: it has {steps} step"
                                f"{'s' if steps != 1 else ''} (0 to {steps - 1})")
    return tuple(token if index == step else None for index in range(steps))


def every_step(steps: int, token: int) -> tuple[int | None, ...]:
    return (token,) * steps


def check_contrast(model, output_ids: Sequence[int], contrast: Contrast | None) -> None:
    """``contrast`` has one entry per output step, each None or a token of the model's output vocabulary (else one
    line)."""
    if contrast is None:
        return
    if len(contrast) != len(output_ids):
        raise ContributionError(f"a contrast names one token per output step: {len(output_ids)} steps, "
                                f"{len(contrast)} given")
    size = model.config.tgt_vocab_size
    for token in contrast:
        if token is not None and not 0 <= int(token) < size:
            raise ContributionError(f"contrast token id {token} is not in the model's vocabulary (0 to {size - 1})")


def foil_rows(contrast: Contrast | None, rows: int, *, prompt_len: int | None = None) -> list[int]:
    """Each scored row's foil (``NO_FOIL``: none), ``rows`` rows: an output's steps, or a decoder-only model's whole
    sequence of n positions, whose step t is row P − 1 + t (P = ``prompt_len``)."""
    foils = [NO_FOIL] * rows
    if contrast is None:
        return foils
    offset = 0 if prompt_len is None else prompt_len - 1
    for step, token in enumerate(contrast):
        if token is not None:
            foils[offset + step] = int(token)
    return foils


def contrasted(contrast: Contrast | None) -> bool:
    return contrast is not None and any(token is not None for token in contrast)


def kept_contrast(contrast: Contrast | None) -> tuple[int | None, ...] | None:
    """``contrast`` as the maps keep it (``ContributionMaps.contrast``): a tuple of ids and Nones, or None."""
    if not contrasted(contrast):
        return None
    return tuple(None if token is None else int(token) for token in contrast)
