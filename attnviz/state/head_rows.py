"""How the "Heads of this layer" grid lays one layer's heads out in its panel (no Qt): in rows of ``per_row``
thumbnails, each row under its own line of head names, so a model of 14 or 32 heads shows squares that can be read
rather than one row of tall slivers. The widget (gui/views/thumbnails.py) draws what these functions say and asks
them again when its panel is resized; a head's place in the rows is only where it is drawn: clicks, the menu that
switches a head off, hover and the key/value-group marks all name the head itself."""

from __future__ import annotations

import math
from dataclasses import dataclass

FIGURE_ONE_ROW = 12  # the exported heads figure keeps up to this many heads in one row (GPT-2's 12, BERT's)

@dataclass(frozen=True)
class Room:
    """What the grid spends besides thumbnails, in pixels: the layer's name left of the rows, the line of head
    names above each row, the gap between thumbnails and the wider one between key/value groups."""

    row_header: float = 24.0
    col_header: float = 16.0
    gap: float = 3.0
    group_gap: float = 9.0


def thumbnail_side(heads: int, per_row: int, size: tuple[float, float], *, group: int = 0,
                   room: Room = Room()) -> float:
    """The side of the largest square each thumbnail can show when ``heads`` are laid ``per_row`` to a row in a
    panel of ``size`` (width, height): the smaller of a thumbnail's width and height."""
    width, height = size
    rows = -(-heads // per_row)
    groups_gaps = (per_row - 1) // group if group and per_row % group == 0 else 0
    across = (width - room.row_header - per_row * room.gap - groups_gaps * (room.group_gap - room.gap)) / per_row
    down = height / rows - room.col_header - room.gap
    return max(0.0, min(across, down))


def heads_per_row(heads: int, size: tuple[float, float], *, group: int = 0, room: Room = Room()) -> int:
    """How many of a layer's ``heads`` one row holds in a panel of ``size`` (width, height): the count that gives
    the largest square thumbnails (the fewest rows among equals). Where query heads share key/value heads
    (``group`` to each), a row holds whole groups, so the wider gap between groups stays in the same column on
    every row. A panel not laid out yet (no size): one row."""
    if heads <= 1 or min(size) <= 0:
        return max(heads, 1)
    counts = [count for count in range(1, heads + 1) if not group or count % group == 0 or count == heads]
    return max(counts, key=lambda count: (round(thumbnail_side(heads, count, size, group=group, room=room), 1),
                                          count))


def place(head: int, per_row: int) -> tuple[int, int]:
    """The (row, column) a head is drawn at, counted in thumbnails."""
    return divmod(head, per_row)


def wide_gap_before(column: int, per_row: int, group: int) -> bool:
    """Whether the thumbnail in ``column`` of every row starts a new key/value group (a wider gap before it)."""
    return bool(group) and column > 0 and per_row % group == 0 and column % group == 0


def figure_per_row(heads: int, group: int = 0) -> int:
    """How many heads one row of the exported heads figure holds: all of them up to :data:`FIGURE_ONE_ROW`; more
    (Qwen's 14, Llama's 32) in rows about as many as the heads to a row (the fewest whole key/value groups, or
    heads, not fewer than the square root of the heads), so the figure fits a page rather than a strip."""
    if heads <= FIGURE_ONE_ROW:
        return max(heads, 1)
    least = math.ceil(math.sqrt(heads))
    step = group if group and heads % group == 0 else 1
    return min(heads, -(-least // step) * step)
