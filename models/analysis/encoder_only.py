"""Analysis of an encoder-only model (BERT, RoBERTa, DistilBERT: models/nn/encoder_only.py): its one attention kind
``enc_self`` over the sentence, and the predictions of its masked-language-model head at the mask positions.

What is scored (head importance by NLL, pruning curves): the masked tokens' negative log-likelihood. A corpus line
is either ``a sentence with masks<TAB>the filled sentence`` (the same tokens but at the masks, whose filled tokens
are the answers) or a plain sentence, of which 15 % of the tokens (the framing ``[CLS]``/``[SEP]``, ``<s>``/``</s>``
never) are masked by a hash of the sentence (models/text/masking.py: the same tokens every run, on every machine).

Contributions (docs/ARCHITECTURE.md, Contributions): the sentence's positions are both the rows and the columns
(``enc_self`` ``[S, S]`` per layer). Each layer's attention block is the post-LN ``LN(x + Attention(x))`` of the
encoder-decoder Transformer (models/analysis/alti.py decomposes it as an encoder block), so ALTI+ rolls the blocks
out over the sentence: ``source`` ``[S, S]`` is each position's final representation split over the sentence's
tokens (each row sums to 1). The gradient methods attribute, for each mask position m, the log-probability of its
most likely token (or the token ``output_ids`` names) to the token embeddings of the sentence: ``source``
``[M, S]``, one row per mask.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import torch
from torch import Tensor

from ..errors import InputError
from ..nn.ablation import NO_ABLATION, Ablation
from ..nn.encoder_only import EncoderOnlyModel
from ..nn.intermediates import noting_blocks, to_numpy
from ..text.masking import hashed_mask_positions

NO_MASKS = "an encoder-only model's gradients attribute the predictions at its mask positions: the sentence has none"


def is_encoder_only(model) -> bool:
    return isinstance(model, EncoderOnlyModel)


def framing(config) -> set[int]:
    """The ids that frame a sentence or pad it, never masked by hash nor scored."""
    return {config.pad_id, config.bos_id, config.eos_id}


def masked_pair(config, masked_ids: Sequence[int], filled_ids: Sequence[int], *, sentence: str,
                number: int) -> tuple[list[int], list[int], list[int]]:
    """One corpus line as the model reads it: the input ids (with mask tokens), the answer at every position
    (the filled sentence's ids) and the positions scored. A line whose two sides are one plain sentence is masked
    by hash (15 %, models/text/masking.py); a sentence with masks must match its filled sentence token for token
    elsewhere (one line naming the pair otherwise)."""
    masked_ids, filled_ids = list(masked_ids), list(filled_ids)
    if config.mask_id < 0:
        raise InputError("this model has no mask token: the masked tokens' NLL needs one")
    marked = [index for index, token in enumerate(masked_ids) if token == config.mask_id]
    if not marked:
        if masked_ids != filled_ids:
            raise InputError(f"pair {number}: the sentence has no mask token and is not its filled sentence; a line "
                             f"is a sentence with masks<TAB>the filled sentence, or one plain sentence")
        candidates = [index for index, token in enumerate(masked_ids) if token not in framing(config)]
        if not candidates:
            raise InputError(f"pair {number}: the sentence has no token to mask")
        marked = [candidates[i] for i in hashed_mask_positions(sentence, len(candidates))]
        masked_ids = [config.mask_id if index in marked else token for index, token in enumerate(masked_ids)]
        return masked_ids, filled_ids, marked
    if len(filled_ids) != len(masked_ids) or any(a != b for index, (a, b) in enumerate(zip(masked_ids, filled_ids))
                                                 if index not in marked):
        raise InputError(f"pair {number}: the filled sentence must be the masked one with each mask replaced by one "
                         f"token ({len(masked_ids)} tokens with masks, {len(filled_ids)} filled)")
    return masked_ids, filled_ids, marked


def masked_corpus(lines: Sequence[str]) -> list[tuple[str, str]]:
    """Corpus lines as pairs: ``masked<TAB>filled`` as they are, a plain sentence as itself twice (masked by hash
    when it is read: :func:`masked_pair`)."""
    pairs = []
    for line in lines:
        if not line.strip():
            continue
        masked, tab, filled = line.partition("\t")
        pairs.append((masked.strip(), filled.strip()) if tab else (line.strip(), line.strip()))
    return pairs


# ---------------------------------------------------------------------------------------------- the traced pass


@torch.inference_mode()
def capture_sentence(model: EncoderOnlyModel, src: Tensor, *,
                     ablation: Ablation = NO_ABLATION) -> tuple[Tensor, dict[tuple[str, int], dict]]:
    """One pass over the sentence ``[1, S]``: the masked-language-model logits ``[1, S, V]`` (the final hidden
    states ``[1, S, E]`` for a model without the head) and per ``("enc_self", layer)`` the block's noted tensors
    (models/nn/intermediates.py ``note_block``) with ``heads_off`` and the ``layer`` itself."""
    with noting_blocks() as noted:
        hidden, _, _ = model.encode(src, True, ablation)
    names = {id(layer.self_attention): index for index, layer in enumerate(model.layers)}
    blocks = {}
    for block in noted:
        index = names.get(id(block["sublayer"]))
        if index is not None:
            block["heads_off"] = ablation.heads_off("enc_self", index, model.config.heads)
            block["layer"] = model.layers[index]
            blocks[("enc_self", index)] = block
    logits = model.predict(hidden) if model.has_predictions else hidden
    return logits, blocks


def zeroing_layers(captured, zeroing_map) -> list[tuple[np.ndarray, np.ndarray]]:
    """Value zeroing of each encoder layer: its block run again from its captured input with each token's value
    zeroed in every head (``zeroing_map(run, x, value, keys=S)``), the pass's heads switched off kept off."""
    found = []
    for index, layer in enumerate(captured.model.layers):
        block = captured.blocks[("enc_self", index)]

        def run(x: Tensor, layer=layer, block=block) -> Tensor:
            return layer(x, block["mask"], need_weights=False, heads_off=block["heads_off"])[0]

        found.append(zeroing_map(run, block["x"], layer.self_attention.attention.value,
                                 keys=captured.src_ids.shape[1]))
    return found


def sentence_maps(name: str, whole: np.ndarray, **fields) -> dict:
    """A gradient method's map of an encoder-only model ``[M, S]`` as a ``ContributionMaps``' fields: the one
    ``enc_self`` map and the whole model's ``source``."""
    return dict(method=name, per_head=False, layers={"enc_self": [whole]}, source=whole, **fields)


# ---------------------------------------------------------------------------------------------- gradients


def nothing_to_attribute(model, src_ids: Sequence[int], method: str) -> bool:
    """Whether ``method`` is a gradient method and ``model`` an encoder-only one whose sentence has no mask, or that
    has no masked-language-model head (its gradients attribute the mask positions' predictions: there is none)."""
    from .catalogue import INPUT_X_GRADIENT, INTEGRATED_GRADIENTS

    return (is_encoder_only(model) and method in (INPUT_X_GRADIENT, INTEGRATED_GRADIENTS)
            and (model.config.mask_id not in list(src_ids) or not model.has_predictions))


def predicted_rows(model: EncoderOnlyModel, src_ids: Sequence[int], output_ids: Sequence[int]) -> tuple[list[int],
                                                                                                    list[int]]:
    """The mask positions of the sentence and the token whose log-probability each one attributes: ``output_ids``
    (one per mask) where given, else the model's most likely token there."""
    from ..inference.fill_mask import mask_positions

    positions = mask_positions(list(src_ids), model.config.mask_id)
    if not positions:
        raise InputError(NO_MASKS)
    if output_ids:
        if len(output_ids) != len(positions):
            raise InputError(f"{len(output_ids)} tokens to attribute for {len(positions)} masks")
        return positions, list(output_ids)
    device = next(model.parameters()).device
    with torch.inference_mode():
        hidden, _, _ = model.encode(torch.tensor([list(src_ids)], device=device), False)
        best = model.predict(hidden[:, positions])[0].argmax(dim=-1)
    return positions, [int(token) for token in best]


def masked_log_probs(model: EncoderOnlyModel, src: Tensor, positions: Tensor, *, tokens: Tensor,
                     ablation: Ablation = NO_ABLATION) -> Tensor:
    """``[copies]``: log p(tokens[c]) at ``positions[c]`` in copy c of ``src`` ``[copies, S]``."""
    hidden, _, _ = model.encode(src, False, ablation)
    rows = torch.arange(src.shape[0], device=src.device)
    logits = model.predict(hidden[rows, positions][:, None])[:, 0]  # [copies, V]
    return torch.log_softmax(logits.float(), dim=-1).gather(1, tokens[:, None])[:, 0]


def to_maps(attributions: Tensor) -> np.ndarray:
    """Attributions ``[M, S, E]`` → their L2 norms ``[M, S]``."""
    return to_numpy(attributions.norm(dim=-1).float())


# ---------------------------------------------------------------------------------------------- the masked tokens' NLL


def encode_masked(translator, pairs: Sequence[tuple[str, str]]) -> tuple[list[tuple[list[int], list[int], int]], int]:
    """Per corpus line (:func:`masked_corpus`) the input ids, the answers (the filled sentence's ids) and 0 (as
    models/analysis/importance.py's ``Encoded``), and how many lines have characters the vocabulary lacks."""
    encoded, unknown = [], 0
    for number, (masked_text, filled_text) in enumerate(pairs, start=1):
        masked, filled = translator.source(masked_text), translator.source(filled_text)
        ids, answers, _ = masked_pair(translator.config, masked.ids, filled.ids, sentence=filled_text, number=number)
        encoded.append((ids, answers, 0))
        unknown += bool(masked.unknown or filled.unknown)
    return encoded, unknown


def padded_masked(encoded, config, device) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Encoded lines as one batch for the NLL (the fields of models/analysis/importance.py's ``ForcedPairs``):
    ``src`` the inputs ``[P, S]``, ``tgt_in`` empty ``[P, 0]``, ``tgt_out`` the answers and ``scored`` the mask
    positions ``[P, S]``."""
    width = max(len(ids) for ids, _, _ in encoded)
    src = torch.tensor([ids + [config.pad_id] * (width - len(ids)) for ids, _, _ in encoded], device=device)
    answers = torch.tensor([ids + [config.pad_id] * (width - len(ids)) for _, ids, _ in encoded], device=device)
    return src, src[:, :0], answers, src == config.mask_id


def mask_coverage(alti_maps, src_ids: Sequence[int], mask_id: int) -> tuple[float, float, int]:
    """ALTI+'s answer for a sentence with masks, as the fields of a ``SourceCoverage``: ``avg_source`` the mean
    over the mask positions of the share of their final representation that comes from the other tokens (the
    context; the rest is the mask token's own, which says nothing), ``min_source_token`` the smallest total any
    one token gives to the mask positions, ``least_covered`` that token."""
    from ..inference.fill_mask import mask_positions

    positions = mask_positions(list(src_ids), mask_id)
    if not positions:
        raise InputError("the sentence has no mask token: ALTI+ of an encoder-only model reads the mask positions")
    rows = alti_maps.source[positions]  # [M, S]
    context = 1.0 - rows[np.arange(len(positions)), positions]
    totals = rows.sum(axis=0)
    least = int(np.argmin(totals))
    return float(context.mean()), float(totals[least]), least
