"""Training corpora: reading ``PAIRS.tsv`` files and splitting them into training and validation sets."""

from __future__ import annotations

from .pairs import Pair, read_pairs, split_pairs

__all__ = ["Pair", "read_pairs", "split_pairs"]
