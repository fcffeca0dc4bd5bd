"""The tokenizer kinds importers build: their own vocabulary and per-instance special ids."""

from __future__ import annotations

import io
import json

import pytest
import sentencepiece as spm

from models.errors import ConfigError, EmptyInputError, UnknownCharactersError
from models.text.tokenizers import PAD_ID, SentencePieceVocabTokenizer, Tokenizer, WordTokenizer

TUTORIAL = ["SOS", "EOS", "i", "am", "happy", "!", "?"]


def test_word_tokenizer_special_ids_are_its_own():
    tokenizer = WordTokenizer(TUTORIAL, {"pad": 0, "unk": None, "bos": 0, "eos": 1}, split="seq2seq-tutorial")
    assert (tokenizer.pad_id, tokenizer.unk_id, tokenizer.bos_id, tokenizer.eos_id) == (0, None, 0, 1)
    assert tokenizer.encode("I am HAPPY!") == [2, 3, 4, 5]
    assert tokenizer.decode([0, 2, 3, 4, 1, 0]) == "i am happy"  # SOS, EOS and padding are not text
    assert tokenizer.tokens([0, 1, 2]) == ["SOS", "EOS", "i"]
    with pytest.raises(UnknownCharactersError, match="'sad'"):
        tokenizer.encode("i am sad", unknown="replace")  # no <unk> to replace it with
    with pytest.raises(EmptyInputError):
        tokenizer.encode("123 ...")  # nothing left once normalised


@pytest.mark.parametrize("split, text, words", [
    ("whitespace", "A man, running.", ["A", "man,", "running."]),
    ("punct", "A man, running.", ["A", "man", ",", "running", "."]),
    ("basic", "A man, running.", ["a", "man", ",", "running", "."]),
    ("seq2seq-tutorial", "Élan, vital!", ["elan", "vital", "!"]),
])
def test_word_splits(split, text, words):
    specials = {"pad": 1, "unk": 0, "bos": 2, "eos": 3}
    tokenizer = WordTokenizer(["<unk>", "<pad>", "<bos>", "<eos>"], specials, split=split)
    assert tokenizer.words(text) == words


def test_word_tokenizer_with_bos_and_unknown_words():
    vocabulary = ["<unk>", "<pad>", "<bos>", "<eos>", "a", "man"]
    tokenizer = WordTokenizer(vocabulary, {"pad": 1, "unk": 0, "bos": 2, "eos": 3}, split="basic", add_bos=True)
    assert tokenizer.encode("A man") == [2, 4, 5]
    assert tokenizer.encode("A dog", unknown="replace") == [2, 4, 0]
    with pytest.raises(UnknownCharactersError, match="'dog'"):
        tokenizer.encode("A dog")
    assert tokenizer.decode([2, 4, 0, 3]) == "a ⁇"


def test_round_trip_through_json():
    word = WordTokenizer(TUTORIAL, {"pad": 0, "unk": None, "bos": 0, "eos": 1}, split="seq2seq-tutorial", add_bos=True)
    again = Tokenizer.from_dict(json.loads(json.dumps(word.to_dict())))
    assert isinstance(again, WordTokenizer) and again.to_dict() == word.to_dict()
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(["the cat sat", "the dog ran"]), model_writer=model,
                                   vocab_size=20, hard_vocab_limit=False, minloglevel=2, num_threads=1)
    processor = spm.SentencePieceProcessor(model_proto=model.getvalue())
    own = sorted({processor.id_to_piece(i) for i in range(3, processor.get_piece_size())})
    pieces = ["</s>", "<unk>", *own, "<pad>"]
    specials = {"pad": len(pieces) - 1, "unk": 1, "bos": len(pieces) - 1, "eos": 0}
    marian = SentencePieceVocabTokenizer(model.getvalue(), pieces, specials)
    again = Tokenizer.from_dict(json.loads(json.dumps(marian.to_dict())))
    assert again.encode("the cat") == marian.encode("the cat") and again.eos_id == 0 and again.pad_id != PAD_ID
    assert again.decode(marian.encode("the cat") + [0]) == "the cat"


@pytest.mark.parametrize("specials, fragment", [
    ({"pad": 0, "unk": None, "bos": 0}, "exactly pad, unk, bos, eos"),
    ({"pad": 0, "unk": None, "bos": 0, "eos": 99}, "the eos id must be below the vocabulary size"),
    ({"pad": None, "unk": 0, "bos": 0, "eos": 1}, "the pad id"),
])
def test_bad_special_ids_are_config_errors(specials, fragment):
    with pytest.raises(ConfigError, match=fragment):
        WordTokenizer(TUTORIAL, specials)
