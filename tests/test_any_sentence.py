"""Any sentence a user types translates on every bundled demo: typed forms are brought to the training
text's (models/text/normalize.py) and what the vocabulary still lacks becomes its unknown token, marked in the
labels with the text it stands for. `--strict` keeps the old refusal for scripts."""

from __future__ import annotations

import pytest

from attnviz.cli import main
from attnviz.state.demos import demo_checkpoints, demo_path
from models.storage.checkpoint import load_checkpoint
from models.inference.decoding import finish
from models.inference.fill_mask import fill_masks
from models.text.normalize import normalize
from models.inference.translator import Translator

TEXTS = {
    "straight quotes": 'He said to his brother, "Come with me."',
    "curly quotes": "He said, “Come with me,” and ‘go’.",
    "capitals": "HELLO World",
    "emoji": "the cat 😀 sleeps",
    "right-to-left": "peace שלום סלאם",
    "control characters": "tab\there, bell\x07 and line\nbreak",
    "NUL": "a\x00b",
}


@pytest.fixture(scope="module", params=[path.stem for path in demo_checkpoints()])
def translator(request) -> Translator:
    return Translator(load_checkpoint(demo_path(request.param)), "cpu")


@pytest.mark.parametrize("case", list(TEXTS))
def test_every_demo_translates_any_sentence_and_marks_what_it_lacks(translator, case):
    source = translator.source(TEXTS[case])
    if translator.model.decodes:
        result = finish(translator.decode(source, mode="greedy", max_len=12))[0]
    else:  # an encoder-only demo encodes the sentence and fills its masks (none here)
        result = fill_masks(translator, source)
    assert isinstance(result.text, str) and result.trace is not None
    unknown_labels = [label for label in result.trace.src_tokens if label.startswith("⟨") and label.endswith("⟩")]
    assert bool(unknown_labels) == bool(source.unknown)
    tokenizer = translator.source_tokenizer
    assert all(not tokenizer.knows(character) for character in source.unknown)


def test_the_en_es_demo_takes_straight_quotes_and_pig_latin_takes_capitals(capsys):
    assert main(["translate", "-c", "en-es-transformer", TEXTS["straight quotes"]]) == 0
    out, err = capsys.readouterr()
    assert out.strip() and err == ""  # the corpus's curly quotes stand in: nothing unknown, no warning
    assert main(["translate", "-c", "piglatin-gru-additive", "Hello"]) == 0
    assert capsys.readouterr().out == "ellohay\n"


def test_strict_refuses_what_the_vocabulary_lacks(capsys):
    assert main(["translate", "--strict", "-c", "piglatin-gru-additive", "it's"]) == 1
    assert capsys.readouterr().err.splitlines() == [
        "attnviz: error: input 1: the model's vocabulary has no token for \"'\""]


def test_normalisation_picks_the_forms_the_vocabulary_has():
    curly = set("abcdefghijklmnopqrstuvwxyz ,.“”‘’–")
    knows = curly.__contains__
    assert normalize('a "b" c\'s - d', knows) == "a “b” c’s – d"
    assert normalize("'b'", knows) == "‘b’"
    assert normalize("ＡＢＣ", knows, lowercase=True) == "abc"  # NFKC, then lower case
    assert normalize("ÄB", knows, lowercase=True) == "Äb"  # Ä stays as typed: neither it nor ä is known
    assert normalize("x\ty\nz", knows) == "x y z"
    assert normalize('a "b"', knows, how="none") == 'a "b"'
