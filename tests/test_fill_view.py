"""The sentence with one token masked, found from the run's token labels (attnviz/state/fill_view.py)."""

from attnviz.state.fill_view import masked_text


def test_a_character_models_token_is_masked_where_the_text_spells_it():
    labels = ["b", "r", "e", "a", "d", "␣", "a", "n", "d", "</s>"]
    assert masked_text("Bread and", labels, 6, mask="_") == "Bread _nd"
    assert masked_text("Bread and", labels, 5, mask="_") == "Bread_and"
    assert masked_text("Bread and", labels, 9, mask="_") is None  # the end token is not in the text


def test_word_pieces_and_byte_pairs_are_found_without_their_markers():
    assert masked_text("The cat sat.", ["[CLS]", "the", "cat", "sat", ".", "[SEP]"], 2, mask="[MASK]") == \
        "The [MASK] sat."
    assert masked_text("unaffable one", ["[CLS]", "un", "##aff", "##able", "one", "[SEP]"], 2,
                       mask="[MASK]") == "un[MASK]able one"
    assert masked_text("Hello world", ["<s>", "Hello", "Ġworld", "</s>"], 2, mask="<mask>") == "Hello <mask>"
    assert masked_text("a [MASK] b", ["[CLS]", "a", "[MASK]", "b", "[SEP]"], 2, mask="[MASK]") is None
