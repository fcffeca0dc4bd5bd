"""How the "All layers × heads" grid lays out every layer × head (no Qt): square thumbnails as large as the panel
allows, but never smaller than :data:`LEAST_SIDE` pixels, so 32 layers × 32 heads stay readable at 1366×768; what
does not fit scrolls (in both directions as needed) under sticky layer and head names. The wider gap between
key/value groups stays. The widget (gui/views/mosaic.py) draws what this says, paints only the thumbnails in view,
and asks it which head lies under a click."""

from __future__ import annotations

from dataclasses import dataclass

LEAST_SIDE = 32  # pixels: the smallest thumbnail whose pattern (a diagonal, a column, the prompt) can still be read
SUMMARY_SIDE = 6  # pixels: the smallest cell of the summary, one colour per head (32 × 32 heads fit 290 × 250)
COMPACT = {"gap": 1.0, "group_gap": 4.0}  # the summary's gaps: its cells are one colour each, no pattern to part


@dataclass(frozen=True)
class GridLayout:
    """``layers × heads`` square thumbnails of ``side`` pixels: the layer names in a column ``row_header`` wide at
    the left, the head names in a line ``col_header`` high at the top, ``gap`` between thumbnails and ``group_gap``
    between key/value groups (``group`` query heads each; 0: none)."""

    layers: int
    heads: int
    side: float
    group: int = 0
    row_header: float = 34.0
    col_header: float = 18.0
    gap: float = 3.0
    group_gap: float = 9.0

    def group_gaps_before(self, head: int) -> int:
        """How many key/value-group boundaries lie left of ``head``."""
        return head // self.group if self.group else 0

    def x(self, head: int) -> float:
        return self.row_header + head * (self.side + self.gap) + self.group_gaps_before(head) * (
            self.group_gap - self.gap)

    def y(self, layer: int) -> float:
        return self.col_header + layer * (self.side + self.gap)

    def rect(self, layer: int, head: int) -> tuple[float, float, float, float]:
        """Where the thumbnail of ``layer``, ``head`` is drawn: (x, y, width, height) in the grid's pixels."""
        return self.x(head), self.y(layer), self.side, self.side

    def size(self) -> tuple[float, float]:
        """The whole grid's width and height, headers included."""
        if not self.layers or not self.heads:
            return 0.0, 0.0
        return self.x(self.heads - 1) + self.side + self.gap, self.y(self.layers - 1) + self.side + self.gap

    def cell_at(self, x: float, y: float) -> tuple[int, int] | None:
        """The (layer, head) of the thumbnail under a point of the grid (None: a gap, a header, outside)."""
        if self.side <= 0 or x < self.row_header or y < self.col_header:
            return None
        layer = int((y - self.col_header) // (self.side + self.gap))
        head = int((x - self.row_header) // (self.side + self.gap))
        for candidate in (head, head - 1):  # group gaps push a head right of where plain spacing would put it
            if 0 <= layer < self.layers and 0 <= candidate < self.heads:
                left, top, width, height = self.rect(layer, candidate)
                if left <= x < left + width and top <= y < top + height:
                    return layer, candidate
        return None

    def visible(self, view: tuple[float, float, float, float]) -> tuple[range, range]:
        """The layers and heads whose thumbnails meet ``view`` (x, y, width, height): only those are painted."""
        x, y, width, height = view
        step = self.side + self.gap
        layers = range(max(0, int((y - self.col_header) // step)),
                       min(self.layers, int((y + height - self.col_header) // step) + 1))
        first = max(0, int((x - self.row_header - self.heads * (self.group_gap - self.gap)) // step))
        heads = range(first, min(self.heads, int((x + width - self.row_header) // step) + 1))
        return layers, heads

    def every(self, needed: float) -> int:
        """Show every n-th head name so names ``needed`` pixels wide do not overlap; with key/value groups, n
        divides the group or is a whole number of groups, so the names shown start groups alike."""
        least = max(1, -(-int(needed + 4) // int(max(self.side + self.gap, 1))))
        if not self.group or least == 1:
            return least
        if least <= self.group:
            return min(count for count in range(least, self.group + 1) if self.group % count == 0)
        return -(-least // self.group) * self.group


def layout(layers: int, heads: int, panel: tuple[float, float], *, group: int = 0,
           least: float = LEAST_SIDE, compact: bool = False) -> GridLayout:
    """The grid for a panel of ``panel`` (width, height): square thumbnails filling it where that keeps them at
    least ``least`` pixels a side, else ``least`` pixels and the grid scrolls (``compact``: the summary's one
    colour per head, with narrower gaps)."""
    plain = GridLayout(layers, heads, 0.0, group=group, **(COMPACT if compact else {}))
    width, height = panel
    if not layers or not heads:
        return plain
    groups = (heads - 1) // group if group else 0
    across = (width - plain.row_header - heads * plain.gap - groups * (plain.group_gap - plain.gap)) / heads
    down = (height - plain.col_header - layers * plain.gap) / layers
    side = max(float(least), float(int(min(across, down))))
    return GridLayout(layers, heads, side, group=group, **(COMPACT if compact else {}))
