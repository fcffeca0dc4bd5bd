"""Sentence pairs: ``PAIRS.tsv`` files (how a corpus is split: :mod:`models.text.splits`; the token-id batches
models are fed: :mod:`models.inference.batches`).

``PAIRS.tsv`` holds one ``source<TAB>target`` sentence pair a line, UTF-8 (the format `attnviz train`
and `attnviz evaluate` read).

Blank lines are skipped and each side loses its surrounding whitespace (a stray ``\\r`` or trailing space
is never part of a sentence). Anything else that is not exactly two non-empty sides is a
:class:`DataError` naming the file and line, so a user can fix the corpus instead of reading a traceback.
"""

from __future__ import annotations

from pathlib import Path

from ..errors import DataError

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
    return decode_lines(data, str(path))


def decode_lines(data: bytes, name: str, encoding: str = "utf-8") -> list[str]:
    """``data`` as lines of text, without their line ends (``\\n`` or Windows' ``\\r\\n``). Bytes that are not
    ``encoding`` are a :class:`DataError` naming ``name``, the line and the column."""
    lines, bad = decode_each_line(data, name, encoding)
    if bad:
        raise DataError(next(iter(bad.values())))
    return lines  # type: ignore[return-value]


def decode_each_line(data: bytes, name: str, encoding: str = "utf-8") -> tuple[list[str | None], dict[int, str]]:
    """``data`` as lines of text, as :func:`decode_lines` reads them, but a UTF-8 line with bytes that are not UTF-8
    is None, its error (naming ``name``, the line and the column) kept by line number: the other lines stand. In
    another encoding bad bytes are one :class:`DataError`."""
    if encoding.replace("-", "").replace("_", "").lower() not in ("utf8", "utf8sig"):
        try:
            return data.decode(encoding).splitlines(), {}
        except UnicodeDecodeError as error:
            raise DataError(f"{name}: not {encoding} text (byte 0x{data[error.start]:02x} at offset "
                            f"{error.start})") from None
    if data.startswith(b"\xef\xbb\xbf"):  # a byte-order mark some editors write
        data = data[3:]
    lines: list[str | None] = []
    bad: dict[int, str] = {}
    # Decoding line by line is what lets the error say where the bad bytes are.
    for number, raw in enumerate(data.split(b"\n"), start=1):
        try:
            lines.append(raw.decode("utf-8").removesuffix("\r"))
        except UnicodeDecodeError as error:
            lines.append(None)
            bad[number] = f"{name}:{number}: not UTF-8 text (byte 0x{raw[error.start]:02x} at column {error.start + 1})"
    return lines, bad


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
