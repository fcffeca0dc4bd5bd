"""ALTI+ (Ferrando et al. 2022, "Towards Opening the Black Box of Neural Machine Translation: Source and Target
Contributions to the Prediction"), as its authors compute it (docs/contributions.md).

Every attention block's output y_i is split exactly into one term per input token and a bias (``block_terms``):
token j's term is Σ_h α_ij^h (x_j W_V^h + b_V^h) W_O^h — the value bias rides with each token, weighted by its
attention, as in the authors' code — and the residual x_i is its own token's term (self-attention) or a term of
its own (cross-attention: the target side's share); a post-LN block's norm is linear once its input's statistics
are fixed. The bias term (the output projection's bias, and a post-LN norm's bias) is no token's, but the
resultant y_i is the block's real output, biases included, as in the authors' published code (stopes'
``transformer_wrapper.py``, mt-upc/transformer-contributions-nmt). Token j's contribution is the L1 closeness
max(0, ‖y_i‖₁ − ‖y_i − T_ij‖₁), each row normalised to sum to 1, and the blocks are rolled out through the
model; the feed-forward blocks mix no tokens.

Where this departs from their code: a post-LN block's norm scales by its real factor, nn.LayerNorm's
rsqrt(var + eps) (RMS norm's, or an unbiased-std norm's, as the model computes it), where theirs scales by
1/std(x + eps) with the unbiased std, which is not what nn.LayerNorm computes; and a row whose closeness is
0 for every token (their code divides 0 by 0) goes whole to the token of largest closeness, the rule's limit.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch
from torch import Tensor, nn

from ..nn.intermediates import to_numpy
from .steps import Steps, drive

# Floats one block's decomposed terms [queries, keys, d_model] may hold at a time: the queries are taken in
# chunks of this size, so a 512 + 512-token pair never holds a block's terms whole (512 MB at d_model 512).
TERM_FLOATS = 1 << 22


# ------------------------------------------------------------------------------------------ decomposition


@torch.inference_mode()
def transformed_values(block: dict) -> Tensor:
    """f(x_j) per head: ``[H, K, E]``, each key's value vector through its head's slice of W_O (zero for a head
    switched off: its output never reached the block's)."""
    return transformed(block["sublayer"].attention, block["v"][0], heads_off=block.get("heads_off") or ())


def transformed(attention: nn.Module, v: Tensor, *, heads_off: Sequence[int]) -> Tensor:
    """One attention's value vectors ``[H, K, D]`` through its heads' slices of W_O: ``[H, K, E]``."""
    v = v.float()
    if heads_off:
        v = v.index_fill(0, torch.tensor(list(heads_off), device=v.device), 0.0)
    heads, _, head_dim = v.shape
    if attention.output is None:  # heads concatenated as they are: W_O is the identity
        weight = torch.eye(heads * head_dim, dtype=v.dtype, device=v.device)
    else:
        weight = attention.output.weight.float()  # [E, H·D]
    return torch.einsum("hkd,ehd->hke", v, weight.view(weight.shape[0], heads, head_dim))


@dataclass(frozen=True)
class BlockTerms:
    """One attention block's output for a run of queries, split exactly: ``tokens`` ``[Q, K, E]`` (each key
    token's term through the heads, its value bias included), ``residual`` ``[Q, E]`` (the query token's own
    input), ``bias`` ``[Q, E]`` (the output projection's and the norm's biases); their sum is ``output``
    ``[Q, E]``, the block's real output."""

    tokens: Tensor
    residual: Tensor
    bias: Tensor
    output: Tensor

    def total(self) -> Tensor:
        return self.tokens.sum(dim=1) + self.residual + self.bias


@torch.inference_mode()
def block_terms(block: dict, queries: slice = slice(None), *, values: Tensor | None = None,
                room_for_residual: bool = False) -> BlockTerms:
    """The decomposition of one noted attention block (pre-LN: ``x + Attention(LN(x))``; post-LN:
    ``LN(x + Attention(x))``, the norm linear once the statistics of its input are fixed). ``values``: the
    block's :func:`transformed_values`, when the caller has them. The token terms are computed key-major
    (``tokens`` is a view of a ``[K, Q, E]`` tensor, with one more key row of zeros when
    ``room_for_residual``): one matrix product per key, and each key's terms contiguous for the distances."""
    sublayer = block["sublayer"]
    weights = block["weights"][0, :, queries].float()  # [H, Q, K]
    values = transformed_values(block) if values is None else values  # [H, K, E]
    _, count, keys = weights.shape
    key_major = values.new_zeros(keys + room_for_residual, count, values.shape[-1])
    # contiguous operands: a strided batch with 8-wide products runs ~25× slower
    torch.bmm(weights.permute(2, 1, 0).contiguous(), values.transpose(0, 1).contiguous(), out=key_major[:keys])
    x = block["x"][0, queries].float()
    residual = sublayer.residual_scale * x
    output_bias = sublayer.attention.output.bias if sublayer.attention.output is not None else None
    bias = (output_bias.float() if output_bias is not None else torch.zeros_like(x[0])).expand_as(x)
    output = block["output"][0, queries].float()
    if not sublayer.pre_norm:
        normed_input = residual + block["attended"][0, queries].float()  # what the norm read
        scale, centred = _norm_scale(sublayer.norm, normed_input)
        weight, norm_bias = _norm_affine(sublayer.norm, x)
        linear = lambda t: weight * (t - t.mean(dim=-1, keepdim=True) if centred else t) * scale  # noqa: E731
        if centred:
            key_major[:keys] -= key_major[:keys].mean(dim=-1, keepdim=True)
        key_major[:keys] *= weight
        key_major[:keys] *= scale[None]
        residual, bias = linear(residual), linear(bias) + norm_bias
    post = getattr(sublayer, "post_norm", None)  # a norm on the attention's output alone (Gemma 2's sandwich)
    if post is not None:
        factor = post_norm_factor(post, block["attended"][0, queries])  # [Q, E], its scale fixed
        key_major[:keys] *= factor
        bias = bias * factor
    return BlockTerms(key_major.transpose(0, 1), residual, bias=bias.contiguous(), output=output)


def _norm_scale(norm: nn.Module, z: Tensor) -> tuple[Tensor, bool]:
    """The factor ``[Q, 1]`` the norm divides its input by, and whether it subtracts the mean first."""
    if isinstance(norm, nn.RMSNorm):
        eps = norm.eps if norm.eps is not None else torch.finfo(z.dtype).eps
        return torch.rsqrt(z.pow(2).mean(dim=-1, keepdim=True) + eps), False
    if isinstance(norm, nn.LayerNorm):
        return torch.rsqrt(z.var(dim=-1, unbiased=False, keepdim=True) + norm.eps), True
    return 1.0 / (z.std(dim=-1, keepdim=True) + norm.eps), True  # UnbiasedStdNorm


def post_norm_factor(norm: nn.Module, attended: Tensor) -> Tensor:
    """``[Q, E]``: what an RMS norm on the attention's output (Gemma 2's post-attention norm) multiplies it by, its
    scale fixed at the real output's: ``1/√(mean(a²) + ε)`` times ``offset + weight``."""
    a = attended.float()
    offset = getattr(norm, "offset", 0.0)
    return torch.rsqrt(a.pow(2).mean(dim=-1, keepdim=True) + norm.eps) * (norm.weight.float() + offset)


def _norm_affine(norm: nn.Module, like: Tensor) -> tuple[Tensor, Tensor]:
    weight = getattr(norm, "weight", None)
    bias = getattr(norm, "bias", None)
    ones = torch.ones_like(like[0])
    return (ones if weight is None else weight.float()), (ones * 0 if bias is None else bias.float())


def query_chunks(queries: int, keys: int, width: int) -> list[slice]:
    size = max(1, TERM_FLOATS // max(1, keys * width))
    return [slice(start, min(start + size, queries)) for start in range(0, queries, size)]


# ------------------------------------------------------------------------------------------------- ALTI+


def alti_block(block: dict, *, cross: bool) -> Tensor:
    """One block's token-to-token contributions: ``[Q, K]`` for a self-attention block (the residual counted
    with its own token), ``[Q, K + 1]`` for cross-attention (the last column: the target-side residual).
    The resultant each term is compared with is the block's real output (its biases included).
    Each row is non-negative and sums to 1."""
    return drive(alti_block_steps(block, cross=cross))


@torch.inference_mode()  # each unit inside it (a generator's units run one at a time)
def alti_block_steps(block: dict, *, cross: bool) -> Steps:
    """:func:`alti_block` as units (models/analysis/steps.py): one per run of queries (``query_chunks``)."""
    queries, keys = block["weights"].shape[2], block["weights"].shape[3]
    values = transformed_values(block)
    rows = []
    for chunk in query_chunks(queries, keys + 1, values.shape[-1]):
        terms = block_terms(block, chunk, values=values, room_for_residual=cross)
        parts = terms.tokens.transpose(0, 1)  # [K (+ 1), Q, E], contiguous
        present = block["weights"][0, :, chunk].amax(dim=0) > 0  # [Q, K]: keys some head attends to
        if cross:
            parts[keys] = terms.residual
            present = torch.cat([present, present.new_ones(present.shape[0], 1)], dim=1)
        else:
            own = torch.arange(chunk.start, chunk.start + parts.shape[1], device=parts.device)
            parts[own, own - chunk.start] += terms.residual
            present[own - chunk.start, own] = True
        rows.append(_l1_contributions(parts, present, bias=terms.bias))
        yield chunk.stop, queries
    return torch.cat(rows, dim=0)


def _l1_contributions(parts: Tensor, present: Tensor, *, bias: Tensor | None = None) -> Tensor:
    """``parts`` ``[K, Q, E]`` (overwritten) → ``[Q, K]``: max(0, ‖y‖₁ − ‖y − T_j‖₁), rows normalised, where
    y = Σ_j T_j + ``bias`` ``[Q, E]`` (the block's output; no bias: the parts' sum). Where y is shorter than
    every part, no closeness is positive; such a row takes the rule's limit as its last positive closeness
    reaches 0: the whole share goes to the part of largest closeness among those ``present`` ``[Q, K]`` (a
    masked key's zero part would otherwise win with its closeness of 0)."""
    resultant = parts.sum(dim=0)  # [Q, E]
    if bias is not None:
        resultant += bias
    length = resultant.abs().sum(dim=-1)  # [Q]
    distances = parts.sub_(resultant).abs_().sum(dim=-1)  # [K, Q]
    signed = (length - distances).T  # [Q, K]
    closeness = signed.clamp(min=0)
    total = closeness.sum(dim=-1, keepdim=True)
    shares = closeness / torch.where(total > 0, total, torch.ones_like(total))
    cancelled = (total[:, 0] <= 0) & present.any(dim=-1)
    if cancelled.any():
        nearest = signed[cancelled].masked_fill(~present[cancelled], -torch.inf).argmax(dim=-1)
        shares[cancelled] = torch.nn.functional.one_hot(nearest, shares.shape[1]).to(shares.dtype)
    return shares


def alti_maps(captured, *, before: dict | None = None) -> dict:
    """ALTI+ of one traced pass (a ``contributions.Captured``), as the fields of its ``ContributionMaps``: every
    block's map (``layers``, ``cross_residual``) and the rollout (``source``, ``target``). The encoder's
    blocks multiply; in the decoder a self block mixes the target rows, a cross block takes the source through
    the encoder's rollout and keeps its residual's share of the row's previous mixture. A decoder-only model's
    pass: :func:`sequence_alti_steps`. ``before`` (ALTI-Logit reads it) receives the rollout each decoder layer's
    input has: ``("dec_self", layer)`` → (source ``[T, S]``, target ``[T, T]``), and ``"encoder"`` ``[S, S]``."""
    return drive(alti_maps_steps(captured, before=before))


@torch.inference_mode()
def alti_maps_steps(captured, *, before: dict | None = None) -> Steps:
    """:func:`alti_maps` as units (models/analysis/steps.py): one per run of queries of each block, so that a
    caller can stop it between two (the window's coverage job, overtaken by a newer run)."""
    if getattr(captured, "prompt_len", None) is not None:
        return (yield from sequence_alti_steps(captured, before=before))
    if not hasattr(captured.model, "encoder_layers"):
        return (yield from sentence_alti_steps(captured))
    blocks = captured.blocks
    source_len, target_len = captured.src_ids.shape[1], captured.tgt_in.shape[1]
    device = captured.logits.device
    layers: dict[str, list[np.ndarray]] = {"enc_self": [], "dec_self": [], "cross": []}
    encoder = torch.eye(source_len, device=device)
    for layer in range(len(captured.model.encoder_layers)):
        block = yield from alti_block_steps(blocks[("enc_self", layer)], cross=False)
        layers["enc_self"].append(to_numpy(block))
        encoder = block @ encoder
    source = torch.zeros(target_len, source_len, device=device)
    target = torch.eye(target_len, device=device)
    residuals = []
    if before is not None:
        before["encoder"] = encoder
    for layer in range(len(captured.model.decoder_layers)):
        if before is not None:
            before[("dec_self", layer)] = source, target
        own = yield from alti_block_steps(blocks[("dec_self", layer)], cross=False)
        layers["dec_self"].append(to_numpy(own))
        source, target = own @ source, own @ target
        mixed = yield from alti_block_steps(blocks[("cross", layer)], cross=True)  # [T, S + 1]
        layers["cross"].append(to_numpy(mixed[:, :source_len]))
        residuals.append(to_numpy(mixed[:, source_len]))
        kept = mixed[:, source_len:]
        source = mixed[:, :source_len] @ encoder + kept * source
        target = kept * target
    return {"layers": layers, "source": to_numpy(source), "target": to_numpy(target), "cross_residual": residuals}


@torch.inference_mode()
def sequence_alti_steps(captured, *, before: dict | None = None) -> Steps:
    """ALTI+ of a decoder-only pass (models/analysis/decoder_only.py: ``prompt_len`` P, the sequence fed ``tgt_in``
    of n positions): every block's ``[n, n]`` map (the residual counted with its own token), their product through
    the layers (``target`` ``[n, n]``: each row sums to 1) and the prompt's share of each predicted token
    (``source`` ``[T, P]``: the last T rows' prompt columns)."""
    n, prompt_len = captured.tgt_in.shape[1], captured.prompt_len
    rollout = torch.eye(n, device=captured.logits.device)
    layers = []
    for index in range(len(captured.model.layers)):
        if before is not None:
            before[("dec_self", index)] = rollout
        block = yield from alti_block_steps(captured.blocks[("dec_self", index)], cross=False)
        layers.append(to_numpy(block))
        rollout = block @ rollout
    return {"layers": {"dec_self": layers}, "target": to_numpy(rollout),
            "source": to_numpy(rollout[prompt_len - 1:, :prompt_len]), "prompt_len": prompt_len}


@torch.inference_mode()
def sentence_alti_steps(captured) -> Steps:
    """ALTI+ of an encoder-only pass (models/analysis/encoder_only.py): every post-LN block's ``[S, S]`` map (the
    residual counted with its own token) and their product through the layers, ``source`` ``[S, S]``: each
    position's final representation split over the sentence's tokens (each row sums to 1)."""
    length = captured.src_ids.shape[1]
    layers = []
    for index in range(len(captured.model.layers)):
        layers.append((yield from alti_block_steps(captured.blocks[("enc_self", index)], cross=False)))
    mixed = torch.eye(length, device=captured.logits.device)
    for block in layers:
        mixed = block @ mixed
    return {"layers": {"enc_self": [to_numpy(block) for block in layers]}, "source": to_numpy(mixed)}
