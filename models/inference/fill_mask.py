"""What running an encoder-only model means (docs/architectures.md#encoder-only): the sentence is encoded once, and
every position holding the mask token (``[MASK]``, ``<mask>``) gets its top-k predictions from the
masked-language-model head. The result carries the encoder's attention as an ``AttentionTrace`` of kind
``enc_self`` (no decoder tokens), so the views and the exports read it as they read an encoder-decoder's.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from ..nn.ablation import NO_ABLATION, Ablation
from ..nn.encoder_only import NO_HEAD
from ..nn.intermediates import Intermediates, keeping_attention, trace_from_intermediates
from ..trace.records import AttentionTrace
from .translator import SourceInput, Translator

TOP_K = 5  # the predictions each mask gets unless asked otherwise (attnviz translate --json, export)
NO_MASK = "no token was masked: there is nothing to fill (a {mask} in the sentence marks a token to predict)"
NO_MASK_TOKEN = "this model's tokenizer has no mask token: there is nothing to fill"


@dataclass
class MaskPrediction:
    """One masked position's top-k predictions, most likely first: ids, tokens and probabilities."""

    position: int  # the index of the masked token among the sentence's tokens
    top_ids: list[int]
    top_tokens: list[str]
    top_probs: list[float]

    @property
    def best(self) -> int:
        return self.top_ids[0]


@dataclass
class FillResult:
    """A sentence run through an encoder-only model: ``text`` is the sentence with each mask filled by its most
    likely token (the sentence as it is where nothing was filled), ``note`` says why nothing was ("" otherwise)."""

    text: str
    tokens: list[str]  # the encoder positions' labels
    predictions: list[MaskPrediction]
    trace: AttentionTrace
    note: str = ""
    source_ids: list[int] = field(default_factory=list)  # the sentence's token ids as encoded
    filled_ids: list[int] = field(default_factory=list)  # the same with each mask's most likely token


def mask_positions(ids: list[int], mask_id: int) -> list[int]:
    """The indices of the sentence's mask tokens (none when the model has no mask token, ``mask_id`` -1)."""
    return [index for index, token in enumerate(ids) if mask_id >= 0 and token == mask_id]


def fill_masks(translator: Translator, source: SourceInput, *, top_k: int = TOP_K, need_weights: bool = True,
               ablation: Ablation = NO_ABLATION, dtype: type = np.float32) -> FillResult:
    """Encode ``source`` (from ``translator.source``) and predict each masked position's ``top_k`` tokens; the trace
    holds every layer's and head's ``enc_self`` weights (when ``need_weights``) in ``dtype``; ``ablation`` switches
    heads off (checked against the model first)."""
    model = translator.model
    ablation.validate(model.attention_shape())
    labels = translator.source_labels(source)
    positions = mask_positions(source.ids, model.config.mask_id)
    with torch.inference_mode(), keeping_attention(dtype):
        src = torch.tensor([source.ids], device=translator.device)
        hidden, mask, weights = model.encode(src, need_weights, ablation)
        logits = model.predict(hidden[:, positions]) if positions and model.has_predictions else None
        intermediates = Intermediates(attention={"enc_self": weights} if need_weights else {},
                                      masks={"enc_self": mask})
        trace = trace_from_intermediates(intermediates, 0, labels, tgt_tokens=[], dtype=dtype, release=True)
        probabilities = None if logits is None else torch.softmax(logits[0].float(), dim=-1)  # [M, V]
        top = None if probabilities is None else probabilities.topk(min(top_k, probabilities.shape[-1]), dim=-1)
    trace.ablated = ablation.heads(model.attention_shape())
    target = translator.target_tokenizer
    if top is None:
        note = _why_nothing_was_filled(model, positions, target)
        return FillResult(target.decode(source.ids), labels, [], trace=trace, note=note, source_ids=list(source.ids),
                          filled_ids=list(source.ids))
    top_ids, top_probs = top.indices.cpu().numpy(), top.values.double().cpu().numpy()
    predictions = [MaskPrediction(position, [int(i) for i in ids], [target.token(int(i)) for i in ids],
                                  top_probs=[float(p) for p in probs])
                   for position, ids, probs in zip(positions, top_ids, top_probs)]
    filled = list(source.ids)
    for prediction in predictions:
        filled[prediction.position] = prediction.best
    return FillResult(target.decode(filled), labels, predictions, trace=trace, source_ids=list(source.ids),
                      filled_ids=filled)


def _why_nothing_was_filled(model, positions: list[int], tokenizer) -> str:
    if not model.has_predictions:
        return NO_HEAD
    if model.config.mask_id < 0:
        return NO_MASK_TOKEN
    return NO_MASK.format(mask=tokenizer.token(model.config.mask_id))
