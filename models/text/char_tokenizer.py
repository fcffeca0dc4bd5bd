"""The ``char`` kind: one id per character, after the four shared specials (attnviz trains it)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from ..errors import ConfigError
from .tokenizer import SPACE_LABEL, SPECIAL_TOKENS, UNK_ID, UNKNOWN_SURFACE, Tokenizer


class CharTokenizer(Tokenizer):
    """One id per character: the four specials, then ``characters`` in the given order."""

    kind = "char"

    def __init__(self, characters: Sequence[str]):
        characters = list(characters)
        if not characters:
            raise ConfigError("a character tokenizer needs at least one character")
        bad = [c for c in characters if not (isinstance(c, str) and len(c) == 1)]
        if bad:
            raise ConfigError(f"character tokenizer entries must be single characters; got {bad[0]!r}")
        if len(set(characters)) != len(characters):
            raise ConfigError("character tokenizer characters must be distinct")
        self._characters = characters
        self._ids = {c: index + len(SPECIAL_TOKENS) for index, c in enumerate(characters)}

    @classmethod
    def build(cls, texts: Iterable[str]) -> CharTokenizer:
        """Vocabulary of the sorted distinct characters of ``texts``: the same texts give the same ids."""
        return cls(sorted(set().union(*texts)))

    @property
    def vocab_size(self) -> int:
        return len(SPECIAL_TOKENS) + len(self._characters)

    @property
    def characters(self) -> list[str]:
        """The vocabulary's characters in id order (a copy)."""
        return list(self._characters)

    def to_dict(self) -> dict[str, Any]:
        return self._with_normalization({"kind": self.kind, "characters": list(self._characters)})

    @property
    def lowercase_only(self) -> bool:
        return not any(character != character.lower() for character in self._characters)

    def knows(self, character: str) -> bool:
        return character in self._ids

    def unknown_surfaces(self, text: str, ids: list[int]) -> list[str]:
        return [character for character in text if character not in self._ids]

    @classmethod
    def _from_payload(cls, data: dict[str, Any]) -> CharTokenizer:
        characters = data.get("characters")
        if not isinstance(characters, list):
            raise ConfigError("character tokenizer data needs a 'characters' list")
        return cls(characters)

    def _encode(self, text: str) -> list[int]:
        return [self._ids.get(c, UNK_ID) for c in text]

    def _unknown_characters(self, text: str, ids: list[int]) -> list[str]:
        # Whitespace included: a character model has exactly the characters it was built from.
        return sorted({c for c in text if c not in self._ids})

    def _decode(self, ids: list[int]) -> str:
        offset = len(SPECIAL_TOKENS)
        return "".join(UNKNOWN_SURFACE if i == UNK_ID else self._characters[i - offset] for i in ids)

    def _label(self, token_id: int) -> str:
        character = self._characters[token_id - len(SPECIAL_TOKENS)]
        return SPACE_LABEL if character == " " else character


