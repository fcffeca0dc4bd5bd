"""The "All layers × heads" summary (no Qt): one cell per head, coloured by how spread out the head's attention is,
so 32 layers × 32 heads fit a side panel whole and the heads that attend sharply stand out.

A head's value is the mean, over the query rows that may attend to two keys or more, of the row's normalised
entropy ``H / log m``: ``H = -Σ_k a_k log a_k`` over its keys (in nats, as in models/trace/head_summary.py's
``entropy``) and ``m`` the keys the row may attend to (its mask's True cells). 0: every row puts all its weight
on one key; 1: every row spreads it evenly over the keys it may see.
"""

from __future__ import annotations

import numpy as np

from models.trace.records import AttentionTrace

from .session import Selection
from . import prompt_view
from .viewmodel import GridState, model_grid, revealed_extent


def spread(weights: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """``[heads]``: each head's mean normalised row entropy over ``weights`` ``[heads, q, k]`` (``mask`` ``[q, k]``,
    True = may attend)."""
    allowed = mask.sum(axis=-1)
    rows = allowed >= 2
    if not rows.any():
        return np.zeros(weights.shape[0], dtype=np.float32)
    values = np.asarray(weights[:, rows], dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = np.where(values > 0, values * np.log(values), 0.0)
    entropy = -terms.sum(axis=-1) / np.log(allowed[rows])
    return entropy.mean(axis=-1).astype(np.float32)


def summary_grid(trace: AttentionTrace, selection: Selection, *, kv_groups: tuple[int, ...] = (),
                 reveal_step: int | None = None) -> GridState:
    """The model grid (names, selection, heads switched off, key/value groups as :func:`viewmodel.model_grid`)
    with each thumbnail one ``[1, 1]`` cell: its head's :func:`spread` (``reveal_step``: over the rows that
    decoding step has generated, as the thumbnails show only those)."""
    grid = model_grid(trace, selection, images=False, kv_groups=kv_groups)
    kind = selection.kind
    weights = trace.attention[kind]
    shape = weights[0].shape[1:]
    mask = trace.masks.get(kind)
    if mask is None or mask.shape != shape:
        mask = np.ones(shape, dtype=bool)
    revealed = None if reveal_step is None else revealed_extent(kind, reveal_step, shape,
                                                                offset=prompt_view.step_offset(trace))
    rows = shape[0] if revealed is None else revealed[0]
    cells = [np.full((1, 1), value, dtype=np.float32) for layer in weights
             for value in spread(layer[:, :rows], mask[:rows])]
    return GridState(rows=grid.rows, cols=grid.cols, row_names=grid.row_names, col_names=grid.col_names,
                     matrices=cells, selected=grid.selected, off=grid.off, group=grid.group)
