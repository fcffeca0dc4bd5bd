"""Text as the model saw it in training: what a user types is brought to the vocabulary's own forms.

Typed text differs from a training corpus in ways that have nothing to do with language: a straight quote
where the corpus used curly ones, a hyphen for a dash, full-width forms, capitals for a lower-case-only
character model, tabs and line breaks. ``normalize`` applies Unicode NFKC (what sentencepiece's default
normaliser also does), turns line breaks and tabs into spaces, and replaces a character the vocabulary
lacks by a variant it has (quotes, apostrophes, dashes, ellipsis; lower case for a vocabulary without
capitals). ``nfkc-lowercase`` lowers the whole text too, for a model trained on lower-cased text
(JoeyNMT's ``lowercase: true``); ``joeynmt`` starts as JoeyNMT's ``normalize: true`` does (curly quotes
straightened, spaces tidied: ``red ?`` is ``red?``). What is still unknown after this stays in the text: the
tokenizer maps it to its unknown token and the views show the original character.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable

# nfkc-lowercase: for a model trained on lower-cased text; joeynmt: JoeyNMT's normalize: true (joeynmt_normalize)
NORMALIZATIONS = ("nfkc", "none", "nfkc-lowercase", "joeynmt", "joeynmt-lowercase")

# A character the vocabulary lacks → the variants to try, in order.
VARIANTS: dict[str, str] = {
    '"': "“”„«»″", "“": '"„«', "”": '"“»', "„": '"“', "«": '"“', "»": '"”',
    "'": "’‘‚′", "’": "'‘", "‘": "'’", "‚": "'‘",
    "-": "‐‑–—−", "‐": "-–", "‑": "-–", "–": "-—", "—": "–-", "−": "-–",
    "·": ".", "•": "·*",
}
OPENING = "“‘«„‚"
CLOSING = "”’»"
WHITESPACE = {"\t": " ", "\n": " ", "\r": " ", "\u2028": " ", "\u2029": " ", "\xa0": " "}


def normalize(text: str, knows: Callable[[str], bool], *, how: str = "nfkc", lowercase: bool = False) -> str:
    """``text`` in the vocabulary's forms; ``knows(c)``: whether the vocabulary has character ``c``."""
    if how == "none":
        return text
    text = joeynmt_normalize(text) if how.startswith("joeynmt") else unicodedata.normalize("NFKC", text)
    if how.endswith("-lowercase"):
        text = text.lower()
    text = "".join(WHITESPACE.get(character, character) for character in text)
    pieces, quotes = [], {'"': False}
    for index, character in enumerate(text):
        if knows(character):
            pieces.append(character)
            continue
        if lowercase and character.lower() != character and knows(character.lower()):
            pieces.append(character.lower())
            continue
        pieces.append(_variant(character, text, index=index, knows=knows, quotes=quotes))
    return "".join(pieces)


_STRAIGHT_QUOTES = str.maketrans({"’": "'", "“": '"', "”": '"'})


def joeynmt_normalize(text: str) -> str:
    """JoeyNMT's ``normalize: true``: NFKC, curly quotes straightened, then :func:`tidy_spaces`."""
    return tidy_spaces(unicodedata.normalize("NFKC", text).translate(_STRAIGHT_QUOTES))


def tidy_spaces(text: str) -> str:
    """JoeyNMT's space tidying: zero-width spaces dropped, runs of spaces (ideographic too) to one, no space
    before ``?!,.:``, none at the ends."""
    text = re.sub("[ \u3000]+", " ", text.replace("\u200b", ""))
    for mark in "?!,.:":
        text = text.replace(" " + mark, mark)
    return text.strip()


def _variant(character: str, text: str, index: int, knows: Callable[[str], bool], quotes: dict) -> str:
    candidates = [variant for variant in VARIANTS.get(character, "") if knows(variant)]
    if not candidates:
        return character
    if character == '"':  # straight double quotes alternate: the first opens, the next closes
        opening = quotes['"'] = not quotes['"']
    elif character == "'":  # at a word's start it opens; inside or after a word it is an apostrophe
        opening = index == 0 or text[index - 1].isspace() or text[index - 1] in "([{"
    else:
        return candidates[0]
    preferred = [variant for variant in candidates if variant in (OPENING if opening else CLOSING)]
    return (preferred or candidates)[0]
