"""The ``tokenizer-json`` kind: a Hugging Face ``tokenizer.json`` run with the ``tokenizers`` library (also how
subword-nmt codes run: their merges become a BPE definition, with ``split_back`` as subword-nmt's vocabulary
filter), and the labels of byte-level BPE pieces."""

from __future__ import annotations

import copy
import json
from collections.abc import Sequence
from typing import Any

from ..errors import ConfigError, DataError, EmptyInputError
from .moses import Moses
from .vocabulary import VocabularyTokenizer


class TokenizerJsonTokenizer(VocabularyTokenizer):
    """A Hugging Face ``tokenizer.json`` (fast tokenizer: byte-level BPE, sentencepiece-style and others),
    run with the ``tokenizers`` library; ``vocabulary`` labels the model's ids (ids the file lacks read as
    ``<id N>``). ``add_special_tokens``: encode as the file's post-processor frames a source (BART:
    ``<s> … </s>``; mBART: ``… </s> en_XX``), so a model using it must not append ``</s>`` itself.
    ``beyond_is_unknown``: ids the definition gives beyond the model's vocabulary are the unknown token (symbols a
    BPE makes that the model's vocabulary lacks); otherwise they are an error. ``split_back``: such a symbol is
    first split back into the two its merge joined, again and again, until the vocabulary has each part
    (subword-nmt's vocabulary filter, as JoeyNMT applies it); a character the vocabulary lacks stays unknown.
    ``moses``: ``{"lang": "en", "lowercase": false}`` splits text into words the way fairseq's WMT models were
    trained (Moses punctuation normalisation and tokenisation, with the ``sacremoses`` package) before the
    definition's model runs on each word; decoding joins the words with Moses' detokenizer. With
    ``"style": "joeynmt"`` (and ``"normalize"``) the words are made as JoeyNMT's Moses pretokenizer makes them
    (see :class:`models.text.moses.Moses`)."""

    kind = "tokenizer-json"

    def __init__(self, definition: str, vocabulary: Sequence[str], specials: dict[str, int | None], *,
                 add_special_tokens: bool = False, beyond_is_unknown: bool = False, split_back: bool = False,
                 moses: dict[str, Any] | None = None, languages: dict[str, int] | None = None,
                 language: str | None = None, force_language: bool = False):
        super().__init__(vocabulary, specials)
        if beyond_is_unknown and self.unk_id is None:
            raise ConfigError("tokenizer-json: beyond_is_unknown needs an unknown token")
        self.beyond_is_unknown = bool(beyond_is_unknown)
        if split_back and not beyond_is_unknown:
            raise ConfigError("tokenizer-json: split_back needs beyond_is_unknown")
        self._merged_from = _merges_of(definition) if split_back else None
        self.moses = Moses(moses) if moses is not None else None
        self._set_languages(languages, language, force_language=force_language)
        try:  # only checkpoints that carry a tokenizer.json need the library
            from tokenizers import Tokenizer as FastTokenizer
        except ImportError:
            raise ConfigError("this tokenizer needs the 'tokenizers' package: pip install tokenizers") from None

        if not isinstance(definition, str):
            raise ConfigError("tokenizer-json data needs its 'definition' as a JSON string")
        try:
            self._tokenizer = FastTokenizer.from_str(definition)
        except Exception as error:  # the library raises its own exception type for any malformed file
            raise ConfigError(f"not a tokenizer.json definition ({str(error).splitlines()[0]})") from None
        self._definition, self.add_special_tokens = definition, bool(add_special_tokens)
        self._byte_level = _is_byte_level(definition)

    def _label(self, token_id: int) -> str:
        """Byte-level BPE pieces (GPT-2, BART, RoBERTa) read as the text they stand for: ``Ġcat`` is ``▁cat``
        (a word start, as sentencepiece writes it), ``Ã©`` is ``é``; a piece holding part of a character
        shows its bytes (``<0xC3>``). Special and added tokens keep their names."""
        entry = super()._label(token_id)
        if not self._byte_level or token_id in self._special_ids():
            return entry
        return byte_level_label(entry)

    def _special_ids(self) -> set[int]:
        cached = self.__dict__.get("_specials_cache")
        if cached is None:
            cached = {index for index in self._tokenizer.get_added_tokens_decoder()}
            self.__dict__["_specials_cache"] = cached
        return cached

    def to_dict(self) -> dict[str, Any]:
        extra: dict[str, Any] = {"beyond_is_unknown": True} if self.beyond_is_unknown else {}  # absent: as before
        if self._merged_from is not None:
            extra["split_back"] = True
        if self.moses is not None:
            extra["moses"] = self.moses.settings
        if self._languages:
            extra.update(languages=dict(self._languages), language=self.language, force_language=self.force_language)
        return {**self._common_dict(), "definition": self._definition, "add_special_tokens": self.add_special_tokens,
                **extra}

    @classmethod
    def _from_payload(cls, data: dict[str, Any]) -> TokenizerJsonTokenizer:
        vocabulary, specials = cls._payload_parts(data, cls.kind)
        languages, language = cls._payload_languages(data, cls.kind)
        return cls(data.get("definition"), vocabulary, specials,
                   add_special_tokens=bool(data.get("add_special_tokens", False)),
                   beyond_is_unknown=bool(data.get("beyond_is_unknown", False)),
                   split_back=bool(data.get("split_back", False)), moses=data.get("moses"),
                   languages=languages, language=language, force_language=bool(data.get("force_language", False)))

    def unframed(self) -> TokenizerJsonTokenizer:
        """This tokenizer encoding text as it is, without the post-processor's frame: a rendered chat writes its
        own special tokens (transformers' ``apply_chat_template(tokenize=True)`` encodes with
        ``add_special_tokens=False``)."""
        plain = copy.copy(self)
        plain.add_special_tokens = False
        return plain

    def _encoded(self, text: str, add_special_tokens: bool) -> list[int]:
        if self.moses is not None:
            words = self.moses.words(text)
            if not words:  # only characters Moses drops
                return []
            encoding = self._tokenizer.encode(words, is_pretokenized=True, add_special_tokens=add_special_tokens)
        else:
            encoding = self._tokenizer.encode(text, add_special_tokens=add_special_tokens)
        ids = encoding.ids
        if add_special_tokens and self.language is not None:
            # The post-processor frames every source with the language it was saved with; the chosen
            # language's code takes the place of any language code the frame added.
            codes, chosen = set(self._languages.values()), self._languages[self.language]
            ids = [chosen if added and token_id in codes else token_id
                   for token_id, added in zip(ids, encoding.special_tokens_mask)]
        if self._merged_from is not None:
            ids = [part for token, token_id in zip(encoding.tokens, ids)
                   for part in ([token_id] if token_id < self.vocab_size else self._split_back(token))]
        if self.beyond_is_unknown:
            return [self.unk_id if token_id >= self.vocab_size else token_id for token_id in ids]
        return ids

    def _encode(self, text: str) -> list[int]:
        ids = self._encoded(text, self.add_special_tokens)
        if not ids:
            raise EmptyInputError("the text has no words once normalised")
        outside = [token_id for token_id in ids if token_id >= self.vocab_size]
        if outside:
            raise DataError(f"the tokenizer gives id {outside[0]}, beyond the model's vocabulary ({self.vocab_size})")
        return ids

    def _unknown_characters(self, text: str, ids: list[int]) -> list[str]:
        if self.unk_id is None or self.unk_id not in ids:
            return []
        return sorted({c for c in text if not c.isspace()
                       and self.unk_id in self._encoded(c, False)})

    def _split_back(self, symbol: str, depth: int = 0) -> list[int]:
        """Ids of the parts of ``symbol`` (one the vocabulary lacks), split back through the merges."""
        parts = self._merged_from.get(symbol) if depth < 200 else None
        if parts is None:  # a single character, or beyond any sensible depth
            return [self.unk_id]
        ids = []
        for part in parts:
            part_id = self._tokenizer.token_to_id(part)
            ids.extend([part_id] if part_id is not None and part_id < self.vocab_size else
                       self._split_back(part, depth + 1))
        return ids

    def _decode(self, ids: list[int]) -> str:
        text = self._tokenizer.decode(ids, skip_special_tokens=True).strip()
        return self.moses.detokenize(text.split()) if self.moses is not None else text


def _merges_of(definition: str) -> dict[str, tuple[str, str]]:
    """A BPE definition's merges as merged symbol → the two it was made of."""
    try:
        merges = json.loads(definition)["model"]["merges"]
    except (ValueError, KeyError, TypeError):
        raise ConfigError("tokenizer-json: split_back needs a BPE definition with merges") from None
    pairs = [tuple(merge.split(" ", 1)) if isinstance(merge, str) else tuple(merge) for merge in merges]
    if not all(len(pair) == 2 and all(isinstance(part, str) for part in pair) for pair in pairs):
        raise ConfigError("tokenizer-json: a BPE merge is not two symbols")
    merged: dict[str, tuple[str, str]] = {}
    for first, second in pairs:
        merged.setdefault(first + second, (first, second))  # the first (highest ranked) merge made it
    return merged




def _byte_level_alphabet() -> dict[str, int]:
    """The characters byte-level BPE writes each byte as (printable bytes as themselves, the rest moved to
    U+0100 on, in byte order), mapped back to the byte."""
    printable = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAC + 1), *range(0xAE, 0xFF + 1)]
    moved = [byte for byte in range(256) if byte not in printable]
    return {**{chr(byte): byte for byte in printable}, **{chr(256 + index): byte for index, byte in enumerate(moved)}}


_BYTE_LEVEL = _byte_level_alphabet()


def byte_level_label(piece: str) -> str:
    """A byte-level BPE piece as readable text (see :meth:`TokenizerJsonTokenizer._label`)."""
    if not piece or any(character not in _BYTE_LEVEL for character in piece):
        return piece
    data = bytes(_BYTE_LEVEL[character] for character in piece)
    try:
        text = data.decode("utf-8")
        if not all(character.isprintable() or character in " \n\t" for character in text):
            raise UnicodeDecodeError("utf-8", data, 0, len(data), "a control character draws as a box")
    except UnicodeDecodeError:
        return "".join(f"<0x{byte:02X}>" if byte >= 0x80 or not chr(byte).isprintable() and byte != 0x20
                       else chr(byte) for byte in data).replace(" ", "▁")
    return "".join("▁" if character == " " else "↵" if character == "\n" else "⇥" if character == "\t"
                   else character for character in text)


def _is_byte_level(definition: str) -> bool:
    """Whether a tokenizer.json writes its pieces in byte-level BPE's alphabet (its decoder says so)."""
    try:
        decoder = json.loads(definition).get("decoder") or {}
    except (ValueError, AttributeError):
        return False
    parts = decoder.get("decoders", []) if decoder.get("type") == "Sequence" else [decoder]
    return any(isinstance(part, dict) and part.get("type") == "ByteLevel" for part in parts)


