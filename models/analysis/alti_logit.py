"""ALTI-Logit (Ferrando et al. 2023, "Explaining How Transformers Use Context to Build Predictions"): the logit of
each predicted token decomposed into every decoder layer's and head's update to the residual stream, each
attention update split over its key tokens and carried back to the input tokens through ALTI+'s contributions
(models/analysis/alti.py).

The logit of token w at position t is u_w · N(h_t) + b_w: h_t the final residual stream, N the decoder's final norm
(where the model has one), u_w the output projection's row (times the model's logit scale). As the authors do, the
norm is linearised: its scale 1/σ(h_t) is the real one and held constant, so N(v) = γ ⊙ (v − mean v)/σ(h_t) + β is
affine and every vector added to the stream contributes r_t · v to the logit, r_t = (γ ⊙ u_w − mean(γ ⊙ u_w))/σ(h_t)
(the norm's readout; an RMS norm does not centre). The stream is the first block's input (the token's embedding
with its position), then every block's update: an attention block's

    Δlogit^{l,h}_{t←j} = α^{l,h}_{tj} (x̃_j W_V^h + b_V^h) W_O^h · r_t

per head h and key token j (x̃_j the block's value input, its norm applied in a pre-LN block: the norm's bias rides
with the token, the authors' "affine" terms), the output projection's bias r_t · b_O, and each feed-forward
block's update. ALTI-Logit then takes each layer's per-token updates to the input tokens through ALTI+'s rollout
up to that layer: Σ_j Δlogit^l_{t←j} R^{l−1}_{j,s} (the first layer's keys are the input tokens themselves).
Encoder-decoder models: a decoder self-attention block's key j is a target-prefix position, mixed from the source
and the prefix by the decoder's rollout before that layer; a cross-attention block's key is an encoder output,
mixed from the source by the encoder's rollout. The terms that are no input token's (the embedding of the
position that predicts, the feed-forward updates, the biases) are kept beside the tokens' (``logit_terms``), so
everything adds up to the logit exactly (to float rounding).

Contrastive (models/analysis/contrast.py): u_w − u_w′, so the terms add up to logit(y_t) − logit(y′_t), the
authors' explanation of why y and not the foil y′.

Where attnviz departs: a post-LN model (the authors treat pre-LN language models) has a norm after every block;
each is linearised the same way (its scale held at the real one), and the readout r is carried back through them
(r ← (γ ⊙ r − mean)/σ at each), so a post-LN block's updates are read through every norm after them. Gemma 2's
logit soft-capping is left out: the terms add up to the logit before it is capped.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch
from torch import Tensor, nn

from ..nn.ablation import NO_ABLATION, Ablation
from ..nn.base import Seq2Seq
from ..nn.intermediates import to_numpy
from .alti import _norm_affine, _norm_scale, alti_maps, post_norm_factor, transformed_values
from .catalogue import ALTI_LOGIT
from .contrast import NO_FOIL, Contrast, check_contrast, foil_rows, kept_contrast
from . import decoder_only
from .contributions import CONTRIBUTION_METHODS, Captured, ContributionMaps, _captured, _evaluating, computes


@dataclass(frozen=True)
class Readout:
    """What a vector added to the stream at each row is worth in logits: ``r`` ``[R, E]`` (its dot product), and
    what the rows already have that no vector carries (``constant`` ``[R]``: the norms' and the output's biases)."""

    r: Tensor
    constant: Tensor


def _linear_norm(norm: nn.Module, z: Tensor) -> tuple[Tensor, bool, Tensor, Tensor]:
    """The norm at its input ``z`` ``[R, E]`` as an affine map with its scale held: scale ``[R, 1]``, whether it
    centres, γ ``[E]`` and β ``[E]``."""
    if hasattr(norm, "offset"):  # an RMS norm whose weight is an offset from 1 (Gemma)
        scale = torch.rsqrt(z.pow(2).mean(dim=-1, keepdim=True) + norm.eps)
        gamma = norm.weight.float() + norm.offset if norm.offset else norm.weight.float()
        return scale, False, gamma, torch.zeros_like(gamma)
    scale, centred = _norm_scale(norm, z)
    gamma, beta = _norm_affine(norm, z)
    return scale, centred, gamma, beta


def through_norm(norm: nn.Module, z: Tensor, r: Tensor) -> tuple[Tensor, Tensor]:
    """The readout ``r`` ``[R, E]`` at the norm's output carried to its input ``z`` (the norm linearised, its scale
    held), and what its bias is worth ``[R]``: N(v) = γ ⊙ C v · s + β gives r · N(v) = (s C(γ ⊙ r)) · v + r · β."""
    scale, centred, gamma, beta = _linear_norm(norm, z)
    weighted = gamma * r
    if centred:
        weighted = weighted - weighted.mean(dim=-1, keepdim=True)
    return scale * weighted, r @ beta


def unembedding(model: Seq2Seq, predicted: Sequence[int], foils: Sequence[int]) -> Readout:
    """The output projection's rows of each row's token, less its foil's (``NO_FOIL``: none), times the logit
    scale: the readout at the final norm's output."""
    weight = model.output.weight.float()
    bias = model.output.bias
    tokens = torch.tensor(list(predicted), device=weight.device)
    foil = torch.tensor(list(foils), device=weight.device)
    has = (foil != NO_FOIL).float()[:, None]
    r = weight[tokens] - has * weight[foil.clamp_min(0)]
    constant = torch.zeros(len(tokens), device=weight.device)
    if bias is not None:
        constant = bias.float()[tokens] - has[:, 0] * bias.float()[foil.clamp_min(0)]
    scale = float(getattr(model, "logit_scale", 1.0))
    return Readout(scale * r, scale * constant)


@dataclass(frozen=True)
class BlockLogits:
    """One attention block's logit update: per head and key token ``heads`` ``[H, R, K]``, its output bias's
    ``bias`` ``[R]`` (and a post-LN norm's bias), and the readout carried to its input ``r_input`` ``[R, E]``."""

    heads: Tensor
    bias: Tensor
    r_input: Tensor


def block_logits(block: dict, r: Tensor) -> BlockLogits:
    """A noted attention block (``block_terms``' layout) read through the readout ``r`` ``[R, E]`` at its output:
    Δlogit^h_{ij} = α^h_ij f_h(x_j) · ρ_i, ρ the readout where the heads' sum enters (r itself in a pre-LN block;
    through its norm in a post-LN block; times Gemma 2's post-attention norm, its scale held)."""
    sublayer = block["sublayer"]
    weights = block["weights"][0].float()  # [H, R, K]
    attended = block["attended"][0].float()
    residual = sublayer.residual_scale * block["x"][0].float()
    extra = torch.zeros(r.shape[0], device=r.device)
    if sublayer.pre_norm:
        rho = r
        post = getattr(sublayer, "post_norm", None)
        if post is not None:
            rho = r * post_norm_factor(post, block["attended"][0])
        r_input = sublayer.residual_scale * r
    else:
        rho, extra = through_norm(sublayer.norm, residual + attended, r)
        r_input = sublayer.residual_scale * rho
    output = sublayer.attention.output
    if output is not None and output.bias is not None:
        extra = extra + rho @ output.bias.float()
    values = transformed_values(block)  # [H, K, E]
    heads = weights * torch.einsum("hke,re->hrk", values, rho)
    return BlockLogits(heads, extra, r_input)


def _feed_forward(sublayer: nn.Module, x: Tensor) -> tuple[Tensor, Tensor | None]:
    """An encoder-decoder's feed-forward sublayer run again on its input ``x`` ``[R, E]``: its output and, post-LN,
    what its norm read (the residual plus the update)."""
    noted = {}
    handle = sublayer.norm.register_forward_pre_hook(lambda _module, args: noted.update(z=args[0]))
    try:
        output = sublayer(x[None].to(_weights_dtype(sublayer, x.dtype)))[0].float()
    finally:
        handle.remove()
    return output, (None if sublayer.pre_norm else noted["z"][0].float())


def _weights_dtype(module: nn.Module, default: torch.dtype) -> torch.dtype:
    """The type ``module`` computes in: its weights' (rounded to bfloat16 or float16 with --dtype), else ``default``."""
    return next((parameter.dtype for parameter in module.parameters()), default)


class _Terms:
    """The logit's terms as the walk back through the decoder finds them (see the module's docstring)."""

    def __init__(self, rows: int, device):
        self.heads: dict[str, list[Tensor]] = {"dec_self": [], "cross": []}
        self.feed_forward: list[Tensor] = []
        self.bias = torch.zeros(rows, device=device)

    def attention(self, kind: str, found: BlockLogits) -> None:
        self.heads[kind].insert(0, found.heads)
        self.bias = self.bias + found.bias


def _final(model: Seq2Seq, norm: nn.Module | None, stream: Tensor, *,
           readout: Readout) -> tuple[Tensor, Tensor, Tensor]:
    """The readout at the final stream ``[R, E]``, what the final norm's and the output's biases add ``[R]``, and
    the logit (difference) itself, computed with the norm as it is ``[R]``."""
    if norm is None:
        return readout.r, readout.constant, (stream * readout.r).sum(-1) + readout.constant
    r, bias = through_norm(norm, stream, readout.r)
    logit = (norm(stream.to(_weights_dtype(norm, stream.dtype))).float() * readout.r).sum(-1) + readout.constant
    return r, bias + readout.constant, logit


def _encoder_decoder(captured: Captured, foils: list[int]) -> tuple[_Terms, Tensor, Tensor]:
    """The decoder walked back from its output: the terms, the logit and the embedding's term ``[T]``."""
    model, blocks = captured.model, captured.blocks
    layers = len(model.decoder_layers)
    outputs = [_feed_forward(layer.feed_forward, blocks[("cross", index)]["output"][0].float())
               for index, layer in enumerate(model.decoder_layers)]
    readout = unembedding(model, captured.output_ids.tolist(), foils)
    r, bias, logit = _final(model, model.decoder_norm, outputs[-1][0], readout=readout)
    terms = _Terms(len(foils), r.device)
    terms.bias = bias
    for index in reversed(range(layers)):
        sublayer = model.decoder_layers[index].feed_forward
        x = blocks[("cross", index)]["output"][0].float()
        output, z = outputs[index]
        residual = sublayer.residual_scale * x
        if z is None:
            terms.feed_forward.insert(0, ((output - residual) * r).sum(-1))
        else:
            r, norm_bias = through_norm(sublayer.norm, z, r)
            terms.bias = terms.bias + norm_bias
            terms.feed_forward.insert(0, ((z - residual) * r).sum(-1))
        r = sublayer.residual_scale * r
        for kind in ("cross", "dec_self"):
            found = block_logits(blocks[(kind, index)], r)
            terms.attention(kind, found)
            r = found.r_input
    embedding = (blocks[("dec_self", 0)]["x"][0].float() * r).sum(-1)
    return terms, logit, embedding


def _sequence(captured: Captured, foils: list[int]) -> tuple[_Terms, Tensor, Tensor]:
    """A decoder-only pass walked back: every layer is ``x + post(attention)`` then ``+ post(feed-forward)``, so the
    readout is the final norm's at every layer and a feed-forward update is the stream's step between blocks."""
    model, blocks = captured.model, captured.blocks
    count = len(model.layers)
    last, block = model.layers[-1], blocks[("dec_self", count - 1)]
    fed = last.feed_forward(last.feed_forward_norm(block["output"]))
    if last.post_feed_forward_norm is not None:
        fed = last.post_feed_forward_norm(fed)
    streams = [blocks[("dec_self", index)]["x"][0].float() for index in range(1, count)]
    streams.append((block["output"] + fed)[0].float())
    _, predicted = decoder_only.sequence_ids(captured.src_ids[0].tolist(), captured.output_ids.tolist())
    readout = unembedding(model, predicted, foils)
    r, bias, logit = _final(model, model.norm, streams[-1], readout=readout)
    terms = _Terms(len(foils), r.device)
    terms.bias = bias
    for index in reversed(range(count)):
        output = blocks[("dec_self", index)]["output"][0].float()
        terms.feed_forward.insert(0, ((streams[index] - output) * r).sum(-1))
        terms.attention("dec_self", block_logits(blocks[("dec_self", index)], r))
    embedding = (blocks[("dec_self", 0)]["x"][0].float() * r).sum(-1)
    return terms, logit, embedding


def _rolled(captured: Captured, terms: _Terms) -> tuple[Tensor | None, Tensor]:
    """Each layer's per-token updates taken to the input tokens through ALTI+'s rollout before that layer:
    ``source`` ``[T, S]`` (None for a decoder-only pass) and ``target`` ``[T, T]`` (``[n, n]``)."""
    before: dict = {}
    alti_maps(captured, before=before)
    per_token = {kind: [heads.sum(dim=0) for heads in found] for kind, found in terms.heads.items()}  # [R, K]
    if captured.prompt_len is not None:
        return None, sum(update @ before[("dec_self", index)]
                         for index, update in enumerate(per_token["dec_self"]))
    encoder = before["encoder"]
    source = sum(update @ encoder for update in per_token["cross"])
    target = 0
    for index, update in enumerate(per_token["dec_self"]):
        prefix_source, prefix_target = before[("dec_self", index)]
        source = source + update @ prefix_source
        target = target + update @ prefix_target
    return source, target


@torch.inference_mode()
def alti_logit(model: Seq2Seq, src_ids: Sequence[int], output_ids: Sequence[int], *,
               captured: Captured | None = None, ablation: Ablation = NO_ABLATION,
               contrast: Contrast | None = None) -> ContributionMaps:
    """ALTI-Logit of every output step's logit (with ``contrast``: logit(y_t) − logit(y′_t) where a step has a
    foil): per decoder layer and head the direct update of each key token ``layers[kind]`` ``[H, T, K]``, the
    updates taken to the input tokens ``source`` ``[T, S]`` and ``target`` ``[T, T]`` (a decoder-only model: over
    its whole sequence, models/analysis/decoder_only.py), and ``logit_terms``: ``logit`` ``[T]`` (what they all add up
    to), ``embedding`` ``[T]``, ``feed_forward`` ``[layers, T]`` and ``bias`` ``[T]``."""
    CONTRIBUTION_METHODS[ALTI_LOGIT].check(model)
    check_contrast(model, output_ids, contrast)
    captured = _captured(model, src_ids, output_ids, captured=captured, ablation=ablation)
    prompt_len = captured.prompt_len
    rows = captured.tgt_in.shape[1]
    foils = foil_rows(contrast, rows, prompt_len=prompt_len)
    with _evaluating(model):
        walk = _encoder_decoder if prompt_len is None else _sequence
        terms, logit, embedding = walk(captured, foils)
        source, target = _rolled(captured, terms)
    layers = {kind: [to_numpy(heads) for heads in found] for kind, found in terms.heads.items() if found}
    logit_terms = {"logit": to_numpy(logit), "embedding": to_numpy(embedding), "bias": to_numpy(terms.bias),
                   "feed_forward": to_numpy(torch.stack(terms.feed_forward))}
    if prompt_len is not None:
        target_map = to_numpy(target)
        return ContributionMaps(ALTI_LOGIT, per_head=True, layers=layers, target=target_map,
                                source=np.ascontiguousarray(target_map[prompt_len - 1:, :prompt_len]),
                                prompt_len=prompt_len, logit_terms=logit_terms, contrast=kept_contrast(contrast))
    return ContributionMaps(ALTI_LOGIT, per_head=True, layers=layers, source=to_numpy(source), target=to_numpy(target),
                            logit_terms=logit_terms, contrast=kept_contrast(contrast))


@computes(ALTI_LOGIT)
def _alti_logit(model: Seq2Seq, src_ids: Sequence[int], output_ids: Sequence[int], *, captured=None,
                ablation: Ablation = NO_ABLATION, ig_steps: int | None = None,
                contrast: Contrast | None = None) -> ContributionMaps:
    """As the registry calls it: from the traced pass (its decoder's feed-forward sublayers run again)."""
    return alti_logit(model, src_ids, output_ids, captured=captured, ablation=ablation, contrast=contrast)
