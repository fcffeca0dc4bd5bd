"""Training corpora: ``PAIRS.tsv`` files, train/validation splits, and the batches training reads."""

from __future__ import annotations

from .pairs import Batch, BatchStream, Example, Pair, collate, encode_pairs, read_pairs, split_pairs

__all__ = ["Batch", "BatchStream", "Example", "Pair", "collate", "encode_pairs", "read_pairs", "split_pairs"]
