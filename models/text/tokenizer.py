"""Tokenizers: text ↔ token ids, behind one small interface.

The kinds attnviz trains (``char``, ``sentencepiece``) reserve the same four special ids
(``PAD_ID``..``EOS_ID``), so models, decoding and the checkpoint format never ask which tokenizer they
have. The kinds made by importers of foreign checkpoints (``word``, ``sentencepiece-vocab``; see
models/importers/) keep the vocabulary and special ids the foreign model was trained with: their
``pad_id``.. are per instance, and the model config carries the same ids. ``encode`` returns ids without
``<s>``/``</s>``: adding them is the caller's decision (the encoder and the decoder want different ones);
the one exception is a ``word`` tokenizer built with ``add_bos`` for a source side that was trained with a
leading ``<bos>``. A tokenizer is stored in checkpoint metadata as the plain JSON of ``to_dict``
and read back with ``Tokenizer.from_dict``; it records how typed text is normalised before encoding
(models/text/normalize.py), so an imported model is fed the same forms as one trained here.
"""

from __future__ import annotations

import abc
import base64
import binascii
import io
import json
import re
import unicodedata
from collections.abc import Iterable, Sequence
from typing import Any, ClassVar

import sentencepiece as spm

from ..errors import AttnvizError, ConfigError, DataError, EmptyInputError, UnknownCharactersError
from .normalize import NORMALIZATIONS, joeynmt_normalize, normalize, tidy_spaces

PAD_ID, UNK_ID, BOS_ID, EOS_ID = 0, 1, 2, 3
SPECIAL_TOKENS = ("<pad>", "<unk>", "<s>", "</s>")

UNKNOWN_SURFACE = "⁇"  # sentencepiece's own glyph for an unknown token, without its padding spaces
SPACE_LABEL = "␣"  # a bare space is invisible as an axis label
UNKNOWN_MODES = ("error", "replace")
_SKIPPED_BY_DECODE = frozenset({PAD_ID, BOS_ID, EOS_ID})


class Tokenizer(abc.ABC):
    """Maps text to token ids and back; ids 0..3 are ``SPECIAL_TOKENS`` for every kind."""

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
        """Ids of ``text`` without ``<s>``/``</s>``.

        ``unknown="error"`` raises :class:`UnknownCharactersError` naming the characters the vocabulary
        lacks (sorted, distinct); ``unknown="replace"`` maps them to ``UNK_ID``. Whitespace-only text
        raises :class:`EmptyInputError`: a model has nothing to attend to.
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
        """Display label of one id for heatmap axes; specials as in ``SPECIAL_TOKENS``."""
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
        """Rebuild a tokenizer from :meth:`to_dict`'s output; malformed data raises :class:`ConfigError`."""
        if not isinstance(data, dict):
            raise ConfigError(f"tokenizer data must be a JSON object; got {type(data).__name__}")
        kinds = {cls.kind: cls for cls in (CharTokenizer, SentencePieceTokenizer, WordTokenizer,
                                            SentencePieceVocabTokenizer, TokenizerJsonTokenizer)}
        kind = data.get("kind")
        if not isinstance(kind, str) or kind not in kinds:  # a list or dict "kind" is unhashable
            raise ConfigError(f"tokenizer kind must be one of {', '.join(kinds)}; got {kind!r}")
        normalization = data.get("normalization", "nfkc")  # checkpoints from before it was recorded: NFKC
        if normalization not in NORMALIZATIONS:
            raise ConfigError(f"tokenizer normalization must be one of {', '.join(NORMALIZATIONS)}; got {normalization!r}")
        tokenizer = kinds[kind]._from_payload(data)
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
        """Ids of non-empty text, unknown characters as ``UNK_ID``."""

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


class SentencePieceTokenizer(Tokenizer):
    """Subword tokenizer around a sentencepiece model, held as its serialized bytes (no files)."""

    kind = "sentencepiece"

    def __init__(self, model_proto: bytes):
        self._model_proto = bytes(model_proto)
        try:
            self._processor = spm.SentencePieceProcessor(model_proto=self._model_proto)
        except RuntimeError as error:
            raise ConfigError(f"not a sentencepiece model ({error})") from None
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
                                         "model_proto": base64.b64encode(self._model_proto).decode("ascii")})

    def unknown_surfaces(self, text: str, ids: list[int]) -> list[str]:
        if UNK_ID not in ids:
            return []
        pieces = self._processor.encode(text, out_type=str)
        return [piece.lstrip("▁") or piece for piece, token_id in zip(pieces, ids) if token_id == UNK_ID]

    @classmethod
    def _from_payload(cls, data: dict[str, Any]) -> SentencePieceTokenizer:
        encoded = data.get("model_proto")
        if not isinstance(encoded, str):
            raise ConfigError("sentencepiece tokenizer data needs a base64 'model_proto' string")
        try:
            model_proto = base64.b64decode(encoded, validate=True)
        except binascii.Error as error:
            raise ConfigError(f"sentencepiece 'model_proto' is not valid base64 ({error})") from None
        return cls(model_proto)

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


SPECIAL_ROLES = ("pad", "unk", "bos", "eos")
WORD_SPLITS = ("whitespace", "punct", "basic", "seq2seq-tutorial", "characters")


class VocabularyTokenizer(Tokenizer):
    """Base of the kinds whose vocabulary and special ids come from a foreign checkpoint.

    ``vocabulary[i]`` is the label of id ``i``; ``specials`` maps ``pad``, ``unk``, ``bos``, ``eos`` to ids
    (``unk`` may be None: such a vocabulary cannot represent unknown input at all).
    """

    def __init__(self, vocabulary: Sequence[str], specials: dict[str, int | None]):
        vocabulary = list(vocabulary)
        if not vocabulary or not all(isinstance(entry, str) for entry in vocabulary):
            raise ConfigError(f"a {self.kind} tokenizer needs a non-empty list of strings as its vocabulary")
        self._vocabulary = vocabulary
        self._ids: dict[str, int] = {}
        for index, entry in enumerate(vocabulary):
            self._ids.setdefault(entry, index)  # a duplicated entry encodes to its first id
        self._specials = self._checked_specials(specials, len(vocabulary))

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


class WordTokenizer(VocabularyTokenizer):
    """One id per word of a fixed vocabulary (the PyTorch tutorials, jadore's torchtext fields).

    ``split`` says how text becomes words: ``whitespace`` (as is), ``punct`` (punctuation split off words,
    case kept: close to spaCy's tokenizers), ``basic`` (the same, lower-cased, like torchtext's
    ``basic_english``) or ``seq2seq-tutorial`` (the PyTorch seq2seq tutorial's
    ``normalizeString``: lower case, ASCII, ``!``/``?`` kept as words, everything else not a letter dropped)
    or ``characters`` (every character a token, spaces written ``▁``: JoeyNMT's char level).
    ``add_bos`` starts every encoding with ``bos_id`` (a source side trained as ``<bos> words <eos>``).
    ``moses``: Moses' tokenizer makes the words (the settings of :class:`TokenizerJsonTokenizer`'s, with
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
        self.moses = _Moses(moses) if moses is not None else None

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
        words = [UNKNOWN_SURFACE if i == self.unk_id else self._vocabulary[i] for i in ids]
        return self.moses.detokenize(words) if self.moses is not None else " ".join(words)


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
        try:
            self._processor = spm.SentencePieceProcessor(model_proto=self._model_proto)
        except RuntimeError as error:
            raise ConfigError(f"not a sentencepiece model ({error})") from None
        languages = dict(languages or {})
        if not all(isinstance(code, str) and isinstance(index, int) and not isinstance(index, bool)
                   and 0 <= index < len(self._vocabulary) for code, index in languages.items()):
            raise ConfigError("sentencepiece-vocab languages must map codes to ids inside the vocabulary")
        self._languages = languages
        self.prefix_language, self.force_language = bool(prefix_language), bool(force_language)
        if language is not None:
            self.set_language(language)

    @property
    def model_proto(self) -> bytes:
        return self._model_proto

    @property
    def languages(self) -> dict[str, int]:
        return dict(self._languages)

    def first_tokens(self) -> list[int]:
        return [self._languages[self.language]] if self.force_language and self.language else []

    def to_dict(self) -> dict[str, Any]:
        extra: dict[str, Any] = {}
        if self._languages:  # absent otherwise: as before
            extra = {"languages": dict(self._languages), "language": self.language,
                     "prefix_language": self.prefix_language, "force_language": self.force_language}
        return {**self._common_dict(), "model_proto": base64.b64encode(self._model_proto).decode("ascii"), **extra}

    @classmethod
    def _from_payload(cls, data: dict[str, Any]) -> SentencePieceVocabTokenizer:
        vocabulary, specials = cls._payload_parts(data, cls.kind)
        languages, language = data.get("languages"), data.get("language")
        if languages is not None and not isinstance(languages, dict) or \
                language is not None and not isinstance(language, str):
            raise ConfigError("sentencepiece-vocab 'languages' must be an object and 'language' a string")
        return cls(_decode_model_proto(data.get("model_proto")), vocabulary, specials, languages=languages,
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
    (see ``_Moses``)."""

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
        self.moses = _Moses(moses) if moses is not None else None
        languages = dict(languages or {})
        if not all(isinstance(code, str) and isinstance(index, int) and not isinstance(index, bool)
                   and 0 <= index < len(self._vocabulary) for code, index in languages.items()):
            raise ConfigError("tokenizer-json languages must map codes to ids inside the vocabulary")
        self._languages, self.force_language = languages, bool(force_language)
        if language is not None:
            self.set_language(language)
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

    @property
    def languages(self) -> dict[str, int]:
        return dict(self._languages)

    def first_tokens(self) -> list[int]:
        return [self._languages[self.language]] if self.force_language and self.language else []

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
        languages, language = data.get("languages"), data.get("language")
        if languages is not None and not isinstance(languages, dict) or \
                language is not None and not isinstance(language, str):
            raise ConfigError("tokenizer-json 'languages' must be an object and 'language' a string")
        return cls(data.get("definition"), vocabulary, specials,
                   add_special_tokens=bool(data.get("add_special_tokens", False)),
                   beyond_is_unknown=bool(data.get("beyond_is_unknown", False)),
                   split_back=bool(data.get("split_back", False)), moses=data.get("moses"),
                   languages=languages, language=language, force_language=bool(data.get("force_language", False)))

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


# Moses' replace-unicode-punctuation rules (as fairseq's WMT'19 preprocessing applied them): characters → ASCII
_MOSES_UNICODE_PUNCTUATION = str.maketrans({
    "，": ",", "、": ",", "”": '"', "“": '"', "∶": ":", "：": ":", "？": "?", "《": '"', "》": '"', "）": ")",
    "！": "!", "（": "(", "；": ";", "」": '"', "「": '"', "～": "~", "’": "'", "…": "...", "━": "-", "〈": "<",
    "〉": ">", "【": "[", "】": "]", "％": "%", **{chr(0xFF10 + digit): str(digit) for digit in range(10)}})
_MOSES_FULL_STOPS = re.compile(r"[。．]\s*")  # an ideographic or full-width full stop and the space after it


MOSES_STYLES = ("fairseq", "joeynmt")


class _Moses:
    """Moses text preparation for one language, with ``sacremoses`` (imported when first needed).

    ``style`` ``fairseq`` (fairseq's WMT models): optionally lower case first, Unicode punctuation to ASCII,
    Moses' punctuation normaliser, control and format characters dropped, Moses' tokenizer with aggressive
    dash splits and its XML escapes. ``joeynmt`` (JoeyNMT's ``pretokenizer: moses``): with ``normalize``,
    NFKC, curly quotes to straight ones, runs of spaces to one and no space before ``?!,.:``, then Moses'
    punctuation normaliser (its English rules); Moses' tokenizer with its XML escapes; then lower case if
    asked. Both join output words with Moses' detokenizer (``joeynmt`` with ``normalize``: spaces tidied as
    before).
    """

    def __init__(self, settings: Any):
        if not isinstance(settings, dict) or not isinstance(settings.get("lang"), str):
            raise ConfigError("tokenizer 'moses' settings need a 'lang' string")
        style = settings.get("style", "fairseq")
        if style not in MOSES_STYLES:
            raise ConfigError(f"tokenizer 'moses' style must be one of {', '.join(MOSES_STYLES)}; got {style!r}")
        self.settings = {"lang": settings["lang"], "lowercase": bool(settings.get("lowercase", False))}
        if style == "joeynmt":  # absent: fairseq's, as files written before there were two styles say
            self.settings.update(style=style, normalize=bool(settings.get("normalize", False)))
        self.style = style
        try:
            import sacremoses
        except ImportError:
            raise ConfigError("this tokenizer needs the 'sacremoses' package: pip install sacremoses") from None
        lang = self.settings["lang"]
        self._normalizer = sacremoses.MosesPunctNormalizer(lang=lang if style == "fairseq" else "en")
        self._tokenizer = sacremoses.MosesTokenizer(lang=lang)
        self._detokenizer = sacremoses.MosesDetokenizer(lang=lang)

    def words(self, text: str) -> list[str]:
        if self.style == "joeynmt":
            if self.settings["normalize"]:
                text = self._normalizer.normalize(joeynmt_normalize(text))
            text = self._tokenizer.tokenize(text, return_str=True, escape=True)
            return (text.lower() if self.settings["lowercase"] else text).split()
        if self.settings["lowercase"]:
            text = text.lower()
        text = _MOSES_FULL_STOPS.sub(". ", text).translate(_MOSES_UNICODE_PUNCTUATION)
        text = self._normalizer.normalize(text)
        text = "".join(c for c in text if not unicodedata.category(c).startswith("C"))
        return [word for word in self._tokenizer.tokenize(text, aggressive_dash_splits=True, return_str=False,
                                                          escape=True) if word]

    def detokenize(self, words: list[str]) -> str:
        text = self._detokenizer.detokenize(words)
        return tidy_spaces(text) if self.style == "joeynmt" and self.settings["normalize"] else text


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


def _decode_model_proto(encoded: Any) -> bytes:
    if not isinstance(encoded, str):
        raise ConfigError("tokenizer data needs a base64 'model_proto' string")
    try:
        return base64.b64decode(encoded, validate=True)
    except binascii.Error as error:
        raise ConfigError(f"'model_proto' is not valid base64 ({error})") from None
