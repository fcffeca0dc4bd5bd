"""What each view shows, computed from the session with no Qt and no torch.

Every function here takes plain data (a trace, a selection, results) and returns a frozen dataclass that
a widget only has to draw. The main window and the headless renderer (``attnviz render``) both read
these, so the window and a rendered file can never disagree on which matrix, labels or title they show.
See docs/ARCHITECTURE.md for the data flow.
"""

from __future__ import annotations

import dataclasses
import difflib
from dataclasses import dataclass, field

import numpy as np

from models.nn.ablation import Ablation
from models.trace.aggregate import AGGREGATES, aggregate
from models.trace.records import KINDS, AttentionTrace, DecodeResult, DecodeStep, stack_rows

from . import prompt_view
from .charts import fitted_top
from .session import RunLabels, Selection, ViewOptions

KIND_LABELS = {"enc_self": "Encoder self-attention", "dec_self": "Decoder self-attention", "cross": "Cross-attention"}
AXIS_NAMES = {"enc_self": ("source (queries)", "source (keys)"),
              "dec_self": ("decoder input (queries)", "decoder input (keys)"),
              "cross": ("decoder input (queries)", "source (keys)")}
LEVELS = (0.0, 1.0)  # attention weights are probabilities: one fixed range keeps maps comparable
THUMBNAIL_SIDE = 256  # a thumbnail has at most this many cells a side (more than its pixels, even on a 4K screen)
assert tuple(KIND_LABELS) == KINDS


def head_name(head: int | str) -> str:
    """How a head or an aggregate is named in titles, menus and file names' long form."""
    return f"head {head}" if isinstance(head, int) else "attention rollout" if head == "rollout" else f"{head} of heads"


def head_choices(heads: int) -> list[tuple[str, int | str]]:
    """(label, value) for every head and aggregate, in menu order."""
    return [(head_name(number), number) for number in range(heads)] + [(head_name(name), name) for name in AGGREGATES]


def export_name(kind: str, layer: int, head: int | str) -> str:
    """A file name stem for one heatmap: ``cross-L0-H3``, ``enc_self-L1-rollout``."""
    return f"{kind}-L{layer}-{head if isinstance(head, str) else f'H{head}'}"


@dataclass(frozen=True)
class HeatmapState:
    """One ``[query, key]`` matrix with everything drawn around it."""

    matrix: np.ndarray
    mask: np.ndarray | None  # True = may attend
    query_labels: list[str]
    key_labels: list[str]
    title: str  # rich text, plain words only (no token text)
    axis_names: tuple[str, str]
    levels: tuple[float, float]
    step_row: int | None  # the query row of the current decoding step, outlined
    file_stem: str
    approximate: bool = False  # weights kept at half precision (a long run): read out to three digits, with ≈
    revealed: tuple[int, int] | None = None  # step by step: only rows × cols from the top left exist yet (None: all)
    scale_title: str = "attention weight"  # what the colour scale's numbers are (a contribution's unit)
    note: str = ""  # how the numbers were computed (completeness, rounded weights): the colour bar's tooltip
    boundary: int | None = None  # a decoder-only map: the prompt's length P, a line before row and key P
    colormap: str = ""  # "" the window's chosen one; a signed map's diverging one (compare_view.DIVERGING_COLORMAP)
    quantity: str = ""  # the hover's name for a cell's number before it, the unit (scale_title) after; "": unit only


@dataclass(frozen=True)
class GridState:
    """Thumbnails ``rows × cols``, one matrix each (row by row), and the one the focus view shows."""

    rows: int
    cols: int
    row_names: list[str]
    col_names: list[str]
    matrices: list[np.ndarray]
    selected: tuple[int, int] | None
    off: list[bool] = field(default_factory=list)  # per thumbnail: the head was switched off in the run
    boundary: float | None = None  # a decoder-only map: where its prompt ends, in the thumbnails' cells
    group: int = 0  # query heads per key/value head (grouped-query attention: a divider every ``group`` heads)
    wrap: bool = False  # one layer's heads, drawn in as many rows as keep them near square (state/head_rows.py)
    levels: tuple[float, float] = LEVELS  # the values at the colormap's two ends, the same for every thumbnail
    colormap: str = ""  # "" the window's chosen one; signed maps' diverging one, ± their largest magnitude


@dataclass(frozen=True)
class SelectorState:
    kinds: list[str]
    kind: str
    layer: int
    head: int | str
    layers: int
    heads: int
    head_choices: tuple[tuple[str, int | str], ...] = ()  # (label, head) of the head box, in menu order
    own_scale: tuple[str, str] = ("", "")  # why the colour range box, the colormap box, do not apply ("": they do)


@dataclass(frozen=True)
class BarsState:
    labels: list[str]
    values: np.ndarray
    highlight: int | None
    title: str
    top: float = 1.0  # the value axis' end: 1 for weights and shares, the largest bar for unbounded contributions
    bottom: float = 0.0  # its other end: below 0 for signed values (logit terms), bars drawn down to it
    unit: str = ""  # what the value axis is in (a contribution's unit; "" unnamed)


@dataclass(frozen=True)
class StepState:
    """The decoding panel at one step: the decoder's input so far, what it produced, the top-k chart and
    the cross-attention row of that step as bars over the source (with which layer and head they show)."""

    count: int
    step: int
    tokens: list[str]  # the decoder's whole input; tokens[step] is this step's query
    produced: str | None
    probability: float | None
    top_k: BarsState | None
    source_bars: BarsState
    offset: int = 0  # the row of step 0 in ``tokens`` (a decoder-only run's: the prompt's last token, P − 1)
    input_name: str = "decoder input"
    caption: str = ""  # said in place of the decoder's input (an encoder-only model's masked position), as HTML


@dataclass
class BeamNode:
    """One token a beam hypothesis added, placed for drawing: ``depth`` (the step) along x, ``slot`` along y
    (leaves one apart, a parent centred on its children)."""

    token: str
    probability: float
    score: float
    finished: bool
    depth: int
    parent: int  # index in BeamState.nodes, -1 for the first step
    slot: float = 0.0
    children: list[int] = field(default_factory=list)
    token_id: int = -1  # the token's id (a click on a sibling contrasts with it: attnviz/state/contrast_view.py)


@dataclass(frozen=True)
class BeamState:
    hypotheses: list[tuple[str, str]]  # (line, tooltip), best first
    nodes: list[BeamNode]
    paths: list[list[int]]  # per hypothesis (best first), its nodes from the first step to the last

    @property
    def roots(self) -> list[BeamNode]:
        return [node for node in self.nodes if node.parent < 0]


@dataclass(frozen=True)
class ResultLine:
    """The output line. With heads switched off, ``original`` is the output of the same input with every head
    on, and ``diff`` walks both token lists: ``(token, "same" | "inserted" | "deleted")``, where inserted
    tokens are only in this run's output and deleted ones only in the original."""

    text: str
    details: str
    notices: list[str]
    original: str | None = None
    diff: list[tuple[str, str]] = field(default_factory=list)
    partner: str | None = None  # while comparing: model B's output and score (or why it has none)
    coverage: str = ""  # the hallucination signal: the output's source contribution (ALTI+), once computed
    original_coverage: str = ""  # the original's, beside it, while the views show the run with every head on


@dataclass(frozen=True)
class AblationState:
    """The "N heads off — Restore" bar: shown while any head is switched off."""

    visible: bool
    text: str
    tooltip: str


@dataclass(frozen=True)
class SnapshotBarState:
    """The "training step" slider over a snapshot series: hidden for a single checkpoint."""

    visible: bool
    count: int
    index: int
    label: str  # "step 250 of 1000"
    tooltip: str


def snapshot_bar(steps: tuple[int, ...], step: int | None) -> SnapshotBarState:
    if not steps:
        return SnapshotBarState(False, 0, index=0, label="", tooltip="")
    index = steps.index(step) if step in steps else len(steps) - 1
    return SnapshotBarState(True, len(steps), index=index, label=f"step {steps[index]:,} of {steps[-1]:,}",
                            tooltip=f"Snapshot {index + 1} of {len(steps)}: the model as it was after {steps[index]:,} "
                            "training steps; every view shows what it did with the same sentence")


def trace_shape(trace: AttentionTrace) -> dict[str, tuple[int, int]]:
    """``(layers, heads)`` per kind, as models.nn.ablation wants it."""
    return {kind: (trace.layers(kind), trace.heads(kind)) for kind in trace.kinds}


def ablation_state(ablation: Ablation, trace: AttentionTrace | None) -> AblationState:
    heads = ablation.heads(trace_shape(trace)) if trace is not None else ()
    count = len(heads) if trace is not None else len(ablation.entries)
    if not count:
        return AblationState(False, "", "")
    text = f"{count} head{'s' if count != 1 else ''} off"
    names = ", ".join(f"{KIND_LABELS[kind].lower()} L{layer} H{head}" for kind, layer, head in heads[:12])
    more = f" and {len(heads) - 12} more" if len(heads) > 12 else ""
    return AblationState(True, text, f"Switched off (output zeroed): {names}{more}")


def token_diff(original: list[str], changed: list[str]) -> list[tuple[str, str]]:
    """Both token lists merged: each token marked same, inserted (only in ``changed``) or deleted (only in
    ``original``), deletions before insertions where a stretch was replaced."""
    marked: list[tuple[str, str]] = []
    for tag, a0, a1, b0, b1 in difflib.SequenceMatcher(a=original, b=changed, autojunk=False).get_opcodes():
        if tag == "equal":
            marked += [(token, "same") for token in original[a0:a1]]
            continue
        marked += [(token, "deleted") for token in original[a0:a1]]
        marked += [(token, "inserted") for token in changed[b0:b1]]
    return marked


def selector_state(trace: AttentionTrace, selection: Selection) -> SelectorState:
    kind = selection.kind
    heads = trace.heads(kind)
    return SelectorState(kinds=trace.kinds, kind=kind, layer=selection.layer, head=selection.head,
                         layers=trace.layers(kind), heads=heads, head_choices=tuple(head_choices(heads)))


def matrix_of(trace: AttentionTrace, selection: Selection) -> np.ndarray:
    """The ``[query, key]`` matrix of one head, or of an aggregate of the layer's heads."""
    kind, layer, head = selection.kind, selection.layer, selection.head
    return trace.attention[kind][layer][head] if isinstance(head, int) else aggregate(trace, kind, layer, how=head)


def colour_levels(matrix: np.ndarray, mask: np.ndarray | None, colour_range: str) -> tuple[float, float]:
    """0–1, or the map's own range over the cells it may attend to (never an empty range)."""
    if colour_range != "own":
        return LEVELS
    cells = matrix[mask] if mask is not None and mask.shape == matrix.shape and mask.any() else matrix.ravel()
    cells = cells[np.isfinite(cells)]
    if cells.size == 0:
        return LEVELS
    low, high = float(cells.min()), float(cells.max())
    return (low, high) if high > low else (low, low + 1e-6)


def predicted_labels(inputs: list[str], outputs: list[str]) -> list[str]:
    """Decoder rows named by what they predict: row t's input token → output token t."""
    return [f"{token} → {outputs[row]}" if row < len(outputs) else token for row, token in enumerate(inputs)]


def revealed_extent(kind: str, step: int, shape: tuple[int, int], offset: int = 0) -> tuple[int, int] | None:
    """How much of a map exists once decoding step ``step`` has run: a decoder map's rows up to the step's
    query, and for decoder self-attention the keys up to it too (the later inputs are not generated yet;
    ``offset``: the row of step 0, a decoder-only prompt's last token). None for the encoder, which exists
    whole before the first step."""
    if kind == "enc_self":
        return None
    rows = min(max(step, 0) + offset + 1, shape[0])
    return rows, rows if kind == "dec_self" else shape[1]


def unrevealed(shape: tuple[int, int], revealed: tuple[int, int] | None) -> np.ndarray:
    """True on the cells outside ``revealed`` (nothing when it is None)."""
    hidden = np.ones(shape, dtype=bool)
    if revealed is None:
        return ~hidden
    hidden[:revealed[0], :revealed[1]] = False
    return hidden


def _revealed_labels(labels: list[str], count: int) -> list[str]:
    """Labels of tokens not generated yet are left blank: they would give away the output."""
    return labels[:count] + [""] * (len(labels) - count)


def reveal(state: HeatmapState, kind: str, *, step: int, colour_range: str = "fixed") -> HeatmapState:
    """``state`` (a map of ``kind``) as far as decoding step ``step`` has generated it: later cells 0 (no
    weight is read out or exported from the future), their labels blank; an own colour range is taken over
    what is shown (a decoder-only map's prompt, before its ``boundary``, exists from the start)."""
    offset = state.boundary - 1 if state.boundary else 0
    revealed = revealed_extent(kind, step, state.matrix.shape, offset=offset)
    if revealed is None:
        return state
    hidden = unrevealed(state.matrix.shape, revealed)
    matrix = np.where(hidden, 0, state.matrix).astype(state.matrix.dtype)
    shown = ~hidden if state.mask is None else state.mask & ~hidden
    levels = state.levels if colour_range != "own" else colour_levels(matrix, shown, colour_range)
    rows, cols = state.matrix.shape
    return dataclasses.replace(
        state, matrix=matrix, revealed=revealed, levels=levels,
        query_labels=_revealed_labels(state.query_labels, revealed[0]),
        key_labels=_revealed_labels(state.key_labels, revealed[1]) if revealed[1] < cols else state.key_labels,
        title=state.title + f" · generated to step {revealed[0]} of {rows}")


def heatmap(trace: AttentionTrace, selection: Selection, options: ViewOptions = ViewOptions(),
            outputs: list[str] | None = None, *, windows: tuple[int, ...] = ()) -> HeatmapState | None:
    """The focus view: the selected head (or aggregate) of the selected kind and layer. ``outputs`` (the
    result's tokens) name decoder rows by their prediction when the options ask for it; ``reveal_rows``
    shows a decoder map only as far as the selected step has generated it. A decoder-only model's map
    (docs/architectures.md#decoder-only) has its prompt boundary, rows named from the prompt's, and its
    layer's sliding window (``windows``, the model's per layer) masked as the causal future is."""
    kind, layer, head = selection.kind, selection.layer, selection.head
    if kind not in trace.attention:
        return None
    decoder_rows = kind in ("dec_self", "cross")
    queries = trace.query_tokens(kind)
    offset = prompt_view.step_offset(trace)
    if decoder_rows and options.predicted_labels and outputs is not None:
        queries = queries[:offset] + predicted_labels(queries[offset:], outputs)
    matrix, mask = matrix_of(trace, selection), trace.masks[kind]
    mask = prompt_view.windowed(mask, prompt_view.layer_window(windows, kind, layer))
    title = f"<b>{KIND_LABELS[kind]}</b> · layer {layer} · {head_name(head)}"
    if isinstance(head, int) and trace.is_ablated(kind, layer, head):
        title += " · <span style='color:#c62828'><s>switched off</s> (output zeroed; the weights it computed)</span>"
    elif not isinstance(head, int):
        off = sum(trace.is_ablated(kind, layer, number) for number in range(trace.heads(kind)))
        title += f" · <span style='color:#c62828'>{off} of {trace.heads(kind)} heads off</span>" if off else ""
    axis_names = AXIS_NAMES[kind] if trace.prompt_len is None else prompt_view.SEQUENCE_AXES
    if decoder_rows and options.predicted_labels and outputs is not None:
        axis_names = (prompt_view.PREDICTED_AXIS, axis_names[1])
    state = HeatmapState(
        matrix=matrix, mask=mask, query_labels=queries, key_labels=trace.key_tokens(kind),
        title=title, axis_names=axis_names, levels=colour_levels(matrix, mask, options.colour_range),
        step_row=selection.step + offset if decoder_rows else None, file_stem=export_name(kind, layer, head),
        approximate=trace.half_precision, boundary=prompt_view.boundary(trace, kind))
    return reveal(state, kind, step=selection.step, colour_range=options.colour_range) if options.reveal_rows else state


# A run's first rows are drawn as they stream in while nothing of it is on screen yet; past this many steps
# the map waits for the whole run (each redraw stacks every row so far, all layers of the kind).
STREAMED_ROWS = 64
STREAMED_KINDS = ("dec_self", "cross")  # what the steps carry: the encoder's attention comes with the result


def streamed_trace(labels: RunLabels, steps: list[DecodeStep], kind: str,
                   layer: int | None = None) -> AttentionTrace | None:
    """The rows of ``kind`` a greedy or forced run has decoded so far, as a trace of that kind alone: row *t* is
    step *t*'s query, decoder self-attention padded to the rows so far (keys not generated yet masked). None
    for a beam's steps (a hypothesis' rows follow its parents), a kind the steps lack, or past
    :data:`STREAMED_ROWS`. ``layer``: a prompt's square is assembled for that layer only (``streamed_prompt_trace``)."""
    if not steps or len(steps) > STREAMED_ROWS or kind not in STREAMED_KINDS or kind not in steps[0].attention:
        return None
    if any(len(step.token_ids) != 1 for step in steps):
        return None
    if prompt_view.after_a_prompt(steps[0], kind):
        return prompt_view.streamed_prompt_trace(labels, steps, kind, layer=layer)
    keys = len(steps) if kind == "dec_self" else len(labels.source)
    layers = [stack_rows([step.attention[kind][layer][0] for step in steps], keys)
              for layer in range(len(steps[0].attention[kind]))]
    mask = stack_rows([np.asarray(step.masks[kind][:1], dtype=bool) for step in steps], keys)[0]
    tgt_tokens = [labels.start] + [step.tokens[0] for step in steps[:-1]]
    return AttentionTrace(list(labels.source), tgt_tokens, attention={kind: layers}, masks={kind: mask})


def streamed_heatmap(labels: RunLabels | None, steps: list[DecodeStep], selection: Selection, *,
                     options: ViewOptions = ViewOptions()) -> HeatmapState | None:
    """The focus heatmap of a run still decoding: the selected head's rows decoded so far (the later rows are
    absent, not zero), the newest outlined, titled as still decoding. None where it cannot be drawn before
    the run ends (see :func:`streamed_trace`; an aggregate needs every layer or the encoder, so it waits)."""
    if labels is None or not isinstance(selection.head, int):
        return None
    trace = streamed_trace(labels, steps, selection.kind, layer=selection.layer)
    if trace is None or selection.layer >= trace.layers(selection.kind) or selection.head >= trace.heads(
            selection.kind):
        return None
    at_newest = dataclasses.replace(selection, step=len(steps) - 1)
    state = heatmap(trace, at_newest, options, outputs=[step.tokens[0] for step in steps])
    so_far = f"{len(steps)} step{'s' if len(steps) > 1 else ''} so far"
    return dataclasses.replace(state, title=state.title + f" · decoding… {so_far}")


def heads_title(kind: str, layer: int) -> str:
    return f"<b>{KIND_LABELS[kind]}</b> · layer {layer} · every head"


def thumbnail(matrix: np.ndarray, side: int = THUMBNAIL_SIDE) -> np.ndarray:
    """``matrix`` itself when no side is longer than ``side``; else, along each longer side, every
    ``⌈n / side⌉`` cells as their largest weight (float32), so a sharp line of weight survives the shrinking
    (a long input's thumbnails cost kilobytes, not megabytes each)."""
    if max(matrix.shape) <= side:
        return matrix
    down, across = (-(-length // side) for length in matrix.shape)
    # float16 (a long run's) is shrunk on its bits: numbers ≥ 0 order as their bits do, and numpy's float16 is slow
    bits = matrix.dtype == np.float16 and not np.any(matrix.view(np.uint16) >= 0x8000)
    source = matrix.view(np.uint16) if bits else matrix
    shrunk = source[::down, ::across].astype(source.dtype if bits else np.float32)
    for row in range(down):  # strided maxima: ten times faster than a reshape or reduceat
        for col in range(across):
            part = source[row::down, col::across]
            np.maximum(shrunk[: part.shape[0], : part.shape[1]], part, out=shrunk[: part.shape[0], : part.shape[1]])
    return shrunk.view(np.float16).astype(np.float32) if bits else shrunk


def _thumbnail_as_generated(weights: np.ndarray, kind: str, reveal_step: int | None, offset: int = 0) -> np.ndarray:
    """:func:`thumbnail`, with the cells not generated by ``reveal_step`` (step by step; None: all) as NaN,
    which draws as no colour at all: a thumbnail must not give away what the focus view keeps hidden."""
    revealed = None if reveal_step is None else revealed_extent(kind, reveal_step, weights.shape, offset=offset)
    if revealed is None:
        return thumbnail(weights)
    shown = np.array(weights, dtype=np.float32)
    shown[unrevealed(weights.shape, revealed)] = np.nan
    return thumbnail(shown)


def head_grid(trace: AttentionTrace, selection: Selection, images: bool = True, *,
              reveal_step: int | None = None, kv_groups: tuple[int, ...] = ()) -> GridState:
    """Every head of the selected layer, one grid row laid out in as many rows as its panel needs (``wrap``:
    state/head_rows.py; long inputs shrunk: :func:`thumbnail`); without ``images`` no matrices (a head switch only
    moves the outline); ``reveal_step``: only what that decoding step has generated (View → Reveal rows step by
    step); ``kv_groups`` (the model's key/value head of each query head) names each head's group."""
    kind, layer = selection.kind, selection.layer
    heads, offset = trace.heads(kind), prompt_view.step_offset(trace)
    group = prompt_view.group_size(kv_groups, heads) if kind == "dec_self" else 0
    selected = (0, selection.head) if isinstance(selection.head, int) else None
    return GridState(rows=1, cols=heads, row_names=[f"L{layer}"], col_names=prompt_view.head_names(heads, group),
                     matrices=[_thumbnail_as_generated(weights, kind, reveal_step, offset=offset)
                               for weights in trace.attention[kind][layer]] if images else [],
                     selected=selected, off=[trace.is_ablated(kind, layer, head) for head in range(heads)],
                     boundary=prompt_view.thumbnail_boundary(trace, kind, side=THUMBNAIL_SIDE), group=group, wrap=True)


def model_grid(trace: AttentionTrace, selection: Selection, images: bool = True, *,
               reveal_step: int | None = None, kv_groups: tuple[int, ...] = ()) -> GridState:
    """Every layer × head of the selected kind (long inputs shrunk: :func:`thumbnail`); without ``images``
    no matrices; ``reveal_step`` and ``kv_groups`` as for :func:`head_grid`."""
    kind = selection.kind
    layers, heads, offset = trace.layers(kind), trace.heads(kind), prompt_view.step_offset(trace)
    group = prompt_view.group_size(kv_groups, heads) if kind == "dec_self" else 0
    selected = (selection.layer, selection.head) if isinstance(selection.head, int) else None
    return GridState(rows=layers, cols=heads, row_names=[f"L{layer}" for layer in range(layers)],
                     col_names=prompt_view.head_names(heads, group),
                     matrices=[_thumbnail_as_generated(weights, kind, reveal_step, offset=offset)
                               for layer in trace.attention[kind] for weights in layer] if images
                     else [], selected=selected,
                     off=[trace.is_ablated(kind, layer, head) for layer in range(layers) for head in range(heads)],
                     boundary=prompt_view.thumbnail_boundary(trace, kind, side=THUMBNAIL_SIDE), group=group)


def thumbnail_menu(off: list[bool], cols: int, row: int, col: int) -> list[tuple[str, str]]:
    """A thumbnail's context menu as ``(text, action)``, action ``head`` or ``layer``: switch the head off or on
    again, and its whole layer (the grid row) off, or on again when every head of it is off."""
    head_off = bool(off) and off[row * cols + col]
    layer_off = bool(off) and all(off[row * cols: (row + 1) * cols])
    return [("Switch head on" if head_off else "Switch head off", "head"),
            ("Switch layer on" if layer_off else "Switch layer off", "layer")]


def source_bars(trace: AttentionTrace, selection: Selection) -> BarsState:
    """The cross-attention row of the current step over the source tokens: the focus view's layer and head (the
    head mean for an aggregate) when it shows cross-attention, else the mean of the last layer's heads (as titled)."""
    if trace.prompt_len is not None:
        return _prompt_bars(trace, selection)
    if "cross" not in trace.attention:
        return BarsState(labels=[], values=np.zeros(0), highlight=None, title="this model has no cross-attention")
    on_cross = selection.kind == "cross"
    layer = selection.layer if on_cross else trace.layers("cross") - 1
    weights = trace.attention["cross"][layer][:, selection.step]
    if on_cross and isinstance(selection.head, int):
        values, which = weights[selection.head], f"layer {layer}, head {selection.head}"
    else:
        values, which = weights.mean(axis=0), f"layer {layer}, mean of heads"
    strongest = int(np.argmax(values)) if len(values) else None
    return BarsState(labels=trace.src_tokens, values=values, highlight=strongest,
                     title=f"cross-attention of this step ({which})")


def _prompt_bars(trace: AttentionTrace, selection: Selection) -> BarsState:
    """A decoder-only model's step over its prompt: the step's query row's weights on the prompt's keys (the
    layer and head the focus view shows, the mean of its heads for an aggregate)."""
    row = selection.step + prompt_view.step_offset(trace)
    head = selection.head if isinstance(selection.head, int) else None
    values = prompt_view.prompt_row(trace, selection.layer, row, head=head)
    which = f"layer {selection.layer}, " + (f"head {head}" if head is not None else "mean of heads")
    strongest = int(np.argmax(values)) if len(values) else None
    return BarsState(labels=trace.src_tokens, values=values, highlight=strongest,
                     title=f"attention of this step over the prompt ({which})")


def top_k_bars(step: DecodeStep, row: int) -> BarsState:
    """The step's most likely next tokens, the chosen one highlighted, on an axis fitted to the likeliest."""
    labels = step.top_tokens[row]
    chosen = labels.index(step.tokens[row]) if step.tokens[row] in labels else None
    title = f"next token ‘{step.tokens[row]}’: p = {step.probabilities[row]:.3f}, rank {step.ranks[row] + 1}"
    values = np.asarray(step.top_probs[row], dtype=float)
    return BarsState(labels=labels, values=values, highlight=chosen, title=title,
                     top=fitted_top(float(values.max(initial=0.0))))


def step_state(result: DecodeResult, trace: AttentionTrace, selection: Selection) -> StepState:
    """The decoding panel for the selected step of ``result``."""
    index, tokens = selection.step, trace.tgt_tokens
    step = result.steps[index] if index < len(result.steps) else None
    row = result.rows[index] if step is not None else 0
    return StepState(count=prompt_view.step_count(trace), step=index, tokens=tokens,
                     produced=step.tokens[row] if step is not None else None,
                     probability=float(step.probabilities[row]) if step is not None else None,
                     top_k=top_k_bars(step, row) if step is not None else None,
                     source_bars=source_bars(trace, selection), offset=prompt_view.step_offset(trace),
                     input_name="decoder input" if trace.prompt_len is None else "input")


def beam_state(results: list[DecodeResult], steps: list[DecodeStep], *,
               coverage: dict[int, str] | None = None) -> BeamState:
    """The final hypotheses, and the tree of every hypothesis the beam kept, laid out for drawing.
    ``coverage``: per hypothesis (rank), its source contribution in words, once computed.

    A finished hypothesis is carried forward as itself (its padding rows are not new nodes).
    """
    coverage = coverage or {}
    hypotheses = [(f"{rank + 1}. {result.text}    score {result.score:.3f}  (log p {result.log_prob:.3f})"
                   + (f"  · {coverage[rank]}" if rank in coverage else ""),
                   " ".join(result.tokens)) for rank, result in enumerate(results)]
    nodes: list[BeamNode] = []
    at: dict[tuple[int, int], int] = {}  # (step, row) → node
    for step in steps:
        for row in range(step.beam_size):
            parent_row = int(step.parents[row])
            parent = at.get((step.step - 1, parent_row), -1)
            if parent >= 0 and bool(steps[step.step - 1].finished[parent_row]):
                at[(step.step, row)] = parent
                continue
            at[(step.step, row)] = len(nodes)
            nodes.append(BeamNode(token=step.tokens[row], probability=float(step.probabilities[row]),
                                  score=float(step.scores[row]), finished=bool(step.finished[row]),
                                  depth=step.step, parent=parent, token_id=int(step.token_ids[row])))
            if parent >= 0:
                nodes[parent].children.append(len(nodes) - 1)
    _lay_out(nodes)
    paths = [list(dict.fromkeys(at[(step.step, row)] for step, row in zip(result.steps, result.rows)
                                if (step.step, row) in at)) for result in results]
    return BeamState(hypotheses, nodes, paths)


def _lay_out(nodes: list[BeamNode]) -> None:
    """Leaves one slot apart in depth-first order; every other node centred on its children (iterative:
    a beam can be a thousand steps deep)."""
    next_leaf = 0.0
    stack = [(index, False) for index in reversed(range(len(nodes))) if nodes[index].parent < 0]
    while stack:
        index, children_placed = stack.pop()
        node = nodes[index]
        if not node.children:
            node.slot, next_leaf = next_leaf, next_leaf + 1
        elif children_placed:
            node.slot = (nodes[node.children[0]].slot + nodes[node.children[-1]].slot) / 2
        else:
            stack.append((index, True))
            stack.extend((child, False) for child in reversed(node.children))


def partner_line(partner: DecodeResult | str | None, name: str) -> str:
    """Model B's output with its scores, as the result line shows it under model A's."""
    if isinstance(partner, str):
        return f"model B ({name}): {partner}"
    if partner is None:
        return f"model B ({name}): running…"
    return (f"model B ({name}): {partner.text or '(empty)'} · score {partner.score:.3f} · log p {partner.log_prob:.3f}"
            f" · {len(partner.token_ids)} tokens")


def result_line(result: DecodeResult, notices: list[str], *, limit: int | None = None,
                eos_id: int | None = None, original: DecodeResult | None = None,
                partner: str | None = None, coverage: str = "", original_coverage: str = "",
                showing_original: bool = False) -> ResultLine:
    """The output, its scores, and the notices; says so when decoding stopped at ``limit`` tokens
    before the model produced its end token (``eos_id``). ``original``: the same input's output with every
    head on, when this run switched some off (shown beside it, with a token diff). ``coverage``: this run's
    source contribution in words, ``original_coverage`` the original's; the line gives the one of the run the
    views show (``showing_original``), beside that run's output; never the other run's while the shown one's is
    computed."""
    if original is None or not showing_original:
        original_coverage = ""
    else:
        coverage = ""
    score, log_prob = f"{result.score:.3f}", f"{result.log_prob:.3f}"
    # A greedy or forced run's score is its log p: said once, so that the line keeps room for the coverage.
    scores = f"log p {log_prob}" if score == log_prob else f"score {score} · log p {log_prob}"
    details = f"{scores} · {len(result.token_ids)} tokens"
    notices = list(notices)
    ended = bool(result.token_ids) and result.token_ids[-1] == eos_id
    if limit is not None and eos_id is not None and not ended and len(result.token_ids) >= limit:
        notices.append(f"Decoding stopped at the length limit ({limit} tokens) before the end of the sentence: "
                       "raise “max” to see the rest.")
    if original is None:
        return ResultLine(result.text, details, notices, partner=partner, coverage=coverage)
    return ResultLine(result.text, details, notices, original=original.text,
                      diff=token_diff(list(original.tokens), list(result.tokens)), partner=partner, coverage=coverage,
                      original_coverage=original_coverage)


def loading_text(name: str, done: int, total: int) -> str:
    """The status line while a model's weights are read: "Opening big.safetensors: weights 40% (102 of 256)"."""
    return f"Opening {name}: weights {100 * done // max(total, 1)}% ({done} of {total})"
