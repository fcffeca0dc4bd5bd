"""Tokenizers: round trips, shared special ids, JSON persistence, deterministic training, input errors.

The sentencepiece models are real, trained here in memory on a few dozen sentences (milliseconds).
"""

from __future__ import annotations

import base64
import io
import json

import numpy as np
import pytest
import sentencepiece as spm

from models.errors import ConfigError, DataError, EmptyInputError, UnknownCharactersError
from models.text.tokenizers import (
    BOS_ID, EOS_ID, PAD_ID, SPECIAL_TOKENS, UNK_ID, CharTokenizer, SentencePieceTokenizer, Tokenizer,
)

SENTENCES = [
    "the cat sat on the mat", "el gato se sentó en la alfombra",
    "where is the house", "¿dónde está la casa?",
    "i like green apples", "me gustan las manzanas verdes",
    "the dog runs in the park", "el perro corre en el parque",
    "we are going to the beach", "vamos a la playa",
    "she reads a book every night", "ella lee un libro cada noche",
    "the water is cold", "el agua está fría",
    "my brother lives in madrid", "mi hermano vive en madrid",
    "open the window please", "abre la ventana, por favor",
    "they eat bread and cheese", "ellos comen pan y queso",
    "the sun is shining today", "hoy brilla el sol",
    "how old are you", "¿cuántos años tienes?",
    "i do not understand", "no entiendo",
    "the children play outside", "los niños juegan afuera",
    "this coffee is very hot", "este café está muy caliente",
    "we need more time", "necesitamos más tiempo",
    "the train leaves at nine", "el tren sale a las nueve",
    "he writes a long letter", "él escribe una carta larga",
    "the flowers are beautiful", "las flores son hermosas",
    "close the door", "cierra la puerta",
    "i am very tired", "estoy muy cansado",
    "the city is big", "la ciudad es grande",
    "good morning, friend", "buenos días, amigo",
    "the bird sings in the tree", "el pájaro canta en el árbol",
    "thank you very much", "muchas gracias",
]

# Made of characters the corpus has, in combinations it does not: encoding must generalise.
UNSEEN_SENTENCES = ["the bird eats bread", "el niño lee una carta", "los gatos son grandes"]


@pytest.fixture(scope="module")
def sentencepiece_tokenizer() -> SentencePieceTokenizer:
    return SentencePieceTokenizer.train(SENTENCES, vocab_size=120)


@pytest.fixture(scope="module")
def char_tokenizer() -> CharTokenizer:
    return CharTokenizer.build(SENTENCES)


@pytest.fixture(params=["char", "sentencepiece"])
def tokenizer(request, char_tokenizer, sentencepiece_tokenizer) -> Tokenizer:
    return {"char": char_tokenizer, "sentencepiece": sentencepiece_tokenizer}[request.param]


def test_special_tokens_have_ids_0_to_3(tokenizer: Tokenizer) -> None:
    assert (PAD_ID, UNK_ID, BOS_ID, EOS_ID) == (0, 1, 2, 3)
    assert (tokenizer.pad_id, tokenizer.unk_id, tokenizer.bos_id, tokenizer.eos_id) == (0, 1, 2, 3)
    assert tokenizer.tokens([0, 1, 2, 3]) == ["<pad>", "<unk>", "<s>", "</s>"] == list(SPECIAL_TOKENS)


def test_sentencepiece_pieces_for_specials_match_the_shared_names(sentencepiece_tokenizer) -> None:
    processor = spm.SentencePieceProcessor(model_proto=sentencepiece_tokenizer.model_proto)
    assert [processor.id_to_piece(i) for i in range(4)] == list(SPECIAL_TOKENS)


@pytest.mark.parametrize("text", SENTENCES + UNSEEN_SENTENCES)
def test_round_trip_text_ids_text(tokenizer: Tokenizer, text: str) -> None:
    ids = tokenizer.encode(text)
    assert ids and all(len(SPECIAL_TOKENS) <= i < tokenizer.vocab_size for i in ids)  # no bos/eos/unk added
    assert tokenizer.decode(ids) == text


def test_sentencepiece_splits_into_subwords(sentencepiece_tokenizer) -> None:
    # Neither one id per character nor one per sentence: the model really learnt pieces.
    text = "the children play outside"
    ids = sentencepiece_tokenizer.encode(text)
    assert len(text.split()) <= len(ids) < len(text)
    assert sentencepiece_tokenizer.vocab_size <= 120


def test_char_ids_are_specials_then_characters_in_given_order() -> None:
    tokenizer = CharTokenizer(["b", "a", " "])
    assert tokenizer.vocab_size == 7
    assert tokenizer.encode("ab a") == [5, 4, 6, 5]
    assert CharTokenizer.build(["ba", "a b"]).encode("ab a") == [5, 6, 4, 5]  # build sorts: " ", "a", "b"


def test_char_build_is_independent_of_text_order() -> None:
    forward = CharTokenizer.build(SENTENCES)
    backward = CharTokenizer.build(reversed(SENTENCES))
    assert forward.to_dict() == backward.to_dict()
    assert forward.characters == sorted(set("".join(SENTENCES)))


def test_decode_skips_pad_bos_eos_and_does_not_stop_at_eos(tokenizer: Tokenizer) -> None:
    first, second = tokenizer.encode("the cat"), tokenizer.encode("el gato")
    padded = [BOS_ID, *first, EOS_ID, PAD_ID, PAD_ID]
    assert tokenizer.decode(padded) == "the cat"
    assert tokenizer.decode(np.array(padded)) == "the cat"  # models hand back numpy/torch integers
    assert tokenizer.decode(first + [EOS_ID] + second).replace(" ", "") == "thecatelgato"


def test_decode_rejects_ids_outside_the_vocabulary(tokenizer: Tokenizer) -> None:
    with pytest.raises(IndexError):
        tokenizer.decode([4, tokenizer.vocab_size])
    with pytest.raises(IndexError):
        tokenizer.token(-1)


def test_json_round_trip_gives_identical_encodings(tokenizer: Tokenizer) -> None:
    data = json.loads(json.dumps(tokenizer.to_dict()))
    assert data["kind"] == tokenizer.kind
    restored = Tokenizer.from_dict(data)
    assert type(restored) is type(tokenizer)
    assert restored.vocab_size == tokenizer.vocab_size
    for text in SENTENCES + UNSEEN_SENTENCES:
        assert restored.encode(text) == tokenizer.encode(text)
    all_ids = range(tokenizer.vocab_size)
    assert restored.tokens(all_ids) == tokenizer.tokens(all_ids)


def test_sentencepiece_json_keeps_the_model_bytes(sentencepiece_tokenizer) -> None:
    data = json.loads(json.dumps(sentencepiece_tokenizer.to_dict()))
    assert base64.b64decode(data["model_proto"]) == sentencepiece_tokenizer.model_proto
    assert Tokenizer.from_dict(data).model_proto == sentencepiece_tokenizer.model_proto


@pytest.mark.parametrize("model_type", ["unigram", "bpe"])
def test_sentencepiece_training_is_deterministic(model_type: str) -> None:
    first = SentencePieceTokenizer.train(SENTENCES, vocab_size=100, model_type=model_type)
    second = SentencePieceTokenizer.train(iter(list(SENTENCES)), vocab_size=100, model_type=model_type)
    assert first.model_proto == second.model_proto
    other = SentencePieceTokenizer.train(SENTENCES[::2], vocab_size=100, model_type=model_type)
    assert other.model_proto != first.model_proto  # the bytes do depend on the texts


def test_sentencepiece_trains_on_a_tiny_corpus() -> None:
    tokenizer = SentencePieceTokenizer.train(["hola mundo"], vocab_size=1000)
    assert tokenizer.vocab_size < 1000
    assert tokenizer.decode(tokenizer.encode("hola mundo")) == "hola mundo"


def test_sentencepiece_training_without_text_raises_data_error() -> None:
    with pytest.raises(DataError):
        SentencePieceTokenizer.train(["", "   "], vocab_size=50)


def test_sentencepiece_training_with_bad_options_raises_config_error() -> None:
    with pytest.raises(ConfigError, match="model_type|xyz"):
        SentencePieceTokenizer.train(SENTENCES, vocab_size=50, model_type="xyz")


@pytest.mark.parametrize("text", ["", "   ", "\t\n "])
def test_empty_text_raises_empty_input_error(tokenizer: Tokenizer, text: str) -> None:
    with pytest.raises(EmptyInputError):
        tokenizer.encode(text)
    with pytest.raises(EmptyInputError):
        tokenizer.encode(text, unknown="replace")


def test_unknown_characters_are_named(tokenizer: Tokenizer) -> None:
    with pytest.raises(UnknownCharactersError) as caught:
        tokenizer.encode("the cat @ ж the @ mat")
    assert caught.value.characters == ["@", "ж"]
    assert "'@'" in str(caught.value) and "'ж'" in str(caught.value)


def test_char_unknown_characters_replaced_by_unk(char_tokenizer) -> None:
    ids = char_tokenizer.encode("a@b", unknown="replace")
    assert ids == [char_tokenizer.encode("a")[0], UNK_ID, char_tokenizer.encode("b")[0]]
    assert char_tokenizer.decode(ids) == "a⁇b"


def test_sentencepiece_unknown_characters_replaced_by_unk(sentencepiece_tokenizer) -> None:
    ids = sentencepiece_tokenizer.encode("la casa @ ж", unknown="replace")
    assert ids[: len(sentencepiece_tokenizer.encode("la casa"))] == sentencepiece_tokenizer.encode("la casa")
    assert ids.count(UNK_ID) == 2
    # sentencepiece's default unk surface is " ⁇ ", which would invent spaces.
    assert sentencepiece_tokenizer.decode(ids) == "la casa ⁇ ⁇"


def test_sentencepiece_whitespace_is_never_unknown(sentencepiece_tokenizer) -> None:
    ids = sentencepiece_tokenizer.encode("la\u00a0casa\tdel  gato\u3000 ")
    assert UNK_ID not in ids
    assert sentencepiece_tokenizer.decode(ids) == "la casa del gato"


def test_unknown_mode_must_be_error_or_replace(tokenizer: Tokenizer) -> None:
    with pytest.raises(ValueError, match="unknown"):
        tokenizer.encode("the cat", unknown="ignore")


def test_char_token_labels_show_space_as_open_box(char_tokenizer) -> None:
    assert char_tokenizer.tokens(char_tokenizer.encode("el sol")) == ["e", "l", "␣", "s", "o", "l"]


def test_sentencepiece_token_labels_keep_word_boundary_mark(sentencepiece_tokenizer) -> None:
    labels = sentencepiece_tokenizer.tokens(sentencepiece_tokenizer.encode("el perro corre"))
    assert labels[0].startswith("▁")
    assert sum(label.startswith("▁") for label in labels) == 3
    assert "".join(labels).replace("▁", " ").strip() == "el perro corre"


@pytest.mark.parametrize(
    "data",
    [
        None,
        ["char", "abc"],
        {},
        {"kind": "wordpiece"},
        {"kind": ["char"]},
        {"kind": "char"},
        {"kind": "char", "characters": "abc"},
        {"kind": "char", "characters": []},
        {"kind": "char", "characters": ["ab", "c"]},
        {"kind": "char", "characters": ["a", 7]},
        {"kind": "char", "characters": ["a", "b", "a"]},
        {"kind": "sentencepiece"},
        {"kind": "sentencepiece", "model_proto": 12345},
        {"kind": "sentencepiece", "model_proto": "not base64 at all!"},
        {"kind": "sentencepiece", "model_proto": base64.b64encode(b"garbage bytes").decode()},
    ],
)
def test_from_dict_on_garbage_raises_config_error(data) -> None:
    with pytest.raises(ConfigError) as caught:
        Tokenizer.from_dict(data)
    assert str(caught.value)


def test_sentencepiece_model_with_other_special_ids_is_refused() -> None:
    # A stock sentencepiece model (unk=0, bos=1, eos=2, no pad) would shift every id the models use.
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(SENTENCES), model_writer=model, vocab_size=60, hard_vocab_limit=False,
        minloglevel=2,
    )
    with pytest.raises(ConfigError, match="special ids"):
        SentencePieceTokenizer(model.getvalue())
