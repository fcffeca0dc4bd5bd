"""What hovering a cell of a heatmap reads out: its query and key, and its number named as what it is (an attention
weight, or a contribution method's value in the method's unit: "ALTI-Logit −0.4200 Δ logit"), with no Qt."""

from __future__ import annotations

import numpy as np

ATTENTION_UNIT = "attention weight"  # HeatmapState.scale_title of the attention weights themselves


def hover_hint(quantity: str = "", unit: str = ATTENTION_UNIT) -> str:
    """The readout's line before any cell is hovered: what a cell's number is (``quantity``: a method's label)."""
    what = f"{quantity} ({unit})" if quantity and unit else quantity or "weight"
    return f"Hover over a cell to read its {what}; double-click to reset the zoom."


def value_words(value: float, *, quantity: str = "", unit: str = ATTENTION_UNIT, approximate: bool = False) -> str:
    """``value`` as the readout says it: after ``quantity`` (a method's label) and before ``unit`` ("ALTI-Logit
    −0.4200 Δ logit"); alone for the attention weights (no ``quantity``); half precision (``approximate``) to
    three digits, with ≈."""
    shown = f"≈{value:.3g}" if approximate else f"{value:.4f}"
    if not quantity:
        return shown
    shown = shown.replace("-", "−")
    return f"{quantity} {shown} {unit}" if unit else f"{quantity} {shown}"


def cell_readout(matrix: np.ndarray, row: int, col: int, *, labels: tuple[list[str], list[str]],
                 mask: np.ndarray | None = None, revealed: tuple[int, int] | None = None,
                 approximate: bool = False, quantity: str = "", unit: str = ATTENTION_UNIT) -> str:
    """The hover line of cell (``row``, ``col``) of ``matrix`` (``labels``: the query and key tokens; ``mask``
    True = may attend; ``revealed``: the rows × cols generated so far, None all)."""
    queries, keys = labels
    query = queries[row] if row < len(queries) else str(row)
    key = keys[col] if col < len(keys) else str(col)
    if revealed is not None and not (row < revealed[0] and col < revealed[1]):
        return f"query {row} → key {col}: not generated yet at this step"
    masked = mask is not None and not bool(mask[row, col])
    value = float(matrix[row, col])
    words = value_words(value, quantity=quantity, unit=unit, approximate=approximate)
    return (f"query {row} ‘{query}’ → key {col} ‘{key}’: {words}"
            + ("  (masked: not allowed to attend)" if masked else "")
            + ("" if np.isfinite(value) else "  (not a number: the model's computation broke down here)"))
