"""``PAIRS.tsv``: one ``source<TAB>target`` sentence pair a line, UTF-8 (DESIGN §6).

Blank lines are skipped and each side loses its surrounding whitespace (a stray ``\\r`` or trailing space
is never part of a sentence). Anything else that is not exactly two non-empty sides is a
:class:`DataError` naming the file and line, so a user can fix the corpus instead of reading a traceback.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path

from ..errors import ConfigError, DataError

Pair = tuple[str, str]


def read_pairs(path: str | Path) -> list[Pair]:
    """The sentence pairs of ``path``, in file order."""
    path = Path(path)
    lines = _read_lines(path)
    pairs = []
    for number, line in enumerate(lines, start=1):
        if line.strip():
            pairs.append(_parse_line(path, number, line))
    if not pairs:
        raise DataError(f"{path}: no sentence pairs (the file is empty or holds only blank lines)")
    return pairs


def _read_lines(path: Path) -> list[str]:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise DataError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise DataError(f"{path}: a folder, not a PAIRS.tsv file") from None
    except OSError as error:
        raise DataError(f"{path}: cannot be read ({error.strerror or error})") from None
    if data.startswith(b"\xef\xbb\xbf"):  # a byte-order mark some editors write
        data = data[3:]
    lines = []
    # Decoding line by line is what lets the error say where the bad bytes are.
    for number, raw in enumerate(data.split(b"\n"), start=1):
        try:
            lines.append(raw.decode("utf-8"))
        except UnicodeDecodeError as error:
            raise DataError(f"{path}:{number}: not UTF-8 text (byte 0x{raw[error.start]:02x} "
                            f"at column {error.start + 1})") from None
    return lines


def _parse_line(path: Path, number: int, line: str) -> Pair:
    fields = line.split("\t")
    if len(fields) != 2:
        found = "no TAB" if len(fields) == 1 else f"{len(fields) - 1} TABs"
        raise DataError(f"{path}:{number}: expected source<TAB>target, found {found}")
    source, target = fields[0].strip(), fields[1].strip()
    for side, text in (("source", source), ("target", target)):
        if not text:
            raise DataError(f"{path}:{number}: the {side} side is empty")
    return source, target


def split_pairs(pairs: Sequence[Pair], valid_fraction: float, seed: int = 0) -> tuple[list[Pair], list[Pair]]:
    """``(train, valid)``: a pair goes to validation when a hash of its source text (salted with ``seed``)
    falls below ``valid_fraction``, so a sentence repeated in the corpus never lands on both sides and the
    split does not depend on the file's order. Each side keeps the corpus order.

    The fraction is what each pair's chance is, not an exact count: a tiny corpus may get no validation pair.
    """
    if not 0.0 <= valid_fraction < 1.0:
        raise ConfigError(f"valid_fraction must be in [0, 1); got {valid_fraction}")
    train, valid = [], []
    for pair in pairs:
        (valid if _unit_hash(pair[0], seed) < valid_fraction else train).append(pair)
    return train, valid


def _unit_hash(text: str, seed: int) -> float:
    """A number in [0, 1) fixed by ``text`` and ``seed`` (sha256: Python's ``hash`` changes per process)."""
    digest = hashlib.sha256(f"{seed}\x00{text}".encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") / 2.0**64
