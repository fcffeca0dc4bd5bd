"""Vocabulary files and word-level tokenizers the toolkits' importers share: tokens in id order from a file (text,
JSON or a pickled list read safely), their sizes checked against the weights, the special tokens' ids, and
subword-nmt's BPE as a tokenizer.

Every failure is a :class:`CheckpointError` naming the file and what is wrong, never a traceback.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..errors import CheckpointError
from ..text.tokenizers import TokenizerJsonTokenizer
from . import safe_load
from .common import Settings, Source


def read_vocabulary(path: str | Path, *, side: str = "src", trust: bool = False) -> list[str]:
    """Tokens in id order from a vocabulary file.

    A text file has one token a line (the line number, from 0, is the id); ``.json`` holds a list or a
    token → id object. Pickles (``.pkl``/``.pt``; trusted ones may hold objects) may hold a list, a
    token → id dict, a tutorial ``Lang`` (``index2word``), a torchtext legacy ``Field``/``Vocab``
    (``itos``), or jadore's data file (``{'vocab': {'src': Field, 'trg': Field}}``; ``side`` picks one).
    """
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(path, "no such vocabulary file")
    data = path.read_bytes()
    if data[:1] == b"\x80" or data.startswith(b"PK\x03\x04"):
        return tokens_from_object(path, safe_load.load(path, trust=trust), side)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise CheckpointError(path, "a vocabulary file must be UTF-8 text, JSON or a pickle") from None
    if path.suffix == ".json":
        try:
            return tokens_from_object(path, json.loads(text), side)
        except json.JSONDecodeError as error:
            raise CheckpointError(path, f"not valid JSON ({error})") from None
    tokens = text.split("\n")
    if tokens and tokens[-1] == "":
        tokens.pop()
    tokens = [token.rstrip("\r") for token in tokens]
    if not tokens:
        raise CheckpointError(path, "the vocabulary file is empty")
    return tokens


def tokens_from_object(path: Path, value: Any, side: str, depth: int = 0) -> list[str]:
    """Follow the usual containers down to a token list: ``{'vocab': {'src': Field}}``, ``Field.vocab``..."""
    if isinstance(value, list) and value and all(isinstance(token, str) for token in value):
        return list(value)
    if isinstance(value, Mapping) and value and all(isinstance(k, str) and isinstance(v, int)
                                                    for k, v in value.items()):
        return _from_ids(path, dict(value))
    attributes = vars(value) if hasattr(value, "__dict__") and not isinstance(value, Mapping) else {}
    if isinstance(attributes.get("index2word"), Mapping):  # the PyTorch tutorial's Lang
        pairs = list(attributes["index2word"].items())
        if all(isinstance(token, str) and type(index) is int for index, token in pairs):
            return _from_ids(path, {token: index for index, token in pairs})
    if isinstance(attributes.get("itos"), list):  # a torchtext legacy Vocab
        return list(attributes["itos"])
    if depth < 4:
        inner = attributes.get("vocab")  # a torchtext legacy Field
        if inner is None and isinstance(value, Mapping):
            keys = ("src", "source", "vocab", "dict") if side == "src" else ("tgt", "trg", "target", "vocab", "dict")
            inner = next((value[key] for key in keys if key in value), None)
        if inner is not None:
            return tokens_from_object(path, inner, side=side, depth=depth + 1)
    raise CheckpointError(path, f"holds no vocabulary this reader knows ({type(value).__name__}); give a text "
                                f"file with one token a line")


def _from_ids(path: Path, ids: dict[str, int]) -> list[str]:
    size = max(ids.values()) + 1
    tokens: list[str | None] = [None] * size
    for token, index in ids.items():
        if index < 0:
            raise CheckpointError(path, f"token {token!r} has a negative id")
        tokens[index] = token
    gaps = [index for index, token in enumerate(tokens) if token is None]
    if gaps:
        raise CheckpointError(path, f"the vocabulary has no token for id {gaps[0]} ({len(gaps)} ids missing)")
    return tokens  # type: ignore[return-value]


def weight_rows(source: Source, state: Mapping[str, Any], key: str, layout: str) -> int:
    """The first dimension of weight ``key`` (an embedding's vocabulary, a layer's width)."""
    if key not in state:
        raise source.error(f"missing weights for the {layout} layout: {key}")
    return int(state[key].shape[0])


def read_vocabularies(source: Source, src_vocab: str | None, tgt_vocab: str | None, src_rows: int,
                      tgt_rows: int) -> tuple[list[str], list[str]]:
    """Both vocabulary files, each checked against its embedding's row count."""
    src_tokens = read_vocabulary(src_vocab, side="src", trust=source.trust)
    tgt_tokens = read_vocabulary(tgt_vocab, side="tgt", trust=source.trust)
    check_vocab_size(source, src_tokens, rows=src_rows, side="src", origin=str(src_vocab))
    check_vocab_size(source, tgt_tokens, rows=tgt_rows, side="tgt", origin=str(tgt_vocab))
    return src_tokens, tgt_tokens


def check_vocab_size(source: Source, tokens: list[str], rows: int, side: str, origin: str) -> None:
    if len(tokens) != rows:
        name = "source" if side == "src" else "target"
        raise source.error(f"the {name} vocabulary ({origin}) has {len(tokens)} tokens; the model's {name} "
                           f"embedding has {rows} rows")


def special_id(tokens: list[str], names: tuple[str, ...], settings: Settings, key: str,
               default: int | None) -> int | None:
    """A special token's id: the user's ``--set key=ID``, else where the vocabulary holds one of ``names``,
    else ``default`` (recorded as assumed)."""
    if settings.has(key):
        return settings.value(key, int)
    for name in names:
        if name in tokens:
            return tokens.index(name)
    return settings.value(key, int, default)


# How the formats whose tokenizers look whole words up in their vocabularies tokenise (their provenance says so).
WORD_TOKENIZATION = "whole words looked up in its vocabularies, the text split as the tokenize setting says"


def subword_nmt_tokenizer(path: Path, vocabulary: list[str], specials: dict[str, int],
                          moses: dict[str, Any] | None, split_back: bool = False) -> TokenizerJsonTokenizer:
    """subword-nmt's BPE: each word's characters, the last with ``</w>``, merged by the codes' ranks; a piece
    that does not end a word is written ``piece@@`` in the dictionary. ``moses``: the Moses settings that
    make the words first (see ``TokenizerJsonTokenizer``), if any; ``split_back``: subword-nmt run with the
    vocabulary (pieces it lacks split back into known ones), as JoeyNMT runs it."""
    from tokenizers import Tokenizer as HFTokenizer
    from tokenizers import decoders, models, pre_tokenizers

    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as error:
        raise CheckpointError(path, f"cannot be read as BPE codes ({error})") from None
    if lines and lines[0].startswith("#version"):
        lines = lines[1:]
    merges = [tuple(line.split()) for line in lines if line.strip()]
    if any(len(merge) != 2 for merge in merges):
        raise CheckpointError(path, "has a line that is not two symbols: not subword-nmt codes")
    unknown = vocabulary[specials["unk"]]
    vocab: dict[str, int] = {unknown: specials["unk"]}
    special_ids = {index for index in specials.values() if index is not None}
    for index, symbol in enumerate(vocabulary):
        if index not in special_ids:  # <s>, <pad>, </s>, <unk> are never BPE pieces
            vocab.setdefault(symbol[:-2] if symbol.endswith("@@") else symbol + "</w>", index)
    for first, second in merges:  # the BPE model needs every merge's parts and result, known or not
        for piece in (first, second, first + second):
            vocab.setdefault(piece, len(vocabulary) + len(vocab))
    tokenizer = HFTokenizer(models.BPE(vocab=vocab, merges=merges, unk_token=unknown, end_of_word_suffix="</w>"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer.decoder = decoders.BPEDecoder(suffix="</w>")
    return TokenizerJsonTokenizer(tokenizer.to_str(), vocabulary, specials, beyond_is_unknown=True, moses=moses,
                                  split_back=split_back)
