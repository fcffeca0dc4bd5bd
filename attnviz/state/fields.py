"""A checkpoint's nested fields (its provenance: how it was trained or imported) as rows a reader scans, and its
tokenizers as lines: the window's Model panel and ``attnviz info`` show them the same way."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Mapping


# A model that reads and writes one sequence through one tokenizer, and what that sequence is (an encoder-decoder
# model has a source and a target tokenizer; these keep the same one on both sides).
ONE_TOKENIZER = {"decoder-only": "prompt and continuation", "encoder-only": "the sentence and its filled masks"}


def tokenizer_lines(arch: str, source: str, target: str) -> list[tuple[str, str]]:
    """``(label, text)`` per tokenizer the model has: ``tokenizer`` once for a decoder-only or encoder-only model
    (the text saying what it reads), ``source`` and ``target`` for the others."""
    if arch in ONE_TOKENIZER:
        return [("tokenizer", f"{source} ({ONE_TOKENIZER[arch]})")]
    return [("source", source), ("target", target)]


@dataclass(frozen=True)
class FieldRow:
    depth: int  # 0 for a top-level entry, one more per map it lies in
    key: str
    value: str | None  # None: a heading, its map's entries follow one level deeper


def field_rows(fields: Mapping[str, Any], depth: int = 0) -> list[FieldRow]:
    """One row per entry; a nested map as a heading followed by its own entries, an empty one not at all (a
    format with nothing of its own to say shows no ``details``)."""
    rows = []
    for key, value in fields.items():
        if isinstance(value, Mapping):
            if value:
                rows.append(FieldRow(depth, str(key), None))
                rows += field_rows(value, depth + 1)
            continue
        rows.append(FieldRow(depth, str(key), value_text(value)))
    return rows


def value_text(value: Any) -> str:
    """A field's value as text: a metric's sixteen digits as six, a list as JSON, anything else as itself."""
    if isinstance(value, float) and len(str(value)) > 10:
        return f"{value:.6g}"
    if isinstance(value, (list, tuple)):
        return json.dumps(list(value), ensure_ascii=False)
    return str(value)
