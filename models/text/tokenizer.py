"""The tokenizer interface: text ↔ token ids, the kind registry that ``Tokenizer.from_dict`` reads, and the
special ids the kinds attnviz trains share.

Two families of kinds implement it. The kinds attnviz trains (``char``, ``sentencepiece``) reserve the same four
special ids, ``PAD_ID``..``EOS_ID`` = 0..3 (labelled ``SPECIAL_TOKENS``), so a model trained here never asks which
tokenizer it has. The vocabulary kinds, made by importers of foreign checkpoints (``word``,
``sentencepiece-vocab``, ``tokenizer-json``: models/text/vocabulary.py), keep the vocabulary and special ids the
foreign model was trained with: their ``pad_id``, ``unk_id``, ``bos_id`` and ``eos_id`` are per instance, anywhere
in the vocabulary (``unk_id`` may be None: a vocabulary without an unknown token), label as their vocabulary
entries, and the model config carries the same ids. Code that runs any tokenizer therefore asks it for its ids
(``tokenizer.eos_id``) rather than using the constants. ``encode`` returns ids without ``<s>``/``</s>``: adding
them is the caller's decision (the encoder and the decoder want different ones); the exceptions are a ``word``
tokenizer built with ``add_bos`` (a source side trained with a leading ``<bos>``), a ``sentencepiece-vocab`` one
that prefixes its language code, and a ``tokenizer-json`` one that frames a source as its file's post-processor
does (``add_special_tokens``).

A tokenizer is stored in checkpoint metadata as the plain JSON of ``to_dict``, whose ``"kind"`` names its class in
the registry: every kind registers itself when its class is defined, and models/text/__init__.py imports every
kind's module, so ``from_dict`` knows them all whatever a caller imported. A tokenizer records how typed text is
normalised before encoding (models/text/normalize.py), so an imported model is fed the same forms as one trained
here.
"""

from __future__ import annotations

import abc
from collections.abc import Iterable
from typing import Any, ClassVar

from ..errors import AttnvizError, ConfigError, EmptyInputError, UnknownCharactersError
from .normalize import NORMALIZATIONS, normalize

PAD_ID, UNK_ID, BOS_ID, EOS_ID = 0, 1, 2, 3
SPECIAL_TOKENS = ("<pad>", "<unk>", "<s>", "</s>")

UNKNOWN_SURFACE = "⁇"  # sentencepiece's own glyph for an unknown token, without its padding spaces
SPACE_LABEL = "␣"  # a bare space is invisible as an axis label
UNKNOWN_MODES = ("error", "replace")
_SKIPPED_BY_DECODE = frozenset({PAD_ID, BOS_ID, EOS_ID})

KINDS: dict[str, type[Tokenizer]] = {}  # a checkpoint's "kind" → the class that reads it; filled as kinds are defined


class Tokenizer(abc.ABC):
    """Maps text to token ids and back. The defaults here are the trained kinds': special ids 0..3 labelled
    ``SPECIAL_TOKENS``; the vocabulary kinds override them with the foreign model's own (see the module's
    docstring). A subclass that sets ``kind`` is a kind: it registers itself in ``KINDS`` under that key."""

    kind: ClassVar[str]
    normalization: str = "nfkc"  # how typed text is brought to the training text's forms (NORMALIZATIONS)

    def normalize(self, text: str) -> str:
        """``text`` as the training text was written (NFKC, quote/dash variants the vocabulary has, lower
        case for a vocabulary without capitals); what is still unknown stays for ``encode`` to mark."""
        return normalize(text, self.knows, how=self.normalization, lowercase=self.lowercase_only)

    def knows(self, character: str) -> bool:
        """Whether the vocabulary can write ``character`` without its unknown token."""
        cache = self.__dict__.setdefault("_known", {})
        if character not in cache:
            try:
                cache[character] = character.isspace() or self.unk_id not in self._encode(character)
            except AttnvizError:  # a vocabulary without an unknown token refuses what it lacks
                cache[character] = False
        return cache[character]

    @property
    def lowercase_only(self) -> bool:
        """A vocabulary with no capital letters (typed capitals are lowered for it)."""
        return False

    @property
    def languages(self) -> dict[str, int]:
        """Language code → token id, for multilingual vocabularies (mBART-50, M2M100, NLLB); else empty."""
        return {}

    language: str | None = None  # the chosen one of ``languages`` (see :meth:`set_language`)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        kind = cls.__dict__.get("kind")  # a shared base (no kind of its own) is not read from checkpoints
        if kind is None:
            return
        if kind in KINDS:  # two classes reading one key: which one a checkpoint gets would depend on import order
            raise TypeError(f"tokenizer kind {kind!r} is already {KINDS[kind].__name__}")
        KINDS[kind] = cls

    def set_language(self, code: str) -> None:
        """Choose the language this side reads or writes; an unknown code is one line naming the known ones."""
        if not self.languages:
            raise ConfigError(f"this model has no language codes; got {code!r}")
        if code not in self.languages and f"__{code}__" in self.languages:  # M2M100's codes, typed bare
            code = f"__{code}__"
        if code not in self.languages:
            known = sorted(self.languages)
            shown = ", ".join(known[:12]) + (f", … ({len(known)} in all)" if len(known) > 12 else "")
            raise ConfigError(f"unknown language {code!r}; this model knows {shown}")
        self.language = code

    def first_tokens(self) -> list[int]:
        """Tokens every output must start with (a target language's code, forced first); usually none."""
        return []

    def unknown_surfaces(self, text: str, ids: list[int]) -> list[str]:
        """The text behind each unknown token of ``ids`` (the encoding of ``text``), in order; empty when
        this kind cannot tell (its labels then stay the unknown token's)."""
        return []

    @property
    def pad_id(self) -> int:
        return PAD_ID

    @property
    def unk_id(self) -> int:
        return UNK_ID

    @property
    def bos_id(self) -> int:
        return BOS_ID

    @property
    def eos_id(self) -> int:
        return EOS_ID

    @property
    @abc.abstractmethod
    def vocab_size(self) -> int:
        """Number of ids, specials included."""

    def encode(self, text: str, *, unknown: str = "error") -> list[int]:
        """Ids of ``text``, without ``<s>``/``</s>`` unless the kind frames its input itself (module docstring).

        ``unknown="error"`` raises :class:`UnknownCharactersError` naming the characters (a word kind: the
        words) the vocabulary lacks (sorted, distinct); ``unknown="replace"`` maps them to ``unk_id``.
        Whitespace-only text raises :class:`EmptyInputError`: a model has nothing to attend to.
        """
        if unknown not in UNKNOWN_MODES:
            raise ValueError(f"unknown must be one of {UNKNOWN_MODES}; got {unknown!r}")
        if not text.strip():
            raise EmptyInputError("the text is empty")
        ids = self._encode(text)
        if unknown == "error":
            missing = self._unknown_characters(text, ids)
            if missing:
                raise UnknownCharactersError(missing)
        return ids

    def decode(self, ids: Iterable[int]) -> str:
        """Text of ``ids``, skipping pad/bos/eos (it does not stop at eos: cutting is the caller's
        decision); an unknown token reads as ``UNKNOWN_SURFACE``."""
        kept = [token_id for token_id in self._checked(ids) if token_id not in _SKIPPED_BY_DECODE]
        return self._decode(kept)

    def token(self, token_id: int) -> str:
        """Display label of one id for heatmap axes; the trained kinds' specials as in ``SPECIAL_TOKENS``."""
        (token_id,) = self._checked([token_id])
        if token_id < len(SPECIAL_TOKENS):
            return SPECIAL_TOKENS[token_id]
        return self._label(token_id)

    def tokens(self, ids: Iterable[int]) -> list[str]:
        """Display labels of ``ids``, one per id."""
        return [self.token(token_id) for token_id in ids]

    @abc.abstractmethod
    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable description, including ``"kind"``; the inverse of :meth:`from_dict`."""

    @staticmethod
    def from_dict(data: dict[str, Any]) -> Tokenizer:
        """Rebuild a tokenizer from :meth:`to_dict`'s output, as the class ``KINDS`` holds under its ``"kind"``;
        malformed data or an unknown kind raises :class:`ConfigError`."""
        if not isinstance(data, dict):
            raise ConfigError(f"tokenizer data must be a JSON object; got {type(data).__name__}")
        kind = data.get("kind")
        if not isinstance(kind, str) or kind not in KINDS:  # a list or dict "kind" is unhashable
            raise ConfigError(f"tokenizer kind must be one of {', '.join(sorted(KINDS))}; got {kind!r}")
        normalization = data.get("normalization", "nfkc")  # checkpoints from before it was recorded: NFKC
        if normalization not in NORMALIZATIONS:
            known = ", ".join(NORMALIZATIONS)
            raise ConfigError(f"tokenizer normalization must be one of {known}; got {normalization!r}")
        tokenizer = KINDS[kind]._from_payload(data)
        tokenizer.normalization = normalization
        return tokenizer

    def _with_normalization(self, data: dict[str, Any]) -> dict[str, Any]:
        return {**data, "normalization": self.normalization}

    def __repr__(self) -> str:
        return f"{type(self).__name__}(vocab_size={self.vocab_size})"

    # What each kind provides. Ids reaching these are ints in range(vocab_size).

    @classmethod
    @abc.abstractmethod
    def _from_payload(cls, data: dict[str, Any]) -> Tokenizer:
        """Build from a dict whose ``"kind"`` is ``cls.kind``."""

    @abc.abstractmethod
    def _encode(self, text: str) -> list[int]:
        """Ids of non-empty text, unknown characters as ``unk_id``."""

    @abc.abstractmethod
    def _unknown_characters(self, text: str, ids: list[int]) -> list[str]:
        """Sorted distinct characters of ``text`` (encoded as ``ids``) that the vocabulary lacks."""

    @abc.abstractmethod
    def _decode(self, ids: list[int]) -> str:
        """Text of ids that hold no pad/bos/eos."""

    @abc.abstractmethod
    def _label(self, token_id: int) -> str:
        """Display label of a non-special id."""

    def _checked(self, ids: Iterable[int]) -> list[int]:
        # Ids come from models as numpy or torch integers; an id outside the vocabulary means the model
        # and tokenizer do not belong together, a bug to surface rather than a label to invent.
        checked = [int(token_id) for token_id in ids]
        outside = [token_id for token_id in checked if not 0 <= token_id < self.vocab_size]
        if outside:
            raise IndexError(f"token id {outside[0]} is outside the vocabulary (size {self.vocab_size})")
        return checked


