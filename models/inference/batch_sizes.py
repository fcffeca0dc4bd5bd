"""How a corpus is cut into batches for decoding (models/inference/corpus.py): by length, bounded by tokens and by
sentences. No torch: the command line's options read the defaults before any model is loaded."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

DEFAULT_BATCH_TOKENS = 8192  # a base-sized Transformer's batch of 64 sentences of 30 tokens at beam 4: ~0.5 GB
DEFAULT_BATCH_SIZE = 64


@dataclass(frozen=True)
class Batching:
    """How a corpus is cut into batches: at most ``tokens`` (rows × longest source) and ``size`` sentences a batch,
    sorted by length within windows of ``window`` inputs."""

    tokens: int = DEFAULT_BATCH_TOKENS
    size: int = DEFAULT_BATCH_SIZE
    window: int = 1024


ONE_AT_A_TIME = Batching(size=1)


def length_batches(lengths: Sequence[int], batching: Batching = Batching(), *, rows: int = 1) -> list[list[int]]:
    """The indices of ``lengths`` as batches, shortest first: each at most ``batching.size`` sentences and
    ``batching.tokens`` tokens, a sentence of ``rows`` rows (a beam's width) counting ``rows`` × the batch's longest;
    a sentence too long for the bound alone is a batch of its own."""
    batches: list[list[int]] = []
    current: list[int] = []
    for index in sorted(range(len(lengths)), key=lambda index: (lengths[index], index)):
        longest = max(lengths[index], 1)  # sorted: the newcomer is the longest
        if current and (len(current) >= batching.size or (len(current) + 1) * rows * longest > batching.tokens):
            batches.append(current)
            current = []
        current.append(index)
    return batches + ([current] if current else [])
