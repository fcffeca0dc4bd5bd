"""What the window shows of contributions beyond attention weights (models/analysis/contributions.py), with no
Qt and no torch: the "Show" choices a model offers, the contribution jobs the worker runs, and the states of
the focus heatmap, the thumbnails and the decoding panel's bars computed from a ``ContributionMaps``.

A ``ContributionMaps`` holds numpy arrays laid out like the trace, so a map is shown by putting it in the place
of the trace's attention (:func:`shown_trace`) and asking the ordinary view-model for the state: labels, masks,
steps revealed and comparisons stay one code path. A per-block method's map is one "head" of its layer.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from models.analysis.catalogue import CONTRIBUTION_METHODS, WEIGHTS, ContributionMethod, method_fields
from models.nn.precisions import EXACT, rounded_weights_notice
from models.nn.ablation import NO_ABLATION, Ablation
from models.trace.records import AttentionTrace

from . import compare_view, viewmodel
from .jobs import Answer
from .session import Selection, ViewOptions

ORIGINAL = -1  # in place of a hypothesis: a run's best result with every head on (``Session.original``)


@dataclass(frozen=True)
class ShowChoice(ContributionMethod):
    """One entry of the selector bar's Show box: a method of the catalogue (models/analysis/catalogue.py: its
    label, unit, kinds, whether its maps are per head, bounded, rolled out or of the whole model) as the open model
    offers it (``reason``: why it cannot, one line; "" when it can)."""

    reason: str = ""


@dataclass(frozen=True)
class ContributionJob:
    """One method's maps for results of one run (``request_id``): per hypothesis in ``hypotheses`` its
    ``outputs`` (token ids; the decoder is fed the start token and all but the last), the source being
    ``text`` in the run's languages. ``coverage``: a background job for the hallucination signal (ALTI+'s
    source coverage of each hypothesis), apart from the job of what is shown; ``partner``: model B's result;
    ``ablation``: the heads the results were decoded with switched off, off again while their maps are
    computed; ``contrast``: per output step a contrast token or None (models/analysis/contrast.py), for the methods
    that explain a token's score (attnviz/state/contrast_view.py); ``chat``: the run's prompt was laid out by the
    model's chat template (read as the run read it)."""

    id: int
    request_id: int
    method: str
    text: str
    hypotheses: tuple[int, ...]
    outputs: tuple[tuple[int, ...], ...]
    src_lang: str = ""
    tgt_lang: str = ""
    chat: bool = False
    coverage: bool = False
    partner: bool = False
    ablation: Ablation = NO_ABLATION
    contrast: tuple[int | None, ...] | None = None

    @property
    def kind(self) -> str:
        return job_kind(coverage=self.coverage, partner=self.partner)


def job_kind(*, coverage: bool, partner: bool) -> str:
    """A contribution job's kind on the job board (attnviz/state/jobs.py)."""
    return "coverage" if coverage else "partner_contributions" if partner else "contributions"


@dataclass(frozen=True)
class ContributionAnswer(Answer):
    """The worker's answer (``job``: the :class:`ContributionJob`) for one of its hypotheses: its maps (``value``,
    a ``ContributionMaps``) and, for a coverage job, its ``coverage`` (a ``SourceCoverage``); or ``error``, or
    ``stopped``."""

    hypothesis: int = 0
    coverage: object | None = None

    @property
    def key(self) -> tuple:
        """The result and method it belongs to: request id, hypothesis, method, model B's, the contrast."""
        return self.job.request_id, self.hypothesis, self.job.method, self.job.partner, self.job.contrast


def show_choice(method: ContributionMethod | str, reason: str = "") -> ShowChoice:
    """The Show entry of a method of the catalogue (an entry, or its name)."""
    entry = CONTRIBUTION_METHODS[method] if isinstance(method, str) else method
    return ShowChoice(**method_fields(entry), reason=reason)


def choice_named(choices: tuple[ShowChoice, ...], name: str) -> ShowChoice | None:
    return next((choice for choice in choices if choice.name == name), None)


def restored_choice(choices: tuple[ShowChoice, ...], name: str) -> tuple[str, str]:
    """What a reopened session shows of its saved Show choice ``name`` on the open model: the name, and ""; or
    the attention weights, and the line saying why (a method this attnviz does not know, saved by a newer one,
    or one this model cannot give)."""
    if name == WEIGHTS:
        return WEIGHTS, ""
    choice = choice_named(choices, name)
    if choice is None:
        return WEIGHTS, (f"The session showed ‘{name[:40]}’, a method this attnviz does not know: "
                         "showing the attention weights.")
    if choice.reason:
        return WEIGHTS, (f"The session showed {choice.label}, which this model cannot give ({choice.reason}): "
                         "showing the attention weights.")
    return name, ""


def shown_trace(trace: AttentionTrace, maps) -> AttentionTrace:
    """``trace`` with ``maps``' arrays in the place of its attention (a per-block map as the layer's one head):
    the kinds the method covers, the same tokens and masks."""
    attention = {kind: [layer if maps.per_head else layer[None] for layer in layers]
                 for kind, layers in maps.layers.items() if layers and kind in trace.masks}
    return AttentionTrace(trace.src_tokens, trace.tgt_tokens, attention=attention,
                          masks={kind: trace.masks[kind] for kind in attention},
                          ablated=trace.ablated if maps.per_head else (), prompt_len=trace.prompt_len)


def shown_selection(shown: AttentionTrace, selection: Selection, choice: ShowChoice) -> Selection:
    """The selection inside what the method has: a per-block method's one map per layer, a whole-model
    method's one layer."""
    layer = min(selection.layer, shown.layers(selection.kind) - 1)
    head = selection.head if choice.per_head else 0
    if isinstance(head, int):
        head = min(head, shown.heads(selection.kind) - 1)
    return dataclasses.replace(selection, layer=layer, head=head)


# What a rolled-out map's rows say, per kind: the whole model's shares (ALTI+'s ``source`` and ``target``: each
# prediction's two add up to 1), or the encoder's blocks multiplied up to the selected layer.
ROLLOUT_WORDS = {"cross": "each prediction's share from each source token (the rest: the target prefix's)",
                 "dec_self": "each prediction's share from each target-prefix token (the rest: the source's)",
                 "enc_self": "each encoder state's share from each source token"}
# ALTI-Logit's (unbounded: logit units): each input token's part of each prediction's logit (difference)
LOGIT_ROLLOUT_WORDS = {"cross": "each source token's part of each prediction's logit (the rest: the target prefix's "
                                "and the embedding, feed-forward and bias terms)",
                       "dec_self": "each target-prefix token's part of each prediction's logit (the rest: the "
                                   "source's and the embedding, feed-forward and bias terms)"}


def shows_rollout(choice: ShowChoice, selection: Selection) -> bool:
    """The "rollout" aggregate of a method with a rollout of its own (ALTI+): that rollout is shown."""
    return choice.rolls_out and selection.head == "rollout"


def rollout_trace(trace: AttentionTrace, maps, selection: Selection) -> AttentionTrace:
    """``trace`` with the method's own rollout of the selected kind as its one layer and head: the whole
    model's ``source`` (cross) or ``target`` (decoder self-attention) maps, or the encoder's blocks multiplied
    through the selected layer."""
    kind = selection.kind
    if kind == "cross":
        matrix = maps.source
    elif kind == "dec_self":
        matrix = maps.target
    else:
        matrix = np.eye(len(trace.src_tokens), dtype=np.float64)
        for block in maps.layers[kind][: selection.layer + 1]:
            matrix = block.astype(np.float64) @ matrix
    return AttentionTrace(trace.src_tokens, trace.tgt_tokens, attention={kind: [np.asarray(matrix, np.float32)[None]]},
                          masks={kind: trace.masks[kind]}, prompt_len=trace.prompt_len)


def head_label(head: int | str, choice: ShowChoice | None) -> str:
    """How the head box names what choosing ``head`` shows of ``choice`` (None: the attention weights): a head
    or an aggregate of heads, the method's own rollout or a rollout of its maps, or the one map a per-block or
    whole-model method has whatever head is chosen. The titles name the map the same way."""
    if choice is None:
        return viewmodel.head_name(head)
    if choice.whole_model:
        return f"{choice.label}, whole model"
    if head == "rollout" and (choice.rolls_out or choice.per_head):
        return f"{choice.label} rollout"
    return viewmodel.head_name(head) if choice.per_head else f"{choice.label} per layer"


def selector_state(trace: AttentionTrace, selection: Selection,
                   choice: ShowChoice | None) -> viewmodel.SelectorState:
    """The selector bar with the head box offering what ``choice`` shows: each head and aggregate for a per-head
    method, else only the distinct maps (the block's, the method's own rollout); the entry shown is the one
    whose map the views show."""
    state = viewmodel.selector_state(trace, selection)
    if choice is None:
        return state
    state = dataclasses.replace(state, own_scale=own_scale(choice))
    choices: dict[str, int | str] = {}
    for _, head in state.head_choices:
        choices.setdefault(head_label(head, choice), head)  # the first head of a label stands for it
    shown = head_label(selection.head, choice)
    return dataclasses.replace(state, head_choices=tuple(choices.items()), head=choices[shown])


def own_scale(choice: ShowChoice) -> tuple[str, str]:
    """Why the selector bar's colour range and colormap do not apply to ``choice``'s maps ("" where they do): an
    unbounded method's are drawn over their own range, a signed one's on the diverging colormap about 0."""
    if choice.signed:
        drawn = (f"{choice.label} ({choice.unit}) is signed: drawn blue (below 0) – white (0) – red (above 0), "
                 "± its largest magnitude")
        return drawn, drawn
    return (f"{choice.label} ({choice.unit}) is unbounded: drawn over its own range" if not choice.bounded else "", "")


def _rollout_which(selection: Selection) -> str:
    return f"layers 0–{selection.layer}" if selection.kind == "enc_self" else "whole model"


def missing_kind(choice: ShowChoice, kind: str) -> str:
    kinds = ", ".join(viewmodel.KIND_LABELS[name].lower() for name in choice.kinds)
    return f"{choice.label} gives no {viewmodel.KIND_LABELS[kind].lower()} map; it shows {kinds}."


def lacking(trace: AttentionTrace, maps, kind: str, *, choice: ShowChoice) -> str:
    """Why ``choice``'s maps of ``kind`` cannot be shown on ``trace`` ("" when they can): the method gives no map
    of that kind, or the model has no such attention to lay it out by (:func:`shown_trace` keeps only the kinds
    both have)."""
    if kind not in maps.layers or not maps.layers[kind]:
        return missing_kind(choice, kind)
    if kind not in trace.masks:
        what = "no attention" if not trace.masks else f"no {viewmodel.KIND_LABELS[kind].lower()}"
        return f"this model has {what}: {choice.label} has no {viewmodel.KIND_LABELS[kind].lower()} map to show."
    return ""


def _which(trace: AttentionTrace, shown: AttentionTrace, selection: Selection, *, choice: ShowChoice) -> str:
    """How the title names the map shown and the method: a head, a rollout of the heads' maps, the block, or the
    whole model."""
    method = f"<b>{choice.label}</b>"
    if shown.layers(selection.kind) < trace.layers(selection.kind):
        return f"whole model · {method}"
    if not choice.per_head:
        return f"layer {selection.layer} · the block · {method}"
    if selection.head == "rollout":  # the head box's "… rollout"
        return f"layer {selection.layer} · {method} rollout"
    return f"layer {selection.layer} · {head_label(selection.head, choice)} · {method}"


def contribution_heatmap(trace: AttentionTrace, maps, selection: Selection, *, choice: ShowChoice,
                         options: ViewOptions = ViewOptions(), outputs: list[str] | None = None,
                         name: str = "", weights: str = EXACT, contrast: str = "") -> viewmodel.HeatmapState | str:
    """The focus heatmap of ``choice``'s ``maps`` at ``selection``, titled with the method (and what it explains
    where the maps are contrastive: ``contrast`` the foil's label), its colour scale titled with its unit and its
    note saying how good the numbers are (integrated gradients' completeness, weights rounded to ``weights``); or
    the line saying why the method has no such map. ``name``: a comparison pane's."""
    missing = lacking(trace, maps, selection.kind, choice=choice)
    if missing:
        return f"model {name}: {missing}" if name else missing
    shown, chosen, which = _shown_map(trace, maps, selection, choice=choice)
    drawn = options if choice.bounded else dataclasses.replace(options, colour_range="own")
    state = viewmodel.heatmap(shown, chosen, dataclasses.replace(drawn, reveal_rows=False), outputs=outputs)
    named = f"<b>{name}</b> · " if name else ""
    title = f"{named}<b>{viewmodel.KIND_LABELS[chosen.kind]}</b> · {which}{contrast_title(maps, outputs, contrast)}"
    if not shows_rollout(choice, selection):
        title += rounding_note(maps, chosen.kind, chosen.layer)
    stem = (f"{chosen.kind}-rollout" if shows_rollout(choice, selection) else state.file_stem) + f"-{choice.name}"
    unit = shown_unit(choice, maps)
    state = dataclasses.replace(state, title=title, scale_title=unit, file_stem=stem, quantity=choice.label,
                                note=contribution_note(maps, outputs=outputs, weights=weights))
    if options.reveal_rows:
        state = viewmodel.reveal(state, chosen.kind, step=chosen.step, colour_range=drawn.colour_range)
    return signed_scale(state) if choice.signed else state


def signed_scale(state: viewmodel.HeatmapState) -> viewmodel.HeatmapState:
    """A signed map (logit terms) drawn on the diverging colormap, symmetric about 0 over what it shows."""
    shown = None if state.revealed is None else ~viewmodel.unrevealed(state.matrix.shape, state.revealed)
    mask = shown if state.mask is None or shown is None else state.mask & shown
    return dataclasses.replace(state, levels=compare_view.signed_levels(state.matrix, mask),
                               colormap=compare_view.DIVERGING_COLORMAP)


def negated(trace: AttentionTrace) -> AttentionTrace:
    """``trace`` with every map negated (its shrunk thumbnails hold each block's lowest value, negated)."""
    return dataclasses.replace(trace, attention={kind: [-layer for layer in layers]
                                                 for kind, layers in trace.attention.items()})


def signed_grid(grid: viewmodel.GridState, *, lowest: viewmodel.GridState | None = None) -> viewmodel.GridState:
    """Signed thumbnails (logit terms) on the diverging colormap, one range for all of them so heads compare:
    symmetric about 0, ± the largest magnitude across the grid's shown cells (not generated yet: NaN, left out).
    ``lowest``: the same grid of the negated maps, where the thumbnails are shrunk; each block then shows its value
    of the larger magnitude, so a strong negative term survives the shrinking as a strong positive one does."""
    if lowest is not None:
        grid = dataclasses.replace(grid, matrices=[np.where(-low > high, low, high) for high, low in zip(
            grid.matrices, [-matrix for matrix in lowest.matrices])])
    cells = [matrix.ravel() for matrix in grid.matrices if matrix.size]
    every = np.concatenate(cells) if cells else np.zeros(0, dtype=np.float32)
    return dataclasses.replace(grid, levels=compare_view.signed_levels(every),
                               colormap=compare_view.DIVERGING_COLORMAP)


def shown_unit(choice: ShowChoice, maps) -> str:
    """The unit of ``choice``'s ``maps``: a gradient method's of a logit difference where they are contrastive."""
    return choice.unit.replace("log p", "Δlogit") if contrast_title(maps) else choice.unit


def contrast_title(maps, outputs: list[str] | None = None, foil: str = "") -> str:
    """What the title adds for contrastive maps (Yin & Neubig 2022: ``maps.contrast``, a foil per step or None):
    "logit(y) − logit(y′)", naming the step's token (``outputs``) and the foil where there is one step; else
    nothing."""
    contrast = getattr(maps, "contrast", None) or ()
    steps = [step for step, token in enumerate(contrast) if token is not None]
    if not steps:
        return ""
    other = f"‘{foil}’" if foil else "y′"
    if len(steps) > 1:
        return f" · logit(y) − logit({other})"
    step = steps[0]
    chosen = f"‘{outputs[step]}’" if outputs is not None and step < len(outputs) else "y"
    return f" · logit({chosen}) − logit({other})"


def rounding_note(maps, kind: str, layer: int) -> str:
    """What the title adds where a block's rows are 0 because zeroing any value changed the layer's output by
    rounding alone (value zeroing's ``rounding_rows``), else nothing."""
    rows = getattr(maps, "rounding_rows", {}).get(kind) or []
    if layer >= len(rows) or not rows[layer].any():
        return ""
    count, total = int(rows[layer].sum()), len(rows[layer])
    return f" · {'every row' if count == total else f'{count} of {total} rows'} 0: changed by rounding alone"


def contribution_note(maps, *, outputs: list[str] | None = None, weights: str = EXACT) -> str:
    """How good ``maps``' numbers are, in one line: integrated gradients' completeness (naming the steps that
    missed it by their ``outputs``), and that they come from weights rounded to ``weights``."""
    return " · ".join(line for line in (maps.completeness_line(outputs), rounded_weights_notice(weights)) if line)


def _shown_map(trace: AttentionTrace, maps, selection: Selection, *,
               choice: ShowChoice) -> tuple[AttentionTrace, Selection, str]:
    """What one pane draws of ``maps``: the trace holding it, the selection inside that trace, and how the title
    names the map and the method (a head, the block, the whole model, or the method's own rollout)."""
    if shows_rollout(choice, selection):
        shown = rollout_trace(trace, maps, selection)
        return (shown, dataclasses.replace(selection, layer=0, head=0),
                f"{_rollout_which(selection)} · <b>{choice.label}</b> rollout: "
                f"{(ROLLOUT_WORDS if choice.bounded else LOGIT_ROLLOUT_WORDS)[selection.kind]}")
    shown = shown_trace(trace, maps)
    chosen = shown_selection(shown, selection, choice)
    return shown, chosen, _which(trace, shown, chosen, choice=choice)


def contribution_difference(a: tuple[AttentionTrace, object], b: tuple[AttentionTrace, object],
                            selection: Selection, *, choice: ShowChoice,
                            options: ViewOptions = ViewOptions()) -> compare_view.ComparePane:
    """B − A of the same method's maps (each model's own), as :func:`compare_view.difference` takes it."""
    for (trace, maps), name in ((a, "A"), (b, "B")):
        missing = lacking(trace, maps, selection.kind, choice=choice)
        if missing:
            return compare_view.ComparePane(None, f"B − A not shown: model {name}: {missing}")
    shown_a, chosen, which = _shown_map(a[0], a[1], selection, choice=choice)
    shown_b, _, _ = _shown_map(b[0], b[1], selection, choice=choice)
    pane = compare_view.difference(shown_a, shown_b, chosen, options=options)
    if pane.state is None:
        return pane
    title = f"{pane.state.title} · <b>{choice.label}</b>"
    if selection.head == "rollout":  # not "attention rollout", nor the first layer's head 0 a rollout is held as
        title = f"<b>B − A</b> · {viewmodel.KIND_LABELS[selection.kind]} · {which}"
    return compare_view.ComparePane(dataclasses.replace(pane.state, title=title, scale_title=f"B − A: {choice.unit}"))


def contribution_grid(trace: AttentionTrace, maps, selection: Selection, *, choice: ShowChoice,
                      whole_kind: bool, reveal_step: int | None = None) -> viewmodel.GridState | None:
    """The thumbnails of the selected layer (``whole_kind``: of every layer) of the method's maps: every head
    of a per-head method, the block's one map of a per-block one (in the first column, the others blank: the
    grid keeps the attention's shape, so switching back and forth relabels it instead of building it anew);
    None when the method has no map of the kind."""
    if lacking(trace, maps, selection.kind, choice=choice):
        return None
    shown = shown_trace(trace, maps)
    chosen = shown_selection(shown, selection, choice)
    build = viewmodel.model_grid if whole_kind else viewmodel.head_grid
    grid = build(shown, chosen, reveal_step=reveal_step)
    if choice.signed:  # thumbnails shrink a long map to each block's largest: the negated map's keep the lowest
        shrunk = max(shown.attention[chosen.kind][0].shape[1:]) > viewmodel.THUMBNAIL_SIDE
        grid = signed_grid(grid, lowest=build(negated(shown), chosen, reveal_step=reveal_step) if shrunk else None)
    elif not choice.bounded:  # thumbnails draw 0–1: unbounded values as shares of the grid's largest
        largest = max((float(np.nanmax(matrix)) for matrix in grid.matrices if matrix.size), default=0.0)
        if largest > 0:
            grid = dataclasses.replace(grid, matrices=[matrix / largest for matrix in grid.matrices])
    if choice.per_head:
        return grid
    return _in_attention_shape(grid, layers=trace.layers(selection.kind) if whole_kind else 1,
                               heads=trace.heads(selection.kind))


def _in_attention_shape(grid: viewmodel.GridState, *, layers: int, heads: int) -> viewmodel.GridState:
    """A grid of one map per layer as ``layers × heads`` thumbnails: each map first in its row, the rest blank
    (NaN draws no colour)."""
    blank = np.full((1, 1), np.nan, dtype=np.float32)
    matrices = []
    for row in range(layers):
        matrices += [grid.matrices[row] if row < grid.rows and grid.matrices else blank] + [blank] * (heads - 1)
    row_names = grid.row_names if grid.rows == layers else [f"L{layer}" for layer in range(layers)]
    if grid.rows < layers:  # a whole-model map: one row, named so
        row_names = ["all"] + [""] * (layers - 1)
    return dataclasses.replace(grid, rows=layers, cols=heads, row_names=row_names,
                               col_names=["block"] + [""] * (heads - 1), matrices=matrices if grid.matrices else [],
                               off=[False] * (layers * heads))


def contribution_bars(trace: AttentionTrace, maps, selection: Selection, *, choice: ShowChoice) -> viewmodel.BarsState:
    """The decoding panel's bars over the source at the selected step: the whole model's source contributions
    where the method has them (ALTI+ rolled out, gradients), else the cross map of the selected layer."""
    if maps.source is not None:
        values = np.asarray(maps.source[min(selection.step, len(maps.source) - 1)], dtype=np.float32)
        side = "prompt" if trace.prompt_len is not None else "source"
        title = f"{choice.label} of each {side} token to this step (whole model)"
    elif trace.prompt_len is not None or not lacking(trace, maps, "cross", choice=choice):
        shown = shown_trace(trace, maps)
        bars = viewmodel.source_bars(shown, shown_selection(shown, selection, choice))
        values, title = bars.values, f"{choice.label}: {bars.title.replace('cross-attention of ', '')}"
        title = title.replace("attention of this step", "this step")
    else:
        return bars_saying(lacking(trace, maps, "cross", choice=choice))
    strongest = int(np.argmax(np.abs(values) if choice.signed else values)) if len(values) else None
    top = 1.0 if choice.bounded else max(float(values.max(initial=0.0)), 1e-6)
    bottom = min(float(values.min(initial=0.0)), 0.0) if choice.signed else 0.0  # signed: bars below 0 too
    return viewmodel.BarsState(labels=trace.src_tokens, values=values, highlight=strongest, title=title, top=top,
                               bottom=bottom, unit=shown_unit(choice, maps))


def bars_saying(line: str) -> viewmodel.BarsState:
    """The decoding panel's bars when the shown method has none (it is computing, or the model cannot give it):
    no bar, the line in their place, so the attention weights never pass for the method's values."""
    return viewmodel.BarsState(labels=[], values=np.zeros(0), highlight=None, title=line)


def coverage_text(coverage, src_tokens: list[str]) -> str:
    """The hallucination signal (Dale et al. 2023) in words: the output's mean source contribution and its
    least-covered source token."""
    token = src_tokens[coverage.least_covered] if coverage.least_covered < len(src_tokens) else "?"
    return f"ALTI+ source contribution {coverage.avg_source:.2f}, least ‘{token}’ {coverage.min_source_token:.2f}"
