"""An encoder-only model's run as the window shows and edits it: the decoding panel over its masked positions, and
the text with one token replaced by the mask token ("Mask this token" on the focus heatmap), found from the run's
token labels (no tokenizer on this side)."""

from __future__ import annotations

import dataclasses
import html

import numpy as np

from models.text.tokenizer import SPACE_LABEL
from models.trace.records import AttentionTrace, DecodeResult

from .session import Selection
from .viewmodel import BarsState, StepState, top_k_bars

NOTHING_FILLED = "Nothing is filled: the notice above says why; the views show the sentence's attention."
NO_MASK_CAPTION = "No token is masked: right-click a token on the heatmap to mask it, or type the mask in the sentence."

WORD_MARKERS = ("##", "Ġ", "▁")  # WordPiece's continuation, BPE's and SentencePiece's word start


def token_spans(text: str, labels: list[str]) -> list[tuple[int, int] | None]:
    """Where each token label lies in ``text`` (start, end), searched left to right ignoring case; None for a token
    the text does not spell (``[CLS]``, ``</s>``, an unknown token's placeholder)."""
    spans: list[tuple[int, int] | None] = []
    folded, cursor = text.casefold(), 0
    for label in labels:
        core = " " if label == SPACE_LABEL else label
        for marker in WORD_MARKERS:
            if core.startswith(marker) and len(core) > len(marker):
                core = core[len(marker):]
        start = folded.find(core.casefold(), cursor) if core else -1
        if start < 0 or folded[cursor:start].strip():  # only whitespace may lie between two tokens
            spans.append(None)
            continue
        spans.append((start, start + len(core)))
        cursor = start + len(core)
    return spans


def masked_text(text: str, labels: list[str], position: int, *, mask: str) -> str | None:
    """``text`` with the token at ``position`` (an index into ``labels``, the run's source tokens) replaced by
    ``mask``; None when that token is not spelt in the text (a special token) or is a mask already."""
    spans = token_spans(text, labels)
    span = spans[position] if 0 <= position < len(spans) else None
    if span is None or labels[position] == mask:
        return None
    return text[:span[0]] + mask + text[span[1]:]


def fill_step_state(result: DecodeResult, trace: AttentionTrace, selection: Selection, *,
                    maskable: bool = True) -> StepState:
    """The decoding panel of an encoder-only run (attnviz/gui/work.py ``fill_result``: one step per masked position,
    its ``step`` the position): the selected mask's top-k, and what that position attends to in the selected layer
    and head (the mean of the heads for an aggregate); with no mask, empty charts saying so (how to mask a token
    where the model can fill one: ``maskable``)."""
    masks = result.steps
    if not masks:
        nothing = BarsState(labels=[], values=np.zeros(0), highlight=None, title="nothing filled")
        return StepState(count=0, step=0, tokens=[], produced=None, probability=None, top_k=nothing,
                         source_bars=nothing, caption=NO_MASK_CAPTION if maskable else NOTHING_FILLED)
    index = min(max(selection.step, 0), len(masks) - 1)
    step = masks[index]
    position, best, probability = step.step, step.tokens[0], float(step.probabilities[0])
    top_k = dataclasses.replace(top_k_bars(step, 0), title=f"mask at {position}: ‘{best}’, p = {probability:.3f}")
    layer = min(selection.layer, trace.layers("enc_self") - 1)
    weights = trace.attention["enc_self"][layer][:, position].astype(float)
    if isinstance(selection.head, int):
        values, which = weights[selection.head], f"layer {layer}, head {selection.head}"
    else:
        values, which = weights.mean(axis=0), f"layer {layer}, mean of heads"
    bars = BarsState(labels=list(trace.src_tokens), values=values, highlight=position,
                     title=f"what the mask at {position} attends to ({which})")
    caption = (f"Mask {index + 1} of {len(masks)}, position {position} "
               f"‘{html.escape(trace.src_tokens[position])}’ &nbsp;→&nbsp; <b>{html.escape(best)}</b> "
               f"(p = {probability:.3f})")
    return StepState(count=len(masks), step=index, tokens=[], produced=best, probability=probability, top_k=top_k,
                     source_bars=bars, caption=caption)


def fill_details(result: DecodeResult) -> str:
    """What the output line says beside a filled sentence: how many masks, and each one's most likely token's
    probability ("2 masks filled · p 0.370, 0.912")."""
    count = len(result.steps)
    if not count:
        return "no token masked"
    probabilities = ", ".join(f"{float(step.probabilities[0]):.3f}" for step in result.steps)
    return f"{count} mask{'s' if count > 1 else ''} filled · p {probabilities}"
