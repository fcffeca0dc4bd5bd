"""Which tokens of a plain sentence are masked when no one chose them: 15 % of them, fixed by a hash.

Token i of a sentence of n tokens is masked when ``hash_unit("mask", sentence, i)`` (models/text/splits.py: sha256,
the same on every machine and in every process) is below ``MASK_SHARE``; a sentence none of whose tokens falls below
it has its one token of least hash masked, so every sentence asks for one prediction at least. The same sentence is
masked the same way wherever it appears in a corpus and whatever else the corpus holds. Head importance on a
plain-text corpus of an encoder-only model (models/analysis/encoder_only.py) and the held-out accuracy `attnviz
train --arch encoder-only` reports (models/training/masked_lm.py) read it.
"""

from __future__ import annotations

from .splits import hash_unit

MASK_SHARE = 0.15  # BERT's share of masked tokens


def hashed_mask_positions(sentence: str, count: int, share: float = MASK_SHARE) -> list[int]:
    """The indices among ``count`` tokens of ``sentence`` to mask, ascending (one at least when ``count`` > 0)."""
    if count <= 0:
        return []
    units = [hash_unit("mask", sentence, index) for index in range(count)]
    chosen = [index for index, unit in enumerate(units) if unit < share]
    return chosen or [min(range(count), key=units.__getitem__)]
