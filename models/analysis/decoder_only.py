"""Contributions of a decoder-only language model (models/nn/decoder_only.py): the prompt and its continuation as
one sequence, read from one teacher-forced forward pass over it.

Layout (docs/ARCHITECTURE.md, Contributions): a prompt of P tokens and a continuation of T tokens are fed as one
sequence of n = P + T − 1 positions (the prompt, then the continuation but its last token); row i of every map is
position i, which predicts the token after it (the prompt's next token for i < P − 1, the continuation's token
i − P + 1 after), and the columns are the n positions, as in the trace's ``dec_self`` ``[heads, n, n]``. The rows
that predict the continuation are the last T; their first P columns are the prompt. So ALTI+'s ``target`` is the
whole sequence's rollout ``[n, n]`` and its ``source`` ``[T, P]`` the prompt's share of each predicted token (the
prompt plays the source's part: Dale et al.'s hallucination signal asks how much of each generated token comes
from the prompt).

Each block is ``y = x + post(Attention(norm(x)))`` (pre-LN, LayerNorm or RMSNorm; ``post`` only with Gemma 2's
sandwich norms). The pre-attention norm acts on each token alone, so token j's term is Σ_h α_ij^h (norm(x_j)
W_V^{g(h)} + b_V^{g(h)}) W_O^h, g(h) the key/value head query head h shares; the post-attention norm is linear
once its input's scale is fixed (as a post-LN block's norm, models/analysis/alti.py), so the terms, the residual
x_i and the output projection's bias still add up to the block's real output.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Iterator, Sequence

import numpy as np
import torch
from torch import Tensor, nn

from ..errors import EmptyInputError
from ..nn.ablation import NO_ABLATION, Ablation
from ..nn.decoder_only import DecoderOnlyLM


def is_decoder_only(model) -> bool:
    return isinstance(model, DecoderOnlyLM)


def sequence_ids(prompt_ids: Sequence[int], output_ids: Sequence[int]) -> tuple[list[int], list[int]]:
    """The positions fed (the prompt, then the continuation but its last token) and the token each one predicts
    (the prompt's tokens but its first, then the continuation)."""
    prompt, output = list(prompt_ids), list(output_ids)
    if not prompt:
        raise EmptyInputError("the prompt has no tokens: a decoder-only model's contributions need one at least")
    return prompt + output[:-1], prompt[1:] + output


@dataclass(frozen=True)
class BlockView:
    """What the decomposition (models/analysis/alti.py ``block_terms``) reads of a decoder-only layer's attention
    block: a pre-LN residual block whose attention has an ``output`` projection, and Gemma 2's ``post_norm``."""

    attention: nn.Module
    norm: nn.Module
    post_norm: nn.Module | None
    pre_norm: bool = True
    residual_scale: float = 1.0


@contextlib.contextmanager
def _noting_layers(model: DecoderOnlyLM) -> Iterator[list[dict]]:
    """While inside, each layer's forward call notes its input ``x`` and the keywords it ran with (rotary
    positions, mask, heads switched off), and its attention's input and output."""
    noted: list[dict] = [{} for _ in model.layers]

    def before(index: int):
        def hook(_module, args, kwargs):
            noted[index].update(x=args[0], rotary=kwargs.get("rotary"), mask=kwargs.get("mask"),
                                heads_off=kwargs.get("heads_off") or ())
        return hook

    def attended(index: int):
        def hook(_module, args, output):
            noted[index].update(normed=args[0], attended=output[0], weights=output[1])
        return hook

    handles = []
    for index, layer in enumerate(model.layers):
        handles.append(layer.register_forward_pre_hook(before(index), with_kwargs=True))
        handles.append(layer.attention.register_forward_hook(attended(index)))
    try:
        yield noted
    finally:
        for handle in handles:
            handle.remove()


@torch.inference_mode()
def capture_sequence(model: DecoderOnlyLM, sequence: Tensor, *,
                     ablation: Ablation = NO_ABLATION) -> tuple[Tensor, dict[tuple[str, int], dict]]:
    """One forward pass over ``sequence`` ``[1, n]`` (every position fed as the decoder's input, no prompt cached):
    the logits ``[1, n, V]`` and per ``("dec_self", layer)`` the block's tensors as ``block_terms`` reads them
    (``x``, ``v`` ``[1, H, n, D]`` (each query head's key/value head's values), ``weights``, ``attended``,
    ``output`` = x + post(attended)), and what re-running the layer needs (``layer``, ``rotary``, ``mask``,
    ``heads_off``)."""
    empty = sequence.new_zeros(1, 0)
    with _noting_layers(model) as noted:
        logits, _ = model(empty, sequence, need_weights=True, ablation=ablation)
    blocks = {}
    for index, (layer, block) in enumerate(zip(model.layers, noted)):
        attention = layer.attention
        values = attention.value(block["normed"])  # [1, n, G·D]
        v = values.view(*values.shape[:2], attention.kv_heads, attention.head_dim).transpose(1, 2)  # [1, G, n, D]
        v = v.repeat_interleave(attention.heads // attention.kv_heads, dim=1)  # [1, H, n, D]
        post = layer.post_attention_norm
        moved = post(block["attended"]) if post is not None else block["attended"]
        blocks[("dec_self", index)] = dict(
            block, sublayer=BlockView(attention, layer.attention_norm, post), v=v, output=block["x"] + moved,
            layer=layer, bias=None, weights=block["weights"].float())
    return logits, blocks


def rerun_layer(block: dict):
    """The layer of a captured block run again from an input ``[J, n, E]`` with the pass's positions, mask and
    heads switched off: its output ``[J, n, E]``."""
    def run(x: Tensor) -> Tensor:
        return block["layer"](x, rotary=block["rotary"], mask=block["mask"], cache=None, need_weights=False,
                              heads_off=block["heads_off"])[0]
    return run


def zeroing_layers(captured, zeroing_map) -> list[tuple[np.ndarray, np.ndarray]]:
    """Value zeroing of each layer of a decoder-only pass: ``zeroing_map(run, x, value, keys=n)`` per layer (the
    value projection of a key/value head serves every query head of its group, so zeroing a token's value zeroes
    it in every head)."""
    found = []
    for index, layer in enumerate(captured.model.layers):
        block = captured.blocks[("dec_self", index)]
        found.append(zeroing_map(rerun_layer(block), block["x"], layer.attention.value,
                                 keys=captured.tgt_in.shape[1]))
    return found


def prediction_maps(name: str, sequence_map: np.ndarray, prompt_len: int, **fields) -> dict:
    """A whole-model map ``[n, n]`` of a decoder-only model as a ``ContributionMaps``' fields: the map itself as
    the one ``dec_self`` layer and ``target``, and its continuation rows' prompt columns as ``source``."""
    return dict(method=name, per_head=False, layers={"dec_self": [sequence_map]},
                source=np.ascontiguousarray(sequence_map[prompt_len - 1:, :prompt_len]), target=sequence_map,
                prompt_len=prompt_len, **fields)
