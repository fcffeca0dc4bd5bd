"""A checkpoint's nested fields (its provenance: how it was trained or imported) as rows a reader scans: the
window's Model panel and ``attnviz info`` show them the same way."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Mapping


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
