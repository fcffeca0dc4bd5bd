"""The ``word`` kind: one id per word of a foreign model's fixed vocabulary."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from typing import Any

from ..errors import ConfigError, EmptyInputError, UnknownCharactersError
from .moses import Moses
from .tokenizer import UNKNOWN_SURFACE
from .vocabulary import VocabularyTokenizer

WORD_SPLITS = ("whitespace", "punct", "basic", "seq2seq-tutorial", "characters", "characters-exact")
LINE_LABELS = {"\n": "↵", "\t": "⇥", "\r": "␍"}  # how a whitespace character token reads as an axis label


class WordTokenizer(VocabularyTokenizer):
    """One id per word of a fixed vocabulary (the PyTorch tutorials, jadore's torchtext fields).

    ``split`` says how text becomes words: ``whitespace`` (as is), ``punct`` (punctuation split off words,
    case kept: close to spaCy's tokenizers), ``basic`` (the same, lower-cased, like torchtext's
    ``basic_english``) or ``seq2seq-tutorial`` (the PyTorch seq2seq tutorial's
    ``normalizeString``: lower case, ASCII, ``!``/``?`` kept as words, everything else not a letter dropped)
    or ``characters`` (every character a token, spaces written ``▁``: JoeyNMT's char level) or ``characters-exact``
    (every character a token as typed, newlines and spaces included, nothing stripped: nanoGPT's character models).
    ``add_bos`` starts every encoding with ``bos_id`` (a source side trained as ``<bos> words <eos>``).
    ``moses``: Moses' tokenizer makes the words (the settings of :class:`models.text.moses.Moses`, with
    ``split`` ``whitespace``: JoeyNMT's word level after its Moses pretokenizer), and its detokenizer joins them.
    """

    kind = "word"

    def __init__(self, vocabulary: Sequence[str], specials: dict[str, int | None], *, split: str = "whitespace",
                 add_bos: bool = False, moses: dict[str, Any] | None = None):
        super().__init__(vocabulary, specials)
        if split not in WORD_SPLITS:
            raise ConfigError(f"word tokenizer split must be one of {', '.join(WORD_SPLITS)}; got {split!r}")
        if moses is not None and split != "whitespace":
            raise ConfigError(f"word tokenizer: Moses makes the words itself; split must be whitespace, not {split!r}")
        self.split, self.add_bos = split, bool(add_bos)
        self.moses = Moses(moses) if moses is not None else None

    def words(self, text: str) -> list[str]:
        if self.moses is not None:
            return self.moses.words(text)
        if self.split in ("punct", "basic"):
            return re.findall(r"\w+|[^\w\s]", text.lower() if self.split == "basic" else text)
        if self.split == "seq2seq-tutorial":
            folded = "".join(c for c in unicodedata.normalize("NFD", text.lower().strip())
                             if unicodedata.category(c) != "Mn")
            return re.sub(r"[^a-zA-Z!?]+", " ", re.sub(r"([.!?])", r" \1", folded)).split()
        if self.split == "characters":
            return list(text.strip().replace(" ", "▁"))
        if self.split == "characters-exact":
            return list(text)
        return text.split()

    def to_dict(self) -> dict[str, Any]:
        extra = {"moses": self.moses.settings} if self.moses is not None else {}
        return {**self._common_dict(), "split": self.split, "add_bos": self.add_bos, **extra}

    @classmethod
    def _from_payload(cls, data: dict[str, Any]) -> WordTokenizer:
        vocabulary, specials = cls._payload_parts(data, cls.kind)
        return cls(vocabulary, specials, split=data.get("split", "whitespace"), add_bos=bool(data.get("add_bos")),
                   moses=data.get("moses"))

    def _encode(self, text: str) -> list[int]:
        words = self.words(text)
        if not words:
            raise EmptyInputError("the text has no words once normalised")
        unknown = sorted({word for word in words if word not in self._ids})
        if unknown and self.unk_id is None:  # nothing to replace them with
            raise UnknownCharactersError(unknown)
        ids = [self._ids.get(word, self.unk_id) for word in words]
        return [self.bos_id, *ids] if self.add_bos else ids

    def _unknown_characters(self, text: str, ids: list[int]) -> list[str]:
        return sorted({word for word in self.words(text) if word not in self._ids})

    def _decode(self, ids: list[int]) -> str:
        if self.split == "characters":
            return "".join(UNKNOWN_SURFACE if i == self.unk_id else self._vocabulary[i] for i in ids).replace("▁", " ")
        if self.split == "characters-exact":
            return "".join(UNKNOWN_SURFACE if i == self.unk_id else self._vocabulary[i] for i in ids)
        words = [UNKNOWN_SURFACE if i == self.unk_id else self._vocabulary[i] for i in ids]
        return self.moses.detokenize(words) if self.moses is not None else " ".join(words)

    def _label(self, token_id: int) -> str:
        entry = self._vocabulary[token_id]
        if self.split == "characters-exact" and entry in LINE_LABELS:
            return LINE_LABELS[entry]
        return super()._label(token_id)
