"""Sentence pairs: ``PAIRS.tsv`` files, train/validation splits, and the token-id batches training reads.

``PAIRS.tsv`` holds one ``source<TAB>target`` sentence pair a line, UTF-8 (the format `attnviz train`
and `attnviz evaluate` read).

Blank lines are skipped and each side loses its surrounding whitespace (a stray ``\\r`` or trailing space
is never part of a sentence). Anything else that is not exactly two non-empty sides is a
:class:`DataError` naming the file and line, so a user can fix the corpus instead of reading a traceback.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor

from ..nn.config import ModelConfig
from ..errors import ConfigError, DataError, InputError
from .tokenizers import Tokenizer

Pair = tuple[str, str]
Example = tuple[list[int], list[int]]  # source ids (with the end token when configured), target ids
BUCKET_BATCHES = 32  # batches' worth of pairs sorted by length together


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
    return decode_lines(data, str(path))


def decode_lines(data: bytes, name: str, encoding: str = "utf-8") -> list[str]:
    """``data`` as lines of text, without their line ends (``\\n`` or Windows' ``\\r\\n``). Bytes that are not
    ``encoding`` are a :class:`DataError` naming ``name``, the line and the column."""
    if encoding.replace("-", "").replace("_", "").lower() not in ("utf8", "utf8sig"):
        try:
            return data.decode(encoding).splitlines()
        except UnicodeDecodeError as error:
            raise DataError(f"{name}: not {encoding} text (byte 0x{data[error.start]:02x} at offset "
                            f"{error.start})") from None
    if data.startswith(b"\xef\xbb\xbf"):  # a byte-order mark some editors write
        data = data[3:]
    lines = []
    # Decoding line by line is what lets the error say where the bad bytes are.
    for number, raw in enumerate(data.split(b"\n"), start=1):
        try:
            lines.append(raw.decode("utf-8").removesuffix("\r"))
        except UnicodeDecodeError as error:
            raise DataError(f"{name}:{number}: not UTF-8 text (byte 0x{raw[error.start]:02x} "
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
    """``(train, valid)``: a pair goes to validation when a hash of its source text (and ``seed``)
    falls below ``valid_fraction``, so a sentence repeated in the corpus never lands on both sides and the
    split does not depend on the file's order. Each side keeps the corpus order.

    The fraction is what each pair's chance is, not an exact count: a tiny corpus may get no validation pair.
    """
    if not 0.0 <= valid_fraction < 1.0:
        raise ConfigError(f"valid_fraction must be in [0, 1); got {valid_fraction}")
    train, valid = [], []
    for pair in pairs:
        (valid if derived_seed(seed, "split", pair[0]) / 2.0**63 < valid_fraction else train).append(pair)
    return train, valid


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


def derived_seed(seed: int, *parts: object) -> int:
    """A 63-bit number for one purpose (the split of a sentence, the data order of an epoch, the dropout of
    a rank) derived from ``seed``; sha256, because Python's ``hash`` of a string changes per process."""
    digest = hashlib.sha256(":".join(str(part) for part in (seed, *parts)).encode()).digest()
    return int.from_bytes(digest[:8], "big") >> 1


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


class BatchStream:
    """Global batches, each exactly ``batch_size`` pair indices (an epoch's last batch wraps around to its
    start). Epoch e: a permutation seeded by ``(seed, e)``, sorted by length within buckets of
    ``BUCKET_BATCHES`` batches, cut into batches, batches shuffled."""

    def __init__(self, lengths: list[int], batch_size: int, seed: int, epoch: int = 0, index: int = 0):
        self.lengths, self.batch_size, self.seed = lengths, batch_size, seed
        self.epoch, self.index = epoch, index
        self._batches = self._epoch_batches(epoch)

    def next(self) -> list[int]:
        if self.index == len(self._batches):
            self.epoch, self.index = self.epoch + 1, 0
            self._batches = self._epoch_batches(self.epoch)
        self.index += 1
        return self._batches[self.index - 1]

    def position(self) -> dict[str, int]:
        return {"epoch": self.epoch, "index": self.index}

    def _epoch_batches(self, epoch: int) -> list[list[int]]:
        generator = torch.Generator().manual_seed(derived_seed(self.seed, "data", epoch))
        order = torch.randperm(len(self.lengths), generator=generator).tolist()
        needed = math.ceil(len(order) / self.batch_size) * self.batch_size
        order = (order * math.ceil(needed / len(order)))[:needed]
        batches = []
        for start in range(0, needed, self.batch_size * BUCKET_BATCHES):
            bucket = sorted(order[start: start + self.batch_size * BUCKET_BATCHES], key=self.lengths.__getitem__)
            batches += [bucket[i: i + self.batch_size] for i in range(0, len(bucket), self.batch_size)]
        return [batches[i] for i in torch.randperm(len(batches), generator=generator).tolist()]
