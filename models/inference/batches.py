"""Teacher-forced batches: sentence pairs as token ids cut to the model's length, padded into the tensors a
model is fed (the decoder input is the start token and the target, the expected output the target and the end
token). Training, head statistics and scoring read them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from ..errors import DataError, InputError
from ..nn.config import ModelConfig
from ..text.pairs import Pair
from ..text.tokenizers import Tokenizer

Example = tuple[list[int], list[int]]  # source ids (with the end token when configured), target ids


def encode_pairs(pairs: Sequence[Pair], source: Tokenizer, target: Tokenizer, model_config: ModelConfig,
                 name: str) -> list[Example]:
    """Token ids of every pair, cut so the encoder input and the decoder input fit ``max_len``."""
    limit = model_config.max_len
    examples = []
    for number, (source_text, target_text) in enumerate(pairs, start=1):
        try:
            source_ids = source.encode(source_text, unknown="replace")
            target_ids = target.encode(target_text, unknown="replace")
        except InputError as error:
            raise DataError(f"{name} pair {number}: {error}") from None
        if model_config.src_append_eos:
            source_ids = source_ids[: limit - 1] + [model_config.eos_id]
        examples.append((source_ids[:limit], target_ids[: limit - 1]))  # decoder input = start + target
    return examples


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
