"""How a corpus is split, by one rule: a sha256 hash of a key (Python's ``hash`` of a string changes per process),
so an item lands on the same side whatever else the corpus holds and whatever its order. `attnviz train`'s
validation split hashes each pair's source with the seed; the demos' corpus scripts hash a verse's reference
or a word into train, valid and test. The same hash derives the seeds of training's data order and dropout.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from ..errors import ConfigError
from .pairs import Pair

SPLITS = ("train", "valid", "test")


def _hash64(parts: tuple[object, ...]) -> int:
    digest = hashlib.sha256(":".join(str(part) for part in parts).encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big")


def hash_unit(*parts: object) -> float:
    """A number in [0, 1) fixed by ``parts`` alone (joined by ``:``)."""
    return _hash64(parts) / 2.0**64


def derived_seed(seed: int, *parts: object) -> int:
    """A 63-bit number for one purpose (the split of a sentence, the data order of an epoch, the dropout of
    a rank) derived from ``seed``."""
    return _hash64((seed, *parts)) >> 1


def split_of(key: str, valid_share: float, test_share: float) -> str:
    """``"train"``, ``"valid"`` or ``"test"``, fixed by ``key`` alone: the first ``test_share`` of the unit
    interval is test, the next ``valid_share`` valid."""
    unit = hash_unit(key)
    if unit < test_share:
        return "test"
    return "valid" if unit < test_share + valid_share else "train"


def split_pairs(pairs: Sequence[Pair], valid_fraction: float, seed: int = 0) -> tuple[list[Pair], list[Pair]]:
    """``(train, valid)``: a pair goes to validation when a hash of its source text (and ``seed``)
    falls below ``valid_fraction``, so a sentence repeated in the corpus never lands on both sides and the
    split does not depend on the file's order. Each side keeps the corpus order.

    The fraction is what each pair's chance is, not an exact count: a tiny corpus may get no validation pair.
    """
    if not 0.0 <= valid_fraction < 1.0:
        raise ConfigError(f"valid_fraction must be in [0, 1); got {valid_fraction}")
    train, valid = [], []
    for pair in pairs:
        (valid if hash_unit(seed, "split", pair[0]) < valid_fraction else train).append(pair)
    return train, valid
