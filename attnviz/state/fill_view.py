"""An encoder-only model's sentence as the window edits it: the text with one token replaced by the mask token
("Mask this token" on the focus heatmap), found from the run's token labels (no tokenizer on this side)."""

from __future__ import annotations

from models.text.tokenizer import SPACE_LABEL

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
