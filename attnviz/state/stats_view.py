"""What the Head statistics view shows, computed from a corpus' ``HeadStats`` (no Qt, no torch): one small
layers × heads heatmap per statistic of the chosen run and kind, and for a clicked head the corpus sentences
where it is most and least typical. The statistics are defined in models/trace/head_summary.py."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from models.analysis import catalogue
from models.analysis.catalogue import DECODE, GRADIENT, NLL
from models.nn.precisions import EXACT, rounded_weights_notice
from models.trace.head_summary import STATISTICS, TYPICAL_BY, HeadStats

from .viewmodel import KIND_LABELS

if TYPE_CHECKING:
    from models.analysis.importance import HeadImportance

TYPICAL_COUNT = 5
RUN_LABELS = {"reference": "forced on the references", "decoded": "forced on the model's own output"}


SHARE_DECIMALS = (2, 1)  # weights and entropies: ".53", then ".5" where cells are small
SCORE_DECIMALS = (1, 0)  # scores out of 100: "34.2", then "34"


@dataclass(frozen=True)
class StatPanel:
    """One statistic as a ``[layers, heads]`` matrix; ``levels`` is its colour range, ``unit`` what the colour
    bar measures, ``texts`` each cell's value written out, longest first (a view writes the first that fits
    its cells, or none)."""

    name: str
    description: str
    matrix: np.ndarray
    levels: tuple[float, float]
    unit: str = ""
    texts: tuple[list[list[str]], ...] = ()


def cell_text(value: float, decimals: int) -> str:
    """A value as short as it reads: ``decimals`` places, no leading 0 (".53", "-.5"), "–" for no value."""
    if not np.isfinite(value):
        return "–"
    text = f"{value:.{decimals}f}"
    if float(text) == 0:
        return "0"
    return text.replace("0.", ".", 1) if text.lstrip("-").startswith("0.") else text


def cell_texts(matrix: np.ndarray, decimals: tuple[int, ...]) -> tuple[list[list[str]], ...]:
    """Every cell of ``matrix`` written out at each of ``decimals`` places, most first."""
    return tuple([[cell_text(float(value), places) for value in row] for row in matrix] for places in decimals)


def statistic_panel(name: str, matrix: np.ndarray) -> StatPanel:
    """A corpus statistic's panel: entropy in nats up to its largest, every other one a share of weight, 0–1."""
    unit = "nats" if name == "entropy" else "weight"
    return StatPanel(name, STATISTICS[name][1], matrix=matrix, levels=levels_of(name, matrix), unit=unit,
                     texts=cell_texts(matrix, SHARE_DECIMALS))


@dataclass(frozen=True)
class HeadStatsState:
    runs: list[tuple[str, str]]  # (run, label)
    run: str
    kinds: list[tuple[str, str]]  # (kind, label)
    kind: str
    layers: int
    heads: int
    panels: list[StatPanel]
    selected: tuple[int, int] | None
    summary: str


@dataclass(frozen=True)
class TypicalSentence:
    index: int  # in the corpus, from 0
    source: str
    target: str  # the reference, or the model's output in the decoded run
    value: float  # the head's mean entropy on this sentence


@dataclass(frozen=True)
class TypicalState:
    title: str
    most: list[TypicalSentence]
    least: list[TypicalSentence]


def corpus_name(corpus: str | list[tuple[str, str]]) -> str:
    """How a corpus job names its corpus: the PAIRS.tsv file's name, or the demo's own examples."""
    if isinstance(corpus, str):
        return corpus.replace("\\", "/").rsplit("/", 1)[-1]
    return f"this demo's {len(corpus)} example pairs"


def head_stats_state(stats: HeadStats, run: str, kind: str, selected: tuple[int, int] | None = None) -> HeadStatsState:
    """The panels of ``run`` and ``kind`` (each falls back to the first there is); padding is left out while it
    is 0 everywhere, as it always is unless a mask is broken."""
    run = run if run in stats.runs else next(iter(stats.runs))
    kind = kind if kind in stats.runs[run].kinds else next(iter(stats.runs[run].kinds))
    tables = stats.runs[run].tables()[kind]
    panels = [statistic_panel(name, values) for name, values in tables.items() if name != "padding" or values.any()]
    layers, heads = stats.runs[run].shape(kind)
    padding = "no weight on padding (checked)" if stats.max_padding() == 0 else \
        f"weight {stats.max_padding():.3g} on padding: a mask is broken"
    return HeadStatsState(
        runs=[(name, RUN_LABELS[name]) for name in stats.runs], run=run,
        kinds=[(name, KIND_LABELS[name]) for name in stats.runs[run].kinds], kind=kind, layers=layers, heads=heads,
        panels=panels, selected=selected,
        summary=f"{len(stats.pairs)} sentences, {RUN_LABELS[run]}; {padding}. Heads across, layers down. Click a head "
                f"for its most and least typical sentences; double-click one to run it.")


def levels_of(name: str, values: np.ndarray) -> tuple[float, float]:
    """Weights are shares of 1: a fixed 0–1 range keeps heads comparable. Entropy has no fixed top."""
    if name == "entropy":
        return 0.0, max(float(np.nanmax(values)), 1e-6)
    return 0.0, 1.0


def typical_sentences(stats: HeadStats, run: str, kind: str, layer: int, head: int, *,
                      count: int = TYPICAL_COUNT) -> TypicalState:
    """The sentences where head (``layer``, ``head``) of ``kind`` is most and least typical."""
    statistics = stats.runs[run]
    most, least = statistics.typical(kind, layer, head=head, count=count)
    values = statistics.per_sentence(kind, TYPICAL_BY)[:, layer, head]
    mean = float(statistics.mean(kind, TYPICAL_BY)[layer, head])
    targets = stats.outputs if run == "decoded" else [target for _, target in stats.pairs]

    def entry(index: int) -> TypicalSentence:
        return TypicalSentence(index, stats.pairs[index][0], target=targets[index], value=float(values[index]))

    values_text = " · ".join(f"{name} {table[layer, head]:.3f}" for name, table in statistics.tables()[kind].items()
                             if name != "padding")
    return TypicalState(f"{KIND_LABELS[kind]}, layer {layer}, head {head}: {values_text} (entropy in nats; "
                        f"a sentence is typical when its entropy is near {mean:.3f})",
                        [entry(index) for index in most], [entry(index) for index in least])


# The Head importance panel's choices, the catalogue's methods: name → what the user reads.
IMPORTANCE_METHODS = {name: method.label for name, method in catalogue.IMPORTANCE_METHODS.items()}
NLL_DECIMALS = (3, 2)  # nats per token: a head's rise is often a few hundredths


def importance_method(importance: HeadImportance) -> str:
    """Which of the catalogue's methods computed ``importance``."""
    return catalogue.importance_method(importance.method, importance.metric).name


def importance_panels(importance: HeadImportance, kind: str) -> list[StatPanel]:
    """The drop with each head of ``kind`` switched off alone (for the NLL the rise: positive = the head helps),
    coloured from 0 (or the largest gain) to the largest drop; then the score that is left, or for the gradient
    estimate Michel et al.'s E|∂L/∂ξ|."""
    drops, scores = importance.drops[kind], importance.scores[kind]
    name, method = importance.metric_name, importance_method(importance)
    decimals = SCORE_DECIMALS if method == DECODE else NLL_DECIMALS
    lost = "gained (estimated to first order)" if method == GRADIENT else \
        "gained" if method == NLL else "lost"
    drop = StatPanel("est. drop" if method == GRADIENT else "drop",
                     f"{name} {lost} when this head alone is switched off", matrix=drops,
                     levels=(min(0.0, float(drops.min())), max(float(drops.max()), 1e-6)), unit=name,
                     texts=cell_texts(drops, decimals))
    if method == GRADIENT:
        magnitudes = importance.magnitudes[kind]
        return [drop, StatPanel("|∂L/∂ξ|", "Michel et al.'s importance: the mean |∂NLL/∂ξ| per token, ξ the head's "
                                "gate", matrix=magnitudes, levels=(0.0, max(float(magnitudes.max()), 1e-6)),
                                unit="nats/token", texts=cell_texts(magnitudes, NLL_DECIMALS))]
    levels = (0.0, 100.0) if method == DECODE else (float(scores.min()), max(float(scores.max()),
                                                                               float(scores.min()) + 1e-6))
    return [drop, StatPanel("left", f"{name} with this head alone switched off", matrix=scores, levels=levels,
                            unit=name, texts=cell_texts(scores, decimals))]


def importance_state(importance: HeadImportance, kind: str, selected: tuple[int, int] | None = None, *,
                     weights: str = EXACT) -> HeadStatsState:
    """Head importance (models/analysis/importance.py) drawn in the same grid: the method's panels for the chosen kind
    (:func:`importance_panels`); the runs to choose from are the methods. The summary says when the scores come
    from weights rounded to ``weights``."""
    kinds = list(importance.scores)
    kind = kind if kind in kinds else kinds[-1]
    panels = importance_panels(importance, kind)
    name, method = importance.metric_name, importance_method(importance)
    layers, heads = panels[0].matrix.shape
    baseline = f"{importance.baseline:.3f}" if importance.metric == NLL else f"{importance.baseline:.2f}"
    helps = "the NLL rises without the head" if importance.metric == NLL else "the model loses much without the head"
    return HeadStatsState(
        runs=list(IMPORTANCE_METHODS.items()), run=method,
        kinds=[(name_, KIND_LABELS[name_]) for name_ in kinds], kind=kind, layers=layers, heads=heads, panels=panels,
        selected=selected,
        summary=f"{IMPORTANCE_METHODS[method]}: {importance.examples} sentences; {name} {baseline} with every head "
                f"on ({importance.seconds:.1f} s). Heads across, layers down; bright = {helps}. Click a head to show "
                f"it; right-click a thumbnail in the grids to switch it off."
                + (f" Scores {rounded_weights_notice(weights)}." if weights != EXACT else ""))


def importance_note(importance: HeadImportance, kind: str, layer: int, head: int) -> str:
    """One head's line: its score with it off, the drop, and its rank among every head scored."""
    ranking = [(k, l, h) for k, l, h, _ in importance.ranking()]
    name = importance.metric_name
    estimated = " (estimated)" if importance.method == GRADIENT else ""
    return (f"{KIND_LABELS[kind]}, layer {layer}, head {head}: {name} {importance.scores[kind][layer, head]:.3g} "
            f"with it off{estimated} (drop {importance.drops[kind][layer, head]:+.3g}); rank "
            f"{ranking.index((kind, layer, head)) + 1} of {len(ranking)}")
