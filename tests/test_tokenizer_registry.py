"""The tokenizer kinds' registry: every kind a checkpoint can name is read back by its key, an unknown one is a
single clear line (from_dict and a checkpoint file alike)."""

from __future__ import annotations

import gc
import inspect
import json

import pytest
import torch

from models import build_model
from models.errors import CheckpointError, ConfigError
from models.storage.checkpoint import load_checkpoint, read_metadata, save_checkpoint
from models.text.tokenizers import (
    KINDS, CharTokenizer, SentencePieceTokenizer, SentencePieceVocabTokenizer, Tokenizer, TokenizerJsonTokenizer,
    WordTokenizer,
)

from tests.helpers import tiny_config
from tests.test_checkpoint import rewrite_metadata

TEXTS = ["the cat sat on the mat", "the dog ran to the park", "a cat and a dog", "we see the sun"]
WORDS = sorted({word for text in TEXTS for word in text.split()})
SPECIALS = {"pad": 0, "unk": 1, "bos": 2, "eos": 3}
VOCABULARY = ["<pad>", "<unk>", "<s>", "</s>", *WORDS]


def word_level_definition() -> str:
    """A tokenizer.json of the ``tokenizers`` library: one id per whitespace-separated word of VOCABULARY."""
    from tokenizers import Tokenizer as FastTokenizer
    from tokenizers import models, pre_tokenizers

    fast = FastTokenizer(models.WordLevel({word: index for index, word in enumerate(VOCABULARY)}, unk_token="<unk>"))
    fast.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return fast.to_str()


def one_of_every_kind() -> list[Tokenizer]:
    sentencepiece = SentencePieceTokenizer.train(TEXTS, vocab_size=40)
    pieces = sentencepiece.tokens(range(sentencepiece.vocab_size))
    return [
        CharTokenizer.build(TEXTS),
        sentencepiece,
        WordTokenizer(VOCABULARY, SPECIALS),
        SentencePieceVocabTokenizer(sentencepiece.model_proto, pieces, SPECIALS),
        TokenizerJsonTokenizer(word_level_definition(), VOCABULARY, SPECIALS),
    ]


def concrete_kinds(cls: type[Tokenizer] = Tokenizer) -> set[type[Tokenizer]]:
    found = set()
    for subclass in cls.__subclasses__():
        if not inspect.isabstract(subclass):
            found.add(subclass)
        found |= concrete_kinds(subclass)
    return found


def test_the_registry_holds_every_tokenizer_class_under_its_kind():
    classes = concrete_kinds()
    assert {cls.kind for cls in classes} == set(KINDS) == {
        "char", "sentencepiece", "word", "sentencepiece-vocab", "tokenizer-json"}
    assert all(KINDS[cls.kind] is cls for cls in classes)
    assert {type(tokenizer) for tokenizer in one_of_every_kind()} == classes  # the test below saves each one


def test_every_kind_a_checkpoint_can_name_is_read_back_from_the_file(tmp_path):
    named = set()
    for tokenizer in one_of_every_kind():
        torch.manual_seed(0)
        model = build_model(tiny_config("transformer-preln", tokenizer.vocab_size))
        path = save_checkpoint(tmp_path / f"{tokenizer.kind}.safetensors", model, tokenizer, tokenizer)
        named.add(read_metadata(path)["tokenizers"]["source"]["kind"])
        loaded = load_checkpoint(path)
        for side in (loaded.source_tokenizer, loaded.target_tokenizer):
            assert type(side) is type(tokenizer)
            assert side.encode(TEXTS[2]) == tokenizer.encode(TEXTS[2])
            assert side.to_dict() == tokenizer.to_dict()
    assert named == set(KINDS)


@pytest.mark.parametrize("kind", ["wordpiece", "Char", "", None, 3])
def test_an_unknown_kind_is_one_line_naming_the_known_ones(kind):
    with pytest.raises(ConfigError) as caught:
        Tokenizer.from_dict({"kind": kind, "characters": ["a"]})
    message = str(caught.value)
    assert "\n" not in message and f"got {kind!r}" in message
    assert "char, sentencepiece, sentencepiece-vocab, tokenizer-json, word" in message


def test_a_checkpoint_naming_an_unknown_kind_is_one_line(tmp_path, random_checkpoint):
    tokenizers = read_metadata(random_checkpoint)["tokenizers"]
    tokenizers["target"] = {**tokenizers["target"], "kind": "wordpiece"}
    path = rewrite_metadata(random_checkpoint, tmp_path / "wordpiece.safetensors", tokenizers=json.dumps(tokenizers))
    with pytest.raises(CheckpointError, match="tokenizer kind must be one of .*; got 'wordpiece'") as caught:
        load_checkpoint(path)
    assert "\n" not in str(caught.value)


def test_a_second_class_for_a_kind_is_refused_and_the_first_stays():
    with pytest.raises(TypeError, match="'char' is already CharTokenizer"):
        type("AnotherCharTokenizer", (CharTokenizer,), {"kind": "char"})
    assert KINDS["char"] is CharTokenizer
    gc.collect()  # the refused class is still among CharTokenizer's subclasses until collected
