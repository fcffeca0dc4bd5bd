"""The shared base of the vocabulary kinds (``word``, ``sentencepiece-vocab``, ``tokenizer-json``): a foreign
checkpoint's vocabulary and special ids, kept as it was trained (see models/text/tokenizer.py)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from types import MappingProxyType
from typing import Any

from ..errors import ConfigError
from .tokenizer import SPACE_LABEL, Tokenizer

SPECIAL_ROLES = ("pad", "unk", "bos", "eos")


class VocabularyTokenizer(Tokenizer):
    """Base of the kinds whose vocabulary and special ids come from a foreign checkpoint.

    ``vocabulary[i]`` is the label of id ``i``; ``specials`` maps ``pad``, ``unk``, ``bos``, ``eos`` to ids
    (``unk`` may be None: such a vocabulary cannot represent unknown input at all). A multilingual vocabulary
    (the kinds that take ``languages``) maps language codes to ids; ``force_language`` makes the chosen one every
    output's first token (a target side).
    """

    _languages: Mapping[str, int] = MappingProxyType({})  # a kind with languages sets its own in _set_languages
    force_language = False

    def __init__(self, vocabulary: Sequence[str], specials: dict[str, int | None]):
        vocabulary = list(vocabulary)
        if not vocabulary or not all(isinstance(entry, str) for entry in vocabulary):
            raise ConfigError(f"a {self.kind} tokenizer needs a non-empty list of strings as its vocabulary")
        self._vocabulary = vocabulary
        self._ids: dict[str, int] = {}
        for index, entry in enumerate(vocabulary):
            self._ids.setdefault(entry, index)  # a duplicated entry encodes to its first id
        self._specials = self._checked_specials(specials, len(vocabulary))

    def _set_languages(self, languages: dict[str, int] | None, language: str | None, *,
                       force_language: bool) -> None:
        languages = dict(languages or {})
        if not all(isinstance(code, str) and isinstance(index, int) and not isinstance(index, bool)
                   and 0 <= index < len(self._vocabulary) for code, index in languages.items()):
            raise ConfigError(f"{self.kind} languages must map codes to ids inside the vocabulary")
        self._languages, self.force_language = languages, bool(force_language)
        if language is not None:
            self.set_language(language)

    @property
    def languages(self) -> dict[str, int]:
        return dict(self._languages)

    def first_tokens(self) -> list[int]:
        return [self._languages[self.language]] if self.force_language and self.language else []

    def _checked_specials(self, specials: dict[str, int | None], size: int) -> dict[str, int | None]:
        if not isinstance(specials, dict) or set(specials) != set(SPECIAL_ROLES):
            raise ConfigError(f"{self.kind} tokenizer specials must name exactly {', '.join(SPECIAL_ROLES)}")
        for role, value in specials.items():
            optional = role == "unk" and value is None
            if not optional and not (isinstance(value, int) and not isinstance(value, bool) and 0 <= value < size):
                raise ConfigError(f"{self.kind} tokenizer: the {role} id must be below the vocabulary size ({size}); "
                                  f"got {value!r}")
        return dict(specials)

    @property
    def pad_id(self) -> int:
        return self._specials["pad"]

    @property
    def unk_id(self) -> int | None:
        return self._specials["unk"]

    @property
    def bos_id(self) -> int:
        return self._specials["bos"]

    @property
    def eos_id(self) -> int:
        return self._specials["eos"]

    @property
    def vocab_size(self) -> int:
        return len(self._vocabulary)

    @property
    def vocabulary(self) -> list[str]:
        """The labels in id order (a copy)."""
        return list(self._vocabulary)

    def decode(self, ids: Iterable[int]) -> str:
        skipped = {self.pad_id, self.bos_id, self.eos_id}
        return self._decode([token_id for token_id in self._checked(ids) if token_id not in skipped])

    def token(self, token_id: int) -> str:
        (token_id,) = self._checked([token_id])
        return self._label(token_id)

    def _label(self, token_id: int) -> str:
        entry = self._vocabulary[token_id]
        return SPACE_LABEL if entry == " " else entry

    def _common_dict(self) -> dict[str, Any]:
        return self._with_normalization({"kind": self.kind, "vocabulary": list(self._vocabulary),
                                         "specials": dict(self._specials)})

    @staticmethod
    def _payload_parts(data: dict[str, Any], kind: str) -> tuple[list[str], dict[str, Any]]:
        vocabulary, specials = data.get("vocabulary"), data.get("specials")
        if not isinstance(vocabulary, list) or not isinstance(specials, dict):
            raise ConfigError(f"{kind} tokenizer data needs a 'vocabulary' list and a 'specials' object")
        return vocabulary, specials

    @staticmethod
    def _payload_languages(data: dict[str, Any], kind: str) -> tuple[dict[str, Any] | None, str | None]:
        languages, language = data.get("languages"), data.get("language")
        if languages is not None and not isinstance(languages, dict) or \
                language is not None and not isinstance(language, str):
            raise ConfigError(f"{kind} 'languages' must be an object and 'language' a string")
        return languages, language
