"""Bar charts as plain data (no Qt): a probability axis fitted to its bars (the next-token chart's top-k), and as
many bars as a chart can label, the highlighted one (the chosen token) always among them."""

from __future__ import annotations

import dataclasses
import math

from typing import TypeVar

Bars = TypeVar("Bars")  # viewmodel.BarsState (which builds on this module)

NICE_STEPS = (1.0, 2.0, 2.5, 5.0, 10.0)


def fitted_top(largest: float) -> float:
    """The end of a probability axis that holds ``largest``: the next of 1, 2, 2.5 and 5 times a power of ten
    (0.07 → 0.1, 0.55 → 1.0, 0.18 → 0.2), never past 1."""
    if not math.isfinite(largest) or largest <= 0 or largest >= 1:
        return 1.0
    power = 10.0 ** math.floor(math.log10(largest))
    return min(1.0, next(step * power for step in NICE_STEPS if step * power >= largest * (1 - 1e-9)))


def bars_that_fit(state: Bars, rows: int) -> Bars:
    """``state``'s first ``rows`` bars (at least one), so that each keeps its label; the highlighted bar stays, in
    the last place, where it ranks lower. The axis is fitted to what is left."""
    count = len(state.labels)
    rows = max(1, rows)
    if count <= rows:
        return state
    kept = list(range(rows))
    if state.highlight is not None and state.highlight >= rows:
        kept[-1] = state.highlight
    values = state.values[kept]
    highlight = kept.index(state.highlight) if state.highlight in kept else None
    top = fitted_top(float(values.max(initial=0.0))) if state.top <= 1 else state.top
    return dataclasses.replace(state, labels=[state.labels[index] for index in kept], values=values,
                               highlight=highlight, top=top)
