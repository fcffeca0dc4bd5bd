"""The neuron view's numbers: how each head of a Transformer computes its attention weights, from the query and key
vectors to the softmax (models/trace/vectors.py says how they combine).

One teacher-forced pass, the one the contributions trace (``contributions.capture_forward``, or for an encoder-only
model its encoder inside ``noting_blocks``), laid out as the run's trace. Each attention sublayer noted its input,
key vectors, mask, bias and weights; the query vectors are its query projection of the input it attended from.
Decoder-only models: the queries and keys as ``GroupedAttention.queries_keys`` gives them (normalised per head
where the model does, after rotary positions), a grouped-query model's key vectors repeated for each query head
of their group; the scale ``1/√query_scalar``, Gemma 2's soft-cap and sliding windows (in the mask) as the layer
ran.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np
import torch

from ..errors import InputError
from ..nn.ablation import NO_ABLATION, Ablation
from ..nn.base import Seq2Seq
from ..nn.intermediates import noting_blocks, to_numpy
from ..trace.vectors import LayerVectors, NeuronVectors
from . import decoder_only
from .contributions import _evaluating, capture_forward

NOT_TRANSFORMER = ("the neuron view shows a Transformer head's query and key vectors; a GRU model's attention "
                   "scores its decoder's recurrent state against the encoder's annotations instead")


class NeuronError(InputError):
    """A model without a neuron view (one line saying why)."""


def unavailable(model: Seq2Seq) -> str | None:
    """One line saying why ``model`` has no neuron view, or None."""
    if decoder_only.is_decoder_only(model) or _is_encoder_only(model):
        return None
    if getattr(model, "encoder_layers", None) is not None and getattr(model, "decoder_layers", None) is not None:
        return None
    return NOT_TRANSFORMER


def neuron_vectors(model: Seq2Seq, src_ids: Sequence[int], output_ids: Sequence[int] = (), *,
                   ablation: Ablation = NO_ABLATION) -> NeuronVectors:
    """Every kind's and layer's ``LayerVectors`` for the run of ``src_ids`` that gave ``output_ids`` (a
    decoder-only model's source ids are its prompt; an encoder-only model's output ids are not read)."""
    reason = unavailable(model)
    if reason is not None:
        raise NeuronError(reason)
    if _is_encoder_only(model):
        return NeuronVectors({"enc_self": _encoder_only(model, src_ids, ablation)})
    captured = capture_forward(model, src_ids, output_ids, ablation=ablation)
    if decoder_only.is_decoder_only(model):
        layers = [_grouped_layer(captured.blocks[("dec_self", index)]) for index in range(len(model.layers))]
        return NeuronVectors({"dec_self": layers}, rotated=model.inverse_frequencies is not None)
    found: dict[str, list[LayerVectors]] = {}
    for (kind, layer), block in sorted(captured.blocks.items(), key=lambda item: (item[0][0], item[0][1])):
        found.setdefault(kind, []).append(_sublayer_vectors(block))
    return NeuronVectors({kind: found[kind] for kind in model.kinds if kind in found})


def _is_encoder_only(model: Seq2Seq) -> bool:
    return getattr(model, "decodes", True) is False


def _encoder_only(model: Seq2Seq, src_ids: Sequence[int], ablation: Ablation) -> list[LayerVectors]:
    device = next(model.parameters()).device
    src = torch.tensor([list(src_ids)], dtype=torch.long, device=device)
    with _evaluating(model), torch.inference_mode(), noting_blocks() as noted:
        model.encode(src, need_weights=True, ablation=ablation)
    order = {id(layer.self_attention): index for index, layer in enumerate(model.layers)}
    blocks = sorted((block for block in noted if id(block["sublayer"]) in order),
                    key=lambda block: order[id(block["sublayer"])])
    return [_sublayer_vectors(block) for block in blocks]


def _mask(mask: torch.Tensor | None, weights: torch.Tensor) -> np.ndarray:
    """A noted mask (broadcastable to ``[1, 1, Q, K]``, None: every key) as ``[Q, K]`` bool."""
    shape = weights.shape[-2:]
    if mask is None:
        return np.ones(tuple(shape), dtype=bool)
    return mask[0].reshape(-1, *mask.shape[-2:])[0].expand(*shape).cpu().numpy().copy()


@torch.inference_mode()
def _sublayer_vectors(block: dict) -> LayerVectors:
    """An encoder-decoder or encoder-only attention sublayer (models/nn/transformer.py ``AttentionSublayer``)."""
    sublayer = block["sublayer"]
    attention = sublayer.attention
    normed = sublayer.norm(block["x"]) if sublayer.pre_norm else block["x"]
    q = attention.split_heads(attention.query(normed))[0]  # [H, Q, D]
    weights = block["weights"][0]
    bias = block.get("bias")
    return LayerVectors(query=to_numpy(q), key=to_numpy(block["k"][0]),
                        scale=1.0 / math.sqrt(attention.head_dim) if attention.scale else 1.0,
                        mask=_mask(block["mask"], weights), weights=to_numpy(weights),
                        bias=None if bias is None else to_numpy(bias[0].expand(weights.shape)))


@torch.inference_mode()
def _grouped_layer(block: dict) -> LayerVectors:
    """A decoder-only layer (models/nn/decoder_only.py ``GroupedAttention``), as the traced pass ran it."""
    attention = block["layer"].attention
    q, k = attention.queries_keys(block["normed"][:1], rotary=_first_row(block["rotary"]))
    k = k.repeat_interleave(attention.heads // attention.kv_heads, dim=1)  # [1, H, K, D]
    weights = block["weights"][0]
    return LayerVectors(query=to_numpy(q[0]), key=to_numpy(k[0]), scale=float(attention.scaling),
                        mask=_mask(block["mask"], weights), weights=to_numpy(weights),
                        softcap=float(attention.softcap or 0.0), rotated=block["rotary"] is not None)


def _first_row(rotary):
    return None if rotary is None else tuple(part[:1] for part in rotary)


def reproduction_error(vectors: NeuronVectors) -> float:
    """The largest difference between the weights the model computed and those the vectors give."""
    return max((float(np.abs(layer.reproduced() - layer.weights).max(initial=0.0))
                for layers in vectors.layers.values() for layer in layers), default=0.0)
