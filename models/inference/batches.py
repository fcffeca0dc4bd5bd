"""Teacher-forced batches: sentence pairs as token ids cut to the model's length, padded into the tensors a
model is fed (the decoder input is the start token and the target, the expected output the target and the end
token). Training, head statistics and scoring read them.

A decoder-only model reads the same batch as one sequence, ``cat(src, tgt_in)``: the prompt (the source's
tokens), the separator (its start token ``bos_id``), the target; it is scored on ``tgt_out`` (the target and the
end token) at the separator's and the target's positions only, never on predicting the prompt. Right padding
inside that sequence (after a shorter prompt) is masked and takes no position (models/nn/decoder_only.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from ..errors import DataError, InputError
from ..nn.config import DecoderOnlyConfig, ModelConfig
from ..text.pairs import Pair
from ..text.tokenizers import Tokenizer

Example = tuple[list[int], list[int]]  # source ids (with the end token when configured), target ids


def encode_pairs(pairs: Sequence[Pair], source: Tokenizer, target: Tokenizer, model_config: ModelConfig,
                 name: str) -> list[Example]:
    """Token ids of every pair, cut so the encoder input and the decoder input fit ``max_len`` (a decoder-only
    model's whole sequence: ``cut_sequence``)."""
    limit = model_config.max_len
    examples = []
    for number, (source_text, target_text) in enumerate(pairs, start=1):
        try:
            source_ids = source.encode(source_text, unknown="replace")
            target_ids = target.encode(target_text, unknown="replace")
        except InputError as error:
            raise DataError(f"{name} pair {number}: {error}") from None
        if isinstance(model_config, DecoderOnlyConfig):
            end = [model_config.eos_id] if model_config.src_append_eos else []
            source_ids, target_ids = cut_sequence(source_ids, target_ids, limit - len(end))
            examples.append((source_ids + end, target_ids))
            continue
        if model_config.src_append_eos:
            source_ids = source_ids[: limit - 1] + [model_config.eos_id]
        examples.append((source_ids[:limit], target_ids[: limit - 1]))  # decoder input = start + target
    return examples


def cut_sequence(source_ids: list[int], target_ids: list[int], limit: int) -> Example:
    """A decoder-only pair cut so that prompt, separator and target fill at most ``limit`` positions: the prompt
    keeps at least half of them when both sides must give way, the target the rest."""
    room = limit - 1  # the separator's position
    source_ids = source_ids[: max(room - len(target_ids), room // 2)]
    return source_ids, target_ids[: room - len(source_ids)]


def sequence_length(example: Example, model_config: ModelConfig) -> int:
    """The positions a model reads for ``example``: a decoder-only model its prompt, separator and target in one
    sequence, an encoder-decoder model the longer of its two inputs."""
    source_ids, target_ids = example
    if isinstance(model_config, DecoderOnlyConfig):
        return len(source_ids) + 1 + len(target_ids)
    return max(len(source_ids), len(target_ids) + 1)


@dataclass
class Batch:
    """Padded tensors: src ``[B, S]``, tgt_in ``[B, T]`` (start token + target), tgt_out ``[B, T]``
    (target + end token, padding ignored by the loss); ``tokens`` counts non-padding tgt_out cells."""

    src: Tensor
    tgt_in: Tensor
    tgt_out: Tensor
    tokens: int


def collate(examples: Sequence[Example], model_config: ModelConfig, device: torch.device) -> Batch:
    """Pad the examples into one batch (right padding)."""
    pad, bos, eos = model_config.pad_id, model_config.bos_id, model_config.eos_id

    def padded(rows: list[list[int]]) -> Tensor:
        width = max(len(row) for row in rows)
        return torch.tensor([row + [pad] * (width - len(row)) for row in rows], dtype=torch.long, device=device)

    targets = [target for _, target in examples]
    return Batch(padded([source for source, _ in examples]), padded([[bos] + t for t in targets]),
                 tgt_out=padded([t + [eos] for t in targets]), tokens=sum(len(t) + 1 for t in targets))
