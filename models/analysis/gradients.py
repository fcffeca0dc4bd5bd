"""Gradient contributions: how much each source and target-prefix token embedding shaped each output's
log-probability.

- ``input_x_gradient``: ‖x ⊙ ∇_x log p(y_t)‖ over the source and target-prefix token embeddings, every target
  step from one forward pass and one batched backward pass; ``steps`` > 1 gives integrated gradients.
"""

from __future__ import annotations

import contextlib
from typing import Iterator, Sequence

import torch
from torch import Tensor, nn

from ..nn.ablation import NO_ABLATION, Ablation
from ..nn.base import Seq2Seq
from ..nn.intermediates import to_numpy
from .contributions import CONTRIBUTION_METHODS, ContributionMaps, _embeddings, _evaluating, _has_blocks, decoder_input

# Tokens (copies × (source + target)) one batched gradient pass holds.
GRADIENT_TOKENS = 4096


@contextlib.contextmanager
def _embedding_leaves(model: Seq2Seq, scale: float) -> Iterator[dict[str, list[Tensor]]]:
    """While inside, the token embeddings the model looks up are ``scale`` × themselves, as leaves that ask
    for a gradient: per side (``"source"``, ``"target"``) one leaf per lookup (a recurrent decoder looks up
    one position per step), and under ``"source_input"``/``"target_input"`` the unscaled vectors."""
    leaves: dict[str, list[Tensor]] = {"source": [], "target": [], "source_input": [], "target_input": []}

    def keeper(name: str):
        def hook(_module, _inputs, output: Tensor) -> Tensor:
            leaves[f"{name}_input"].append(output.detach())
            leaf = (output.detach() * scale).requires_grad_(True)
            leaves[name].append(leaf)
            return leaf
        return hook

    source, target = _embeddings(model)
    handles = [source.register_forward_hook(keeper("source")), target.register_forward_hook(keeper("target"))]
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


def step_log_probs(model: Seq2Seq, src: Tensor, tgt_in: Tensor, *, output_ids: Tensor) -> Tensor:
    """``[T]``: log p of each output token given the source and its prefix (one forward pass)."""
    logits, _ = model(src, tgt_in)
    log_probs = torch.log_softmax(logits[0].float(), dim=-1)  # [T, V]
    return log_probs.gather(1, output_ids[:, None])[:, 0]


def embedding_gradients(model: Seq2Seq, src_ids: Sequence[int], output_ids: Sequence[int], *,
                        scale: float = 1.0,
                        ablation: Ablation = NO_ABLATION) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """∂ log p(y_t) / ∂ embeddings for every step t at once (the embeddings scaled by ``scale``): source
    ``[T, S, E]``, target ``[T, T, E]``, and the unscaled embeddings ``[S, E]``, ``[T, E]``.

    The sentence is repeated once per step in the batch dimension and copy t's loss is step t's log-probability,
    so one forward and one backward pass give every step's gradient (each copy's inputs reach only its own
    loss), in passes of at most ``GRADIENT_TOKENS`` tokens. (A backward pass batched with ``is_grads_batched``
    computes the forward once, but torch runs the layer norms' and the fused attention's backward once per
    step there: no faster than a loop.)"""
    device = next(model.parameters()).device
    outputs = torch.tensor(list(output_ids), dtype=torch.long, device=device)
    steps = len(outputs)
    per_pass = max(1, GRADIENT_TOKENS // (len(src_ids) + steps))
    parts = [_copies_gradients(model, src_ids, output_ids, rows=range(start, min(start + per_pass, steps)),
                               scale=scale, ablation=ablation)
             for start in range(0, steps, per_pass)]
    source, target = (torch.cat([part[index] for part in parts]) for index in (0, 1))
    return source, target, parts[0][2], parts[0][3]


def _copies_gradients(model: Seq2Seq, src_ids: Sequence[int], output_ids: Sequence[int], *, rows: range,
                      scale: float, ablation: Ablation) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """The gradients of the steps in ``rows``, one copy of the sentence each (see :func:`embedding_gradients`)."""
    device = next(model.parameters()).device
    copies = len(rows)
    src = torch.tensor([list(src_ids)], dtype=torch.long, device=device).expand(copies, -1)
    tgt_in = torch.tensor([decoder_input(model, output_ids)], dtype=torch.long, device=device).expand(copies, -1)
    chosen = torch.tensor(list(rows), device=device)
    outputs = torch.tensor(list(output_ids), dtype=torch.long, device=device)[chosen]
    with _evaluating(model), _frozen(model), _embedding_leaves(model, scale) as leaves, \
            _one_position_scored(model, chosen) as narrowed:
        logits, _ = model(src, tgt_in, ablation=ablation)  # [copies, T or 1, V]
        picked = logits[:, 0] if narrowed else logits[torch.arange(copies, device=device), chosen]
        log_probs = torch.log_softmax(picked.float(), dim=-1)
        total = log_probs.gather(1, outputs[:, None]).sum()
        gradients = torch.autograd.grad(total, leaves["source"] + leaves["target"], allow_unused=True)
    source = _positions(gradients[: len(leaves["source"])], leaves["source"])
    target = _positions(gradients[len(leaves["source"]):], leaves["target"])
    return source, target, _positions(leaves["source_input"])[0], _positions(leaves["target_input"])[0]


@contextlib.contextmanager
def _one_position_scored(model: Seq2Seq, chosen: Tensor) -> Iterator[bool]:
    """While inside, a Transformer's output projection reads only position ``chosen[b]`` of copy ``b`` (its
    logits come out ``[copies, 1, V]``): the other positions' logits, a vocabulary wide each, are never
    computed nor differentiated. Yields whether it does (False for other models)."""
    output = getattr(model, "output", None) if _has_blocks(model) else None
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
                     steps: int = 1, ablation: Ablation = NO_ABLATION) -> ContributionMaps:
    """‖x ⊙ ∇_x log p(y_t)‖ per target step over the source (``source`` ``[T, S]``, also the cross map) and
    the target prefix (``target`` ``[T, T]``, also the dec_self map). ``steps`` > 1: integrated gradients from
    the zero embedding, the gradient averaged at the midpoints of ``steps`` equal segments."""
    name = "input_x_gradient" if steps == 1 else "integrated_gradients"
    CONTRIBUTION_METHODS[name].check(model)
    source_sum = target_sum = None
    for index in range(steps):
        scale = 1.0 if steps == 1 else (index + 0.5) / steps
        source, target, source_x, target_x = embedding_gradients(model, src_ids, output_ids, scale=scale,
                                                                 ablation=ablation)
        source_sum = source if source_sum is None else source_sum + source
        target_sum = target if target_sum is None else target_sum + target
    source_map = (source_x[None] * source_sum / steps).norm(dim=-1)
    target_map = (target_x[None] * target_sum / steps).norm(dim=-1)
    return ContributionMaps(name, per_head=False, layers={"cross": [to_numpy(source_map)],
                                                          "dec_self": [to_numpy(target_map)]},
                            source=to_numpy(source_map), target=to_numpy(target_map))


