"""What the model knew at each layer: the logit lens and DecoderLens, read from the traced forward pass.

- Logit lens (nostalgebraist 2020, "interpreting GPT: the logit lens"): the decoder's residual stream h_l at every
  layer boundary l (0: the embeddings, l: layer l's output) is put through the model's own output head, the one its
  last layer's output goes through (``model.head``: the final norm where the model has one, the output projection
  with its bias, the logit scale or soft-cap), p_l = softmax(head(h_l)); per output step, the probability and rank
  of the token the model chose and the top-k tokens. At the last boundary this is the model's own distribution.
  The residual stream is noted by the traced pass (``capture_forward``, models/nn/intermediates.py
  ``noting_residuals``): no pass beyond it. A decoder-only model's prompt plays the source's part; its lens covers
  the continuation's positions.
- DecoderLens (Langedijk et al. 2023, "DecoderLens: Layerwise Interpretation of Encoder-Decoder Transformers"):
  the decoder cross-attends to encoder layer l's output (through the encoder's final norm where the model has one,
  as its last layer's output is: ``model.memory``) instead of the last layer's; per encoder boundary l (0: the
  embeddings), its greedy output and the negative log-likelihood of the model's own output given it. All the
  boundaries are decoded as one batch (teacher-forced for the NLL, then greedily), with the heads the traced pass
  switched off still off.

Both read a Transformer's layers: a recurrent (GRU) model has none (``NOT_TRANSFORMER``); DecoderLens reads an
encoder, which a decoder-only model has not (``NO_ENCODER``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch
from torch import Tensor

from ..errors import InputError
from ..inference.decoding import greedy_rows
from ..inference.prompts import end_ids
from ..nn.ablation import NO_ABLATION, Ablation
from ..nn.base import DecoderState, LayerCache, Seq2Seq
from ..nn.masks import target_mask
from . import catalogue, decoder_only, encoder_only
from .contributions import Captured, capture_forward, decoder_input, traceable

TOP_K = 5  # tokens a lens reading lists per layer and step
NOT_TRANSFORMER = ("the logit lens and DecoderLens read a Transformer's layers; a recurrent (GRU) model has no "
                   "residual stream to read")
NO_ENCODER = ("DecoderLens decodes from each encoder layer; a decoder-only model has no encoder (its logit lens "
              "covers the continuation)")
NO_DECODER = "the logit lens and DecoderLens read a decoder's predictions; an encoder-only model does not decode"


class LensError(InputError):
    """A lens the model cannot give, or a reading asked of a step or layer it does not have (one line)."""


@dataclass(frozen=True)
class LogitLens:
    """The logit lens of one output: per decoder layer boundary l (``L + 1`` of them, 0 the embeddings) and output
    step t, the chosen token's probability ``probs[l, t]`` and rank ``ranks[l, t]`` (0: the most likely, as a
    ``DecodeStep``'s), and the ``top_ids``/``top_probs`` ``[L + 1, T, k]``; ``token_ids`` ``[T]`` the output."""

    token_ids: np.ndarray
    probs: np.ndarray
    ranks: np.ndarray
    top_ids: np.ndarray
    top_probs: np.ndarray

    @property
    def layers(self) -> int:
        """Layer boundaries (the decoder's layers + 1)."""
        return self.probs.shape[0]

    @property
    def steps(self) -> int:
        return self.probs.shape[1]

    def check_step(self, step: int) -> None:
        """One line when ``step`` (from 0) is not one of the output's."""
        if not 0 <= step < self.steps:
            steps = f"{self.steps} step" + ("s" if self.steps != 1 else "")
            raise LensError(f"step {step + 1} is beyond the output, which has {steps}")


@dataclass(frozen=True)
class EncoderReading:
    """DecoderLens at encoder layer boundary ``layer`` (0: the embeddings): the decoder's greedy output reading it
    (``token_ids``, through its end token) and ``nll``, −Σ_t log p(y_t | y_<t, that layer), in nats, of the model's
    own output y."""

    layer: int
    token_ids: tuple[int, ...]
    nll: float


def check_lens(model: Seq2Seq, name: str = catalogue.LOGIT_LENS) -> None:
    """One line (``LensError``) when ``model`` cannot give the lens ``name``."""
    if encoder_only.is_encoder_only(model):
        raise LensError(NO_DECODER)
    if not traceable(model) or not hasattr(model, "head"):
        raise LensError(NOT_TRANSFORMER)
    if name == catalogue.DECODER_LENS and decoder_only.is_decoder_only(model):
        raise LensError(NO_ENCODER)


def unavailable(model: Seq2Seq, name: str) -> str | None:
    """The line saying why ``model`` cannot give the lens ``name``, or None."""
    try:
        check_lens(model, name)
    except LensError as error:
        return str(error)
    return None


def logit_lens(model: Seq2Seq, src_ids: Sequence[int], output_ids: Sequence[int], *, captured: Captured | None = None,
               top_k: int = TOP_K, ablation: Ablation = NO_ABLATION) -> LogitLens:
    """The logit lens of ``output_ids`` (``DecodeResult.token_ids``; a decoder-only model's ``src_ids`` its prompt)
    from the traced pass ``captured`` (made here when None, with the heads ``ablation`` names switched off)."""
    check_lens(model, catalogue.LOGIT_LENS)
    if not list(output_ids):
        raise LensError("the output has no tokens: the logit lens reads the steps that produced them")
    captured = captured if captured is not None else capture_forward(model, src_ids, output_ids, ablation=ablation)
    first = captured.prompt_len - 1 if captured.prompt_len is not None else 0  # the positions that predict the output
    targets = captured.output_ids.reshape(-1, 1)  # [T, 1]
    k = max(1, min(top_k, captured.logits.shape[-1]))
    probs, ranks, top_ids, top_probs = [], [], [], []
    with torch.inference_mode():
        states = captured.residuals["decoder"]
        for layer, state in enumerate(states):  # one boundary at a time: [T, V] each, never [L + 1, T, V]
            # the last boundary through the head is the pass' own logits: the same function of the same tensor
            logits = captured.logits[0] if layer == len(states) - 1 else model.head(state[0, first:])
            log_probs = torch.log_softmax(logits.float(), dim=-1)  # [T, V]
            chosen = log_probs.gather(1, targets)  # [T, 1]
            top = log_probs.topk(k, dim=-1)
            probs.append(chosen[:, 0].exp())
            ranks.append((log_probs > chosen).sum(dim=-1))
            top_ids.append(top.indices)
            top_probs.append(top.values.exp())
        host = [torch.stack(values).cpu().numpy() for values in (probs, ranks, top_ids, top_probs)]
    return LogitLens(captured.output_ids.cpu().numpy(), *host)


def decoder_lens(model: Seq2Seq, src_ids: Sequence[int], output_ids: Sequence[int], *,
                 captured: Captured | None = None, first: Sequence[int] = (),
                 ablation: Ablation = NO_ABLATION) -> list[EncoderReading]:
    """DecoderLens of ``src_ids`` at every encoder layer boundary, the model's own output being ``output_ids`` (whose
    NLL each boundary gives); ``first``: the tokens every output starts with (a target language's code). Each
    boundary is decoded greedily up to twice the output's length and 10 tokens (within the model's limit; an output
    without its end token was cut at its run's limit, its length, which the boundaries keep), with the
    heads switched off that the traced pass ``captured`` had off (made here when None, with ``ablation``'s)."""
    check_lens(model, catalogue.DECODER_LENS)
    if not list(output_ids):
        raise LensError("the output has no tokens: DecoderLens scores the model's own output")
    captured = captured if captured is not None else capture_forward(model, src_ids, output_ids, ablation=ablation)
    with torch.inference_mode():
        memory = model.memory(torch.cat(captured.residuals["encoder"]))  # [L + 1, S, E]
        rows = memory.shape[0]
        src_mask = model.source_mask(captured.src_ids).expand(rows, -1, -1, -1)
        nll = _output_nll(model, captured, memory, src_mask=src_mask)
        state = DecoderState(memory, src_mask, caches=[LayerCache() for _ in model.decoder_layers],
                             ablation=captured.ablation)
        ended = int(output_ids[-1]) in end_ids(model.config)  # an output cut at its run's limit keeps that limit
        limit = 2 * len(output_ids) + 10 if ended else len(output_ids)
        outputs = greedy_rows(model, src_ids, state, max_len=limit, first=first)
    return [EncoderReading(layer, tuple(ids), float(score)) for layer, (ids, score) in enumerate(zip(outputs, nll))]


def _output_nll(model: Seq2Seq, captured: Captured, memory: Tensor, *, src_mask: Tensor) -> list[float]:
    """Per row of ``memory`` the NLL of the captured output, teacher-forced, in one batched pass of the decoder."""
    rows = memory.shape[0]
    tgt_in = torch.tensor([decoder_input(model, captured.output_ids.tolist())], device=memory.device).expand(rows, -1)
    logits, _, _ = model.decode(tgt_in, memory, src_mask, self_mask=target_mask(tgt_in, model.pad_id), caches=None,
                                offset=0, need_weights=False, ablation=captured.ablation)
    log_probs = torch.log_softmax(logits.float(), dim=-1)  # [L + 1, T, V]
    targets = captured.output_ids.reshape(1, -1, 1).expand(rows, -1, -1)
    return (-log_probs.gather(2, targets)[..., 0].double().sum(dim=1)).tolist()


COMPUTATIONS = {catalogue.LOGIT_LENS: logit_lens, catalogue.DECODER_LENS: decoder_lens}  # one per catalogue entry
