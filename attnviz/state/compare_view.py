"""What a comparison of two models shows (File → Compare With…): model A's and model B's map at one selection,
and B − A where both have the same query and key tokens, or why a pane has none. Plain data, as the rest of the
view-model (viewmodel.py)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from models.trace.records import AttentionTrace

from . import prompt_view
from .session import Selection, ViewOptions
from .viewmodel import AXIS_NAMES, KIND_LABELS, HeatmapState, export_name, head_name, heatmap, matrix_of, reveal


DIVERGING_COLORMAP = "CET-D1"  # every signed map's (B − A, logit terms): blue (below 0) – white (0) – red (above 0)


def signed_levels(matrix: np.ndarray, mask: np.ndarray | None = None) -> tuple[float, float]:
    """A signed map's colour range: symmetric about 0, ± the largest magnitude of its finite cells (those ``mask``
    lets attend, where it has any); never an empty range."""
    cells = matrix[mask] if mask is not None and mask.shape == matrix.shape and mask.any() else matrix.ravel()
    finite = np.abs(cells[np.isfinite(cells)])
    bound = float(finite.max()) if finite.size and finite.max() > 0 else 1e-6
    return -bound, bound


@dataclass(frozen=True)
class ComparePane:
    """One pane of the comparison: a heatmap, or why there is none (``state`` None)."""

    state: HeatmapState | None
    message: str = ""


@dataclass(frozen=True)
class CompareState:
    """Model A and model B at the same selection, and B − A where both have the same query and key tokens."""

    a: ComparePane
    b: ComparePane
    diff: ComparePane


def _missing(trace: AttentionTrace, selection: Selection, name: str) -> str:
    """Why ``trace`` cannot show ``selection`` (""): a kind, layer or head the model lacks."""
    kind, layer, head = selection.kind, selection.layer, selection.head
    if kind not in trace.attention:
        return f"model {name} has no {KIND_LABELS[kind].lower()}"
    if layer >= trace.layers(kind):
        return f"model {name} has no layer {layer} of {KIND_LABELS[kind].lower()} (it has {trace.layers(kind)})"
    if isinstance(head, int) and head >= trace.heads(kind):
        heads = trace.heads(kind)
        return f"model {name} has no head {head} (it has {heads} head{'s' if heads != 1 else ''})"
    return ""


def compare_pane(trace: AttentionTrace, selection: Selection, name: str, options: ViewOptions = ViewOptions(),
                 outputs: list[str] | None = None) -> ComparePane:
    missing = _missing(trace, selection, name)
    if missing:
        return ComparePane(None, missing)
    state = heatmap(trace, selection, options=options, outputs=outputs)
    return ComparePane(dataclasses.replace(state, title=f"<b>{name}</b> · {state.title}"))


def first_difference(a: list[str], b: list[str]) -> str:
    """Where two token sequences part: "" when equal, else the first differing position and both tokens."""
    if a == b:
        return ""
    position = next((index for index, (left, right) in enumerate(zip(a, b)) if left != right), min(len(a), len(b)))

    def shown(tokens: list[str]) -> str:
        return f"‘{tokens[position]}’" if position < len(tokens) else "nothing"

    return f"from token {position} ({shown(a)} in A, {shown(b)} in B; {len(a)} vs {len(b)} tokens)"


FORCE_B_HINT = "File → Force B to A's Output decodes B along A's output"


def _unequal_tokens(a: AttentionTrace, b: AttentionTrace, kind: str) -> str:
    """Why B − A cannot be taken cell by cell: the rows or columns are other tokens ("" when they agree).
    The source is named before the decoder's tokens, which follow from it."""
    if kind != "dec_self" and a.src_tokens != b.src_tokens:
        return (f"the source tokens differ {first_difference(a.src_tokens, b.src_tokens)}, "
                "so the models' tokenizers differ")
    if kind != "enc_self" and a.tgt_tokens != b.tgt_tokens:
        return (f"the outputs differ {first_difference(a.tgt_tokens, b.tgt_tokens)}: the rows are other queries "
                f"({FORCE_B_HINT})")
    return ""


def difference(a: AttentionTrace, b: AttentionTrace, selection: Selection,
               options: ViewOptions = ViewOptions()) -> ComparePane:
    """B − A of the selected map on a symmetric range, or why it cannot be taken (never worded as "no
    difference": the models may differ a lot where no map can be subtracted)."""
    for trace, name in ((a, "A"), (b, "B")):
        missing = _missing(trace, selection, name)
        if missing:
            return ComparePane(None, f"B − A not shown: {missing}.")
    kind = selection.kind
    unequal = _unequal_tokens(a, b, kind)
    if unequal:
        return ComparePane(None, f"B − A not shown: {unequal}.")
    matrix = (matrix_of(b, selection).astype(np.float32) - matrix_of(a, selection).astype(np.float32))
    finite = np.abs(matrix[np.isfinite(matrix)])
    mask = a.masks[kind]
    decoder_rows = kind in ("dec_self", "cross")
    same = " · identical: every weight equal" if finite.size == matrix.size and not finite.any() else ""
    state = HeatmapState(
        matrix=matrix, mask=mask, query_labels=a.query_tokens(kind), key_labels=a.key_tokens(kind),
        title=f"<b>B − A</b> · {KIND_LABELS[kind]} · layer {selection.layer} · {head_name(selection.head)}{same}",
        axis_names=AXIS_NAMES[kind], levels=signed_levels(matrix), colormap=DIVERGING_COLORMAP,
        step_row=selection.step if decoder_rows else None,
        file_stem=f"diff-{export_name(kind, selection.layer, selection.head)}",
        approximate=a.half_precision or b.half_precision)
    return ComparePane(reveal(state, kind, step=selection.step) if options.reveal_rows else state)


def compare_state(a: AttentionTrace, b: AttentionTrace, selection: Selection,
                  options: ViewOptions = ViewOptions()) -> CompareState:
    """The comparison at one selection (the same kind, layer, head and step for both models). A decoder-only
    model beside an encoder-decoder one shows its steps' attention over the prompt as cross-attention
    (prompt_view.comparable), the map the two share."""
    prompted = (a.prompt_len is not None, b.prompt_len is not None)
    a, b, kind, note = prompt_view.comparable(a, b, selection.kind)
    selection = dataclasses.replace(selection, kind=kind)
    panes = [compare_pane(trace, selection, name=name, options=options) for trace, name in ((a, "A"), (b, "B"))]
    if note:
        panes = [_noted(pane, note) if shown else pane for pane, shown in zip(panes, prompted)]
    return CompareState(a=panes[0], b=panes[1], diff=difference(a, b, selection, options=options))


def _noted(pane: ComparePane, note: str) -> ComparePane:
    if pane.state is None:
        return pane
    return ComparePane(dataclasses.replace(pane.state, title=f"{pane.state.title} · {note}"), pane.message)
