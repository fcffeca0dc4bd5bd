"""The sentencepiece kinds, which share how a model is loaded and stored: ``sentencepiece`` (attnviz trains it;
the shared special ids) and ``sentencepiece-vocab`` (a foreign model's pieces looked up in its own vocabulary)."""

from __future__ import annotations

import base64
import binascii
import io
from collections.abc import Iterable, Sequence
from typing import Any

import sentencepiece as spm

from ..errors import ConfigError, DataError, UnknownCharactersError
from .tokenizer import BOS_ID, EOS_ID, PAD_ID, UNK_ID, UNKNOWN_SURFACE, Tokenizer
from .vocabulary import VocabularyTokenizer


def _processor(model_proto: bytes) -> spm.SentencePieceProcessor:
    try:
        return spm.SentencePieceProcessor(model_proto=model_proto)
    except RuntimeError as error:
        raise ConfigError(f"not a sentencepiece model ({error})") from None


def _encoded_model_proto(model_proto: bytes) -> str:
    return base64.b64encode(model_proto).decode("ascii")


def _decoded_model_proto(data: dict[str, Any]) -> bytes:
    encoded = data.get("model_proto")
    if not isinstance(encoded, str):
        raise ConfigError(f"{data['kind']} tokenizer data needs a base64 'model_proto' string")
    try:
        return base64.b64decode(encoded, validate=True)
    except binascii.Error as error:
        raise ConfigError(f"{data['kind']} 'model_proto' is not valid base64 ({error})") from None


class SentencePieceTokenizer(Tokenizer):
    """Subword tokenizer around a sentencepiece model, held as its serialized bytes (no files)."""

    kind = "sentencepiece"

    def __init__(self, model_proto: bytes):
        self._model_proto = bytes(model_proto)
        self._processor = _processor(self._model_proto)
        self._check_special_ids()

    @classmethod
    def train(
        cls,
        texts: Iterable[str],
        vocab_size: int,
        *,
        model_type: str = "unigram",
        character_coverage: float = 1.0,
        seed: int = 0,
    ) -> SentencePieceTokenizer:
        """Train in memory; the same texts and arguments give byte-identical models.

        ``vocab_size`` is a ceiling, not a demand, so that tiny corpora (tests, demos) still train.
        """
        sentences = [text for text in texts if text.strip()]
        if not sentences:
            raise DataError("sentencepiece training needs at least one non-empty text")
        # The generator is process-global; seeding it here keeps any sampling the trainer does repeatable.
        spm.set_random_generator_seed(seed)
        model = io.BytesIO()
        try:
            spm.SentencePieceTrainer.train(
                sentence_iterator=iter(sentences),
                model_writer=model,
                vocab_size=vocab_size,
                model_type=model_type,
                character_coverage=character_coverage,
                pad_id=PAD_ID,
                unk_id=UNK_ID,
                bos_id=BOS_ID,
                eos_id=EOS_ID,
                hard_vocab_limit=False,
                # Read every sentence in the given order on one thread: sampling, shuffling and thread
                # scheduling are what make two trainings on the same texts differ.
                input_sentence_size=0,
                shuffle_input_sentence=False,
                num_threads=1,
                minloglevel=2,  # the CLI and the GUI own stderr; failures still raise
            )
        except (RuntimeError, ValueError) as error:
            raise ConfigError(f"sentencepiece training failed: {error}") from None
        return cls(model.getvalue())

    @property
    def model_proto(self) -> bytes:
        """The serialized sentencepiece model."""
        return self._model_proto

    @property
    def vocab_size(self) -> int:
        return self._processor.get_piece_size()

    def to_dict(self) -> dict[str, Any]:
        return self._with_normalization({"kind": self.kind,
                                         "model_proto": _encoded_model_proto(self._model_proto)})

    def unknown_surfaces(self, text: str, ids: list[int]) -> list[str]:
        if UNK_ID not in ids:
            return []
        pieces = self._processor.encode(text, out_type=str)
        return [piece.lstrip("▁") or piece for piece, token_id in zip(pieces, ids) if token_id == UNK_ID]

    @classmethod
    def _from_payload(cls, data: dict[str, Any]) -> SentencePieceTokenizer:
        return cls(_decoded_model_proto(data))

    def _check_special_ids(self) -> None:
        # Models, decoding and checkpoints rely on the shared constants; a model trained with other
        # special ids must be remapped by its importer, not silently misread here.
        processor = self._processor
        found = (processor.pad_id(), processor.unk_id(), processor.bos_id(), processor.eos_id())
        if found != (PAD_ID, UNK_ID, BOS_ID, EOS_ID):
            raise ConfigError(
                "sentencepiece model has special ids pad={}, unk={}, bos={}, eos={}; "
                "expected pad=0, unk=1, bos=2, eos=3".format(*found)
            )

    def _encode(self, text: str) -> list[int]:
        return self._processor.encode(text, out_type=int)

    def _unknown_characters(self, text: str, ids: list[int]) -> list[str]:
        if UNK_ID not in ids:
            return []  # the common case costs one scan of ids
        # Whitespace only separates pieces; it is never what the vocabulary lacks.
        candidates = {c for c in text if not c.isspace()}
        unknown = sorted(c for c in candidates if UNK_ID in self._processor.encode(c, out_type=int))
        if unknown:
            return unknown
        # Normalisation can merge characters known one by one (a letter and a combining accent) into one
        # the vocabulary lacks; then name the characters of the unknown pieces.
        pieces = self._processor.encode(text, out_type=str)
        return sorted({c for piece, i in zip(pieces, ids) if i == UNK_ID for c in piece if not c.isspace()})

    def _decode(self, ids: list[int]) -> str:
        # Decoding pieces lets an unknown token read as UNKNOWN_SURFACE whatever unk_surface the model was
        # trained with (sentencepiece's default pads it with spaces that were never in the text).
        pieces = [UNKNOWN_SURFACE if i == UNK_ID else self._processor.id_to_piece(i) for i in ids]
        return self._processor.decode_pieces(pieces)

    def _label(self, token_id: int) -> str:
        return self._processor.id_to_piece(token_id)


class SentencePieceVocabTokenizer(VocabularyTokenizer):
    """A sentencepiece model for splitting text into pieces, and a separate piece → id vocabulary
    (Hugging Face Marian: ids come from ``vocab.json``, not from the sentencepiece model).

    A leading language code such as ``>>fr<<`` (multilingual Marian models) is looked up as one token.
    ``languages`` (code → id, M2M100's ``__en__``…): ``prefix_language`` starts every encoding with the chosen
    language's code (a source side), ``force_language`` makes it every output's first token (a target side);
    codes never appear in decoded text.
    """

    kind = "sentencepiece-vocab"

    def __init__(self, model_proto: bytes, vocabulary: Sequence[str], specials: dict[str, int | None], *,
                 languages: dict[str, int] | None = None, language: str | None = None,
                 prefix_language: bool = False, force_language: bool = False):
        super().__init__(vocabulary, specials)
        self._model_proto = bytes(model_proto)
        self._processor = _processor(self._model_proto)
        self.prefix_language = bool(prefix_language)
        self._set_languages(languages, language, force_language=force_language)

    @property
    def model_proto(self) -> bytes:
        return self._model_proto

    def to_dict(self) -> dict[str, Any]:
        extra: dict[str, Any] = {}
        if self._languages:  # absent otherwise: as before
            extra = {"languages": dict(self._languages), "language": self.language,
                     "prefix_language": self.prefix_language, "force_language": self.force_language}
        return {**self._common_dict(), "model_proto": _encoded_model_proto(self._model_proto), **extra}

    @classmethod
    def _from_payload(cls, data: dict[str, Any]) -> SentencePieceVocabTokenizer:
        vocabulary, specials = cls._payload_parts(data, cls.kind)
        languages, language = cls._payload_languages(data, cls.kind)
        return cls(_decoded_model_proto(data), vocabulary, specials, languages=languages,
                   language=language, prefix_language=bool(data.get("prefix_language", False)),
                   force_language=bool(data.get("force_language", False)))

    def pieces(self, text: str) -> list[str]:
        code = []
        if text.startswith(">>") and (end := text.find("<<")) != -1:
            code, text = [text[: end + 2]], text[end + 2:]
        return code + self._processor.encode(text, out_type=str)

    def _encode(self, text: str) -> list[int]:
        unk = self.unk_id
        ids = [self._ids.get(piece, unk) for piece in self.pieces(text)]
        if unk is None and None in ids:
            raise UnknownCharactersError(self._unknown_characters(text, []))
        if self.prefix_language and self.language is not None:
            ids = [self._languages[self.language], *ids]
        return ids

    def _unknown_characters(self, text: str, ids: list[int]) -> list[str]:
        missing = [piece for piece in self.pieces(text) if piece not in self._ids]
        return sorted({c for piece in missing for c in piece.replace("▁", " ") if not c.isspace()})

    def _decode(self, ids: list[int]) -> str:
        codes = set(self._languages.values())
        pieces = [UNKNOWN_SURFACE if i == self.unk_id else self._vocabulary[i] for i in ids if i not in codes]
        return self._processor.decode_pieces(pieces).replace("▁", " ").strip()


