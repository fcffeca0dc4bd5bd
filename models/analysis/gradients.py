"""Gradient contributions: how much each source and target-prefix token embedding shaped each output's
log-probability.

- ``input_x_gradient``: ‖x ⊙ ∇_x log p(y_t)‖ over the source and target-prefix token embeddings, every target
  step from one forward pass and one batched backward pass.
- ``integrated_gradients``: x ⊙ the gradient integrated from the zero embeddings, by Gauss–Legendre quadrature
  whose node count grows until every step's attributions add up to its log-probability change within
  ``COMPLETENESS_TOLERANCE`` (or ``IG_ADAPTED_MAX`` is reached); each step's error is carried with the maps.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Iterator, Sequence

import numpy as np
import torch
from torch import Tensor, nn

from ..nn.ablation import NO_ABLATION, Ablation
from ..nn.base import Seq2Seq
from ..nn.intermediates import to_numpy
from .catalogue import INPUT_X_GRADIENT, INTEGRATED_GRADIENTS
from .contrast import NO_FOIL, Contrast, check_contrast, contrasted, foil_rows, kept_contrast
from .contributions import (
    COMPLETENESS_FLOOR, COMPLETENESS_TOLERANCE, CONTRIBUTION_METHODS, ContributionError, ContributionMaps, _embeddings,
    computes,
    _evaluating, traceable, decoder_input,
)
from .decoder_only import is_decoder_only, prediction_maps, sequence_ids
from . import encoder_only

# Tokens (copies × (source + target)) one batched gradient pass holds.
GRADIENT_TOKENS = 4096
# Integrated gradients' Gauss–Legendre nodes: the first count, the most adaptation gives a step (doubling until
# then: a GRU demo's sharp paths need 64-256 where a Transformer's need 16-32), and the most a fixed count may be.
IG_FIRST_STEPS = 16
IG_ADAPTED_MAX = 128
IG_MAX_STEPS = 1024


@contextlib.contextmanager
def _embedding_leaves(model: Seq2Seq, scales: Tensor) -> Iterator[dict[str, list[Tensor]]]:
    """While inside, the token embeddings the model looks up in batch row b are ``scales[b]`` × themselves, as
    leaves that ask for a gradient: per side (``"source"``, ``"target"``) one leaf per lookup (a recurrent
    decoder looks up one position per step), and under ``"source_input"``/``"target_input"`` the unscaled vectors."""
    leaves: dict[str, list[Tensor]] = {"source": [], "target": [], "source_input": [], "target_input": []}

    def keeper(name: str):
        def hook(_module, _inputs, output: Tensor) -> Tensor:
            leaves[f"{name}_input"].append(output.detach())
            scale = scales.to(output.dtype).view(-1, *([1] * (output.dim() - 1)))
            leaf = (output.detach() * scale).requires_grad_(True)
            leaves[name].append(leaf)
            return leaf
        return hook

    source, target = _embeddings(model)
    handles = [target.register_forward_hook(keeper("target"))]
    if source is not target:  # a decoder-only model's one table looks the whole sequence up as the target side
        handles.append(source.register_forward_hook(keeper("source")))
    try:
        yield leaves
    finally:
        for handle in handles:
            handle.remove()


@contextlib.contextmanager
def _frozen(model: nn.Module) -> Iterator[None]:
    """No parameter asks for a gradient meanwhile; gradients flow even inside inference mode."""
    asked = [(parameter, parameter.requires_grad) for parameter in model.parameters()]
    for parameter, _ in asked:
        parameter.requires_grad_(False)
    try:
        with torch.inference_mode(False), torch.enable_grad():
            yield
    finally:
        for parameter, flag in asked:
            parameter.requires_grad_(flag)


def forced_rows(model: Seq2Seq, src_ids: Sequence[int], output_ids: Sequence[int]) -> tuple[list[int], list[int],
                                                                                        list[int]]:
    """What a gradient pass feeds and scores: the source ids, the decoder's input and the token each of its
    positions predicts (the start token and the output but its last, predicting the output; a decoder-only
    model: no source, and the whole sequence, each position predicting the token after it)."""
    if is_decoder_only(model):
        fed, predicted = sequence_ids(src_ids, output_ids)
        return [], fed, predicted
    if encoder_only.is_encoder_only(model):  # the sentence; each mask position's token (models/analysis/encoder_only)
        return list(src_ids), [], encoder_only.predicted_rows(model, src_ids, output_ids)[1]
    return list(src_ids), decoder_input(model, output_ids), list(output_ids)


def step_log_probs(model: Seq2Seq, src: Tensor, tgt_in: Tensor, *, output_ids: Tensor) -> Tensor:
    """``[T]``: log p of each output token given the source and its prefix (one forward pass)."""
    logits, _ = model(src, tgt_in)
    log_probs = torch.log_softmax(logits[0].float(), dim=-1)  # [T, V]
    return log_probs.gather(1, output_ids[:, None])[:, 0]


@dataclass(frozen=True)
class WeightedGradients:
    """Σ over points (step t, scale α, weight w) of w · ∂ log p(y_t) / ∂(α x): ``source`` ``[T, S, E]``, ``target``
    ``[T, T, E]`` (float64; zero for a step no point names), ``log_probs`` ``[points]``: log p(y_t) with the token
    embeddings scaled by α, and the unscaled embeddings ``source_x`` ``[S, E]``, ``target_x`` ``[T, E]``."""

    source: Tensor
    target: Tensor
    log_probs: Tensor
    source_x: Tensor
    target_x: Tensor

    def attributions(self) -> tuple[Tensor, Tensor]:
        """x ⊙ the weighted gradient: ``[T, S, E]``, ``[T, T, E]``."""
        return self.source_x[None] * self.source, self.target_x[None] * self.target


def embedding_gradients(model: Seq2Seq, src_ids: Sequence[int], output_ids: Sequence[int], *,
                        scale: float = 1.0,
                        ablation: Ablation = NO_ABLATION) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """∂ log p(y_t) / ∂ embeddings for every step t at once (the embeddings scaled by ``scale``): source
    ``[T, S, E]``, target ``[T, T, E]``, and the unscaled embeddings ``[S, E]``, ``[T, E]``."""
    found = weighted_gradients(model, src_ids, output_ids,
                               points=[(step, scale, 1.0) for step in range(len(output_ids))], ablation=ablation)
    return found.source.float(), found.target.float(), found.source_x, found.target_x


def weighted_gradients(model: Seq2Seq, src_ids: Sequence[int], output_ids: Sequence[int], *,
                       points: Sequence[tuple[int, float, float]], ablation: Ablation = NO_ABLATION,
                       foils: Sequence[int] | None = None) -> WeightedGradients:
    """The gradients of every point (step t, scale α, weight w), summed per step with their weights.

    The sentence is repeated once per point in the batch dimension, copy p's token embeddings are scaled by its
    α and its loss is its step's log-probability, so one forward and one backward pass give every point's
    gradient (each copy's inputs reach only its own loss), in passes of at most ``GRADIENT_TOKENS`` tokens. (A
    backward pass batched with ``is_grads_batched`` computes the forward once, but torch runs the layer norms'
    and the fused attention's backward once per step there: no faster than a loop.) An encoder-only model's step
    m is its m-th mask position (:func:`_masked_gradients`). ``foils``: per step its contrast token
    (models/analysis/contrast.py; ``NO_FOIL``: none), whose step's score is then logit(y_t) − logit(y′_t)."""
    if encoder_only.is_encoder_only(model):
        return _masked_gradients(model, src_ids, output_ids, points=points, ablation=ablation)
    steps = len(forced_rows(model, src_ids, output_ids)[2])
    per_pass = max(1, GRADIENT_TOKENS // (len(src_ids) + steps))
    source = target = None
    log_probs, inputs = [], None
    for start in range(0, len(points), per_pass):
        chunk = points[start: start + per_pass]
        gradients, chunk_log_probs, inputs = _copies_gradients(model, src_ids, output_ids, points=chunk,
                                                               ablation=ablation, foils=foils)
        if source is None:
            source = gradients[0].new_zeros((steps, *gradients[0].shape[1:]), dtype=torch.float64)
            target = gradients[1].new_zeros((steps, *gradients[1].shape[1:]), dtype=torch.float64)
        index = torch.tensor([step for step, _, _ in chunk], device=source.device)
        weights = torch.tensor([weight for _, _, weight in chunk], dtype=torch.float64, device=source.device)
        source.index_add_(0, index, gradients[0].double() * weights[:, None, None])
        target.index_add_(0, index, gradients[1].double() * weights[:, None, None])
        log_probs.append(chunk_log_probs)
    return WeightedGradients(source, target, torch.cat(log_probs), source_x=inputs[0].double(),
                             target_x=inputs[1].double())


def _masked_gradients(model: Seq2Seq, src_ids: Sequence[int], output_ids: Sequence[int], *,
                      points: Sequence[tuple[int, float, float]], ablation: Ablation) -> WeightedGradients:
    """:func:`weighted_gradients` of an encoder-only model: step m is log p of mask m's token (``output_ids``, or
    the most likely) at its position, the sentence's token embeddings scaled by α in each copy; ``source``
    ``[M, S, E]`` (``target`` is empty: there is no output side)."""
    positions, tokens = encoder_only.predicted_rows(model, src_ids, output_ids)
    device = next(model.parameters()).device
    positions_t, tokens_t = (torch.tensor(values, device=device) for values in (positions, tokens))
    per_pass = max(1, GRADIENT_TOKENS // len(src_ids))
    total, log_probs, inputs = None, [], None
    for start in range(0, len(points), per_pass):
        chunk = points[start: start + per_pass]
        rows = torch.tensor([step for step, _, _ in chunk], device=device)
        scales = torch.tensor([scale for _, scale, _ in chunk], device=device)
        src = torch.tensor([list(src_ids)], dtype=torch.long, device=device).expand(len(chunk), -1)
        with _evaluating(model), _frozen(model), _embedding_leaves(model, scales) as leaves:
            chosen = encoder_only.masked_log_probs(model, src, positions_t[rows], tokens=tokens_t[rows],
                                                   ablation=ablation)
            gradient, = torch.autograd.grad(chosen.sum(), leaves["target"])
        inputs = leaves["target_input"][0][0].double()  # [S, E]
        if total is None:
            total = torch.zeros(len(positions), *gradient.shape[1:], dtype=torch.float64, device=device)
        weights = torch.tensor([weight for _, _, weight in chunk], dtype=torch.float64, device=device)
        total.index_add_(0, rows, gradient.double() * weights[:, None, None])
        log_probs.append(chosen.detach())
    return WeightedGradients(total, total[:, :0], torch.cat(log_probs), source_x=inputs, target_x=inputs[:0])


def _copies_gradients(model: Seq2Seq, src_ids: Sequence[int], output_ids: Sequence[int], *,
                      points: Sequence[tuple[int, float, float]], ablation: Ablation,
                      foils: Sequence[int] | None = None
                      ) -> tuple[tuple[Tensor, Tensor], Tensor, tuple[Tensor, Tensor]]:
    """One copy of the sentence per point (see :func:`weighted_gradients`): the gradients ``[P, S, E]``,
    ``[P, T, E]``, the points' scores ``[P]`` (log-probabilities, or logit differences where a step has a foil),
    and the unscaled embeddings ``[S, E]``, ``[T, E]``."""
    device = next(model.parameters()).device
    copies = len(points)
    source, fed, predicted = forced_rows(model, src_ids, output_ids)
    src = torch.tensor([source], dtype=torch.long, device=device).expand(copies, -1)
    tgt_in = torch.tensor([fed], dtype=torch.long, device=device).expand(copies, -1)
    chosen = torch.tensor([step for step, _, _ in points], device=device)
    scales = torch.tensor([scale for _, scale, _ in points], device=device)
    outputs = torch.tensor(predicted, dtype=torch.long, device=device)[chosen]
    with _evaluating(model), _frozen(model), _embedding_leaves(model, scales) as leaves, \
            _one_position_scored(model, chosen) as narrowed:
        logits, _ = model(src, tgt_in, ablation=ablation)  # [copies, T or 1, V]
        picked = logits[:, 0] if narrowed else logits[torch.arange(copies, device=device), chosen]
        log_probs = _scores(picked.float(), outputs, None if foils is None else
                            torch.tensor(list(foils), dtype=torch.long, device=device)[chosen])  # [copies]
        gradients = torch.autograd.grad(log_probs.sum(), leaves["source"] + leaves["target"], allow_unused=True)
    target = _positions(gradients[len(leaves["source"]):], leaves["target"])
    if leaves["source"]:
        source = _positions(gradients[: len(leaves["source"])], leaves["source"])
        source_input = _positions(leaves["source_input"])[0].float()
    else:  # no source side (a decoder-only model): no positions
        source, source_input = target[:, :0], target[0, :0].detach().float()
    inputs = source_input, _positions(leaves["target_input"])[0].float()
    return (source.float(), target.float()), log_probs.detach(), inputs


def _scores(logits: Tensor, outputs: Tensor, foils: Tensor | None) -> Tensor:
    """``[copies]``: log p of each copy's output token from its ``logits`` ``[copies, V]``, or where its foil is a
    token (not ``NO_FOIL``), logit(y) − logit(y′), Yin & Neubig's contrastive score."""
    chosen = torch.log_softmax(logits, dim=-1).gather(1, outputs[:, None])[:, 0]
    if foils is None:
        return chosen
    difference = logits.gather(1, outputs[:, None])[:, 0] - logits.gather(1, foils.clamp_min(0)[:, None])[:, 0]
    return torch.where(foils != NO_FOIL, difference, chosen)


@contextlib.contextmanager
def _one_position_scored(model: Seq2Seq, chosen: Tensor) -> Iterator[bool]:
    """While inside, a Transformer's output projection reads only position ``chosen[b]`` of copy ``b`` (its
    logits come out ``[copies, 1, V]``): the other positions' logits, a vocabulary wide each, are never
    computed nor differentiated. Yields whether it does (False for other models)."""
    output = getattr(model, "output", None) if traceable(model) else None
    if not isinstance(output, nn.Linear):
        yield False
        return
    rows = torch.arange(len(chosen), device=chosen.device)
    handle = output.register_forward_pre_hook(lambda _module, inputs: (inputs[0][rows, chosen][:, None],))
    try:
        yield True
    finally:
        handle.remove()


def _positions(tensors: Sequence[Tensor | None], like: Sequence[Tensor] | None = None) -> Tensor:
    """Per-lookup tensors as one ``[B, L, E]``: whole sequences joined along positions, or one position per
    step (a recurrent decoder's ``[B, E]``) stacked; a missing gradient is zeros."""
    tensors = [torch.zeros_like(like[index]) if tensor is None else tensor
               for index, tensor in enumerate(tensors)]
    return torch.cat(tensors, dim=1) if tensors[0].dim() == 3 else torch.stack(tensors, dim=1)


def input_x_gradient(model: Seq2Seq, src_ids: Sequence[int], output_ids: Sequence[int], *,
                     ablation: Ablation = NO_ABLATION, contrast: Contrast | None = None) -> ContributionMaps:
    """‖x ⊙ ∇_x log p(y_t)‖ per target step over the source (``source`` ``[T, S]``, also the cross map) and
    the target prefix (``target`` ``[T, T]``, also the dec_self map): x the token embeddings, before positions
    are added, and the norm L2 over the embedding. A step with a ``contrast`` token y′_t (models/analysis/
    contrast.py) takes the gradient of logit(y_t) − logit(y′_t) instead."""
    CONTRIBUTION_METHODS[INPUT_X_GRADIENT].check(model)
    rows = len(forced_rows(model, src_ids, output_ids)[2])
    foils = _foils(model, src_ids, output_ids, contrast=contrast, rows=rows)
    found = weighted_gradients(model, src_ids, output_ids, points=[(step, 1.0, 1.0) for step in range(rows)],
                               ablation=ablation, foils=foils)
    return _maps(INPUT_X_GRADIENT, *found.attributions(), prompt_len=_prompt_len(model, src_ids),
                 contrast=kept_contrast(contrast))


def _foils(model: Seq2Seq, src_ids: Sequence[int], output_ids: Sequence[int], *, contrast: Contrast | None,
           rows: int) -> list[int] | None:
    """Each gradient row's foil, or None without a contrast (checked: one line for a token out of the vocabulary,
    and for an encoder-only model, whose masks have no output steps to contrast)."""
    if not contrasted(contrast):
        return None
    check_contrast(model, output_ids, contrast)
    if encoder_only.is_encoder_only(model):
        raise ContributionError("a contrast token needs a model that decodes; an encoder-only model fills masks")
    return foil_rows(contrast, rows, prompt_len=_prompt_len(model, src_ids))


def check_ig_steps(steps: int | None) -> None:
    """``steps`` (None: adapted) is a count integrated gradients can take, or one line saying which can."""
    if steps is not None and not 1 <= steps <= IG_MAX_STEPS:
        raise ContributionError(f"integrated gradients take 1 to {IG_MAX_STEPS} steps; got {steps}")


def gauss_legendre(points: int) -> tuple[np.ndarray, np.ndarray]:
    """The Gauss–Legendre rule of ``points`` nodes on [0, 1]: nodes and weights (the weights sum to 1)."""
    nodes, weights = np.polynomial.legendre.leggauss(points)
    return (nodes + 1) / 2, weights / 2


def integrated_gradients(model: Seq2Seq, src_ids: Sequence[int], output_ids: Sequence[int], *,
                         steps: int | None = None, ablation: Ablation = NO_ABLATION,
                         contrast: Contrast | None = None) -> ContributionMaps:
    """Integrated gradients (Sundararajan et al. 2017) of each step's log p(y_t) along the straight path from the
    zero token embeddings (the positions kept) to the real ones: ‖x ⊙ ∫₀¹ ∇ log p(y_t)(αx) dα‖ per token, the
    integral by Gauss–Legendre quadrature. Each step's completeness error, |Σ x ⊙ ∫∇ − (log p(y_t) − log
    p(y_t | zero embeddings))| relative to that change (``COMPLETENESS_FLOOR`` at least), is carried in
    ``completeness`` ``[T]`` and its node count in ``ig_steps`` ``[T]``.

    ``steps`` None: ``IG_FIRST_STEPS`` nodes, doubled for the steps whose error is over
    ``COMPLETENESS_TOLERANCE`` until none is or ``IG_ADAPTED_MAX`` is reached; else exactly ``steps`` nodes.

    A step with a ``contrast`` token y′_t integrates the gradient of logit(y_t) − logit(y′_t), and its completeness
    is that difference's change from the baseline."""
    CONTRIBUTION_METHODS[INTEGRATED_GRADIENTS].check(model)
    check_ig_steps(steps)
    count = len(forced_rows(model, src_ids, output_ids)[2])
    foils = _foils(model, src_ids, output_ids, contrast=contrast, rows=count)
    ends = weighted_gradients(model, src_ids, output_ids,
                              points=[(step, scale, 0.0) for scale in (0.0, 1.0) for step in range(count)],
                              ablation=ablation, foils=foils)
    change = (ends.log_probs[count:] - ends.log_probs[:count]).double()  # [T] log p(x) − log p(baseline)
    source, target = ends.source.clone(), ends.target.clone()
    errors = torch.full((count,), float("inf"), dtype=torch.float64, device=change.device)
    used = np.zeros(count, dtype=np.int64)
    pending, points = list(range(count)), steps or IG_FIRST_STEPS
    while pending:
        nodes, weights = gauss_legendre(points)
        found = weighted_gradients(model, src_ids, output_ids,
                                   points=[(step, float(node), float(weight)) for step in pending
                                           for node, weight in zip(nodes, weights)], ablation=ablation, foils=foils)
        rows = torch.tensor(pending, device=change.device)
        source[rows], target[rows] = found.source[rows], found.target[rows]
        used[pending] = points
        parts = found.attributions()
        total = parts[0][rows].sum(dim=(1, 2)) + parts[1][rows].sum(dim=(1, 2))
        errors[rows] = (total - change[rows]).abs() / change[rows].abs().clamp_min(COMPLETENESS_FLOOR)
        if steps is not None or points * 2 > IG_ADAPTED_MAX:
            break
        pending = [step for step in pending if errors[step] > COMPLETENESS_TOLERANCE]
        points *= 2
    attributions = ends.source_x[None] * source, ends.target_x[None] * target
    return _maps(INTEGRATED_GRADIENTS, *attributions, prompt_len=_prompt_len(model, src_ids),
                 completeness=to_numpy(errors.float()), ig_steps=used, contrast=kept_contrast(contrast))


def _prompt_len(model: Seq2Seq, src_ids: Sequence[int]) -> int | None:
    return len(src_ids) if is_decoder_only(model) else None


def _maps(name: str, source: Tensor, target: Tensor, *, prompt_len: int | None = None, **fields) -> ContributionMaps:
    """A gradient method's maps from its attributions ``[T, S, E]``, ``[T, T, E]``: their L2 norms (a decoder-only
    model's ``[n, 0, E]``, ``[n, n, E]``: the whole sequence's map, models/analysis/decoder_only.py)."""
    if prompt_len is not None:
        return ContributionMaps(**prediction_maps(name, to_numpy(target.norm(dim=-1).float()), prompt_len, **fields))
    if not target.shape[1]:  # an encoder-only model: one row per mask over the sentence
        return ContributionMaps(**encoder_only.sentence_maps(name, encoder_only.to_maps(source), **fields))
    source_map, target_map = to_numpy(source.norm(dim=-1).float()), to_numpy(target.norm(dim=-1).float())
    return ContributionMaps(name, per_head=False, layers={"cross": [source_map], "dec_self": [target_map]},
                            source=source_map, target=target_map, **fields)


@computes(INPUT_X_GRADIENT)
def _input_x_gradient(model: Seq2Seq, src_ids: Sequence[int], output_ids: Sequence[int], *, captured=None,
                      ablation: Ablation = NO_ABLATION, ig_steps: int | None = None,
                      contrast: Contrast | None = None) -> ContributionMaps:
    """As the registry calls it: the gradients take passes of their own (``captured`` is not read)."""
    return input_x_gradient(model, src_ids, output_ids, ablation=ablation, contrast=contrast)


@computes(INTEGRATED_GRADIENTS)
def _integrated_gradients(model: Seq2Seq, src_ids: Sequence[int], output_ids: Sequence[int], *, captured=None,
                          ablation: Ablation = NO_ABLATION, ig_steps: int | None = None,
                          contrast: Contrast | None = None) -> ContributionMaps:
    """As the registry calls it: ``ig_steps`` fixes the node count (None: adapted)."""
    return integrated_gradients(model, src_ids, output_ids, steps=ig_steps, ablation=ablation, contrast=contrast)
