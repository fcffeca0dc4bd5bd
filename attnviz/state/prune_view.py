"""What the Head importance panel's pruning curve shows, computed from ``PruneCurves`` (no Qt, no torch): one line
per order of the ranking (least important first, most important first, seeded random), the axes' titles in the
metric's unit, the readout under the pointer, and the exported figure (attnviz/state/figures.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from models.analysis.catalogue import NLL

from .figures import CURVE_COLOURS, CURVE_NAMES, prune_curve_svg

if TYPE_CHECKING:
    from models.analysis.pruning import PruneCurves

HEADS_AXIS = "heads switched off"


@dataclass(frozen=True)
class CurveLine:
    """One order's curve: ``scores[k]`` is the score with its first ``k`` heads off (k = 0 … every head)."""

    order: str
    label: str
    colour: str
    scores: np.ndarray


@dataclass(frozen=True)
class PruneCurveState:
    lines: tuple[CurveLine, ...]
    heads: int
    x_title: str
    y_title: str
    summary: str
    seed: int


def curve_label(order: str, seed: int) -> str:
    """How a line is named in the legend: the random order with its seed, which the curve depends on."""
    name = CURVE_NAMES.get(order, order)
    return f"{name} (seed {seed})" if order == "random" else name


def prune_curve_state(curves: PruneCurves) -> PruneCurveState:
    """The curves of ``curves`` as lines over 0 … every head switched off."""
    lines = tuple(CurveLine(order, curve_label(order, curves.seed), colour=CURVE_COLOURS.get(order, "#000000"),
                            scores=np.asarray(curve, dtype=float))
                  for order, curve in curves.curves.items())
    heads = max(len(line.scores) for line in lines) - 1
    better = "Lower is better" if curves.metric == NLL else "Higher is better"
    summary = f"{better}; the {heads} heads switched off one by one ({curves.seconds:.1f} s)."
    return PruneCurveState(lines, heads=heads, x_title=HEADS_AXIS, y_title=curves.metric_name, summary=summary,
                           seed=curves.seed)


@dataclass(frozen=True)
class CurveReadout:
    """The key under the plot: each line's colour and label, with its score at the pointer's count of heads."""

    heading: str
    entries: tuple[tuple[str, str, str], ...]  # colour, label, score ("" while the pointer is elsewhere)


def curve_readout(state: PruneCurveState, x: float | None = None) -> CurveReadout:
    """The key, and with the pointer at ``x`` heads off (the nearest count) each order's score there."""
    if x is None:
        return CurveReadout(f"{state.y_title}:", tuple((line.colour, line.label, "") for line in state.lines))
    count = int(np.clip(round(x), 0, state.heads))
    return CurveReadout(f"{count} of {state.heads} heads off, {state.y_title}:",
                        tuple((line.colour, line.label, f"{line.scores[count]:.4g}") for line in state.lines))


def prune_curve_figure(state: PruneCurveState, *, model: str) -> str:
    """The curves as the figure PNG and SVG exports draw (``attnviz importance --prune-curve -o`` draws it too),
    titled with the ``model``'s name and the random order's seed."""
    return prune_curve_svg({line.order: line.scores for line in state.lines}, metric_name=state.y_title,
                           title=f"Heads switched off cumulatively: {model} (random order: seed {state.seed})")
