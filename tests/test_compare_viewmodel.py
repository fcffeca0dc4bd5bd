"""The comparison view-model with real demo checkpoints: A and B at one selection, B − A where the tokens agree,
and one line saying why where they do not. No Qt."""

from __future__ import annotations

import numpy as np
import pytest

from attnviz.state import compare_view, viewmodel
from attnviz.state.demos import demo_path
from attnviz.state.session import Selection
from models.storage.checkpoint import load_checkpoint
from models.inference.decoding import finish
from models.inference.translator import Translator

TEXT, TARGET = "team", "eamtay"


def decode(name: str, text: str = TEXT, target: str | None = TARGET):
    translator = Translator(load_checkpoint(str(demo_path(name))), "cpu")
    source = translator.source(text)
    target_ids = translator.target(target) if target is not None else None
    return finish(translator.decode(source, mode="forced" if target is not None else "greedy",
                                    target_ids=target_ids))[0]


@pytest.fixture(scope="module")
def additive():
    return decode("piglatin-gru-additive")


def test_a_model_compared_with_itself_differs_by_exactly_zero(additive):
    state = compare_view.compare_state(additive.trace, additive.trace, Selection(kind="cross"))
    assert state.a.state is not None and state.b.state is not None
    assert state.diff.state is not None
    assert np.array_equal(state.diff.state.matrix, np.zeros_like(state.diff.state.matrix))
    assert state.diff.state.levels[0] == -state.diff.state.levels[1]


def test_same_tokenizers_give_a_difference_map(additive):
    other = decode("piglatin-gru-scaled-dot")
    state = compare_view.compare_state(additive.trace, other.trace, Selection(kind="cross"))
    diff = state.diff.state
    assert diff is not None and "B − A" in diff.title
    expected = other.trace.attention["cross"][0][0] - additive.trace.attention["cross"][0][0]
    assert np.allclose(diff.matrix, expected)
    low, high = diff.levels
    assert low == -high and high == pytest.approx(np.abs(expected).max())


def test_different_tokenizers_explain_instead_of_a_difference(additive):
    other = decode("en-es-transformer", text="The Lord is my shepherd.", target=None)
    state = compare_view.compare_state(additive.trace, other.trace, Selection(kind="cross"))
    assert state.a.state is not None and state.b.state is not None
    assert state.diff.state is None and state.diff.message.startswith("B − A not shown: the source tokens differ")
    # a kind and a head the GRU lacks: said in its pane, never an error
    lacking = compare_view.compare_state(additive.trace, other.trace, Selection(kind="enc_self", head=3))
    assert lacking.a.state is None and lacking.a.message == "model A has no encoder self-attention"
    assert lacking.b.state is not None
    head = compare_view.compare_state(additive.trace, other.trace, Selection(kind="cross", head=2))
    assert head.a.message == "model A has no head 2 (it has 1 head)" and head.b.state is not None


def test_result_line_shows_both_outputs(additive):
    line = viewmodel.result_line(additive, [], partner=viewmodel.partner_line(additive, "twin"))
    assert line.text == "eamtay" and line.partner.startswith("model B (twin): eamtay · score")
    assert viewmodel.partner_line("it failed", "twin") == "model B (twin): it failed"


def test_outputs_that_differ_are_never_called_no_difference(additive):
    # the same model forced on two targets of one length: equal shapes, other tokens in the rows
    other = decode("piglatin-gru-scaled-dot", target="eamtya")
    diff = compare_view.compare_state(additive.trace, other.trace, Selection(kind="cross")).diff
    assert diff.state is None and "no difference" not in diff.message.lower()
    assert diff.message.startswith("B − A not shown: the outputs differ from token 5 (‘a’ in A, ‘y’ in B")


def test_other_tokenizers_name_the_source_and_equal_maps_say_identical(additive):
    other = decode("en-es-transformer", text="The Lord is my shepherd.", target=None)
    message = compare_view.compare_state(additive.trace, other.trace, Selection(kind="cross")).diff.message
    assert message.startswith("B − A not shown: the source tokens differ from token 0")
    same = compare_view.compare_state(additive.trace, additive.trace, Selection(kind="cross")).diff.state
    assert same.title.endswith("identical: every weight equal")
    scaled_dot = decode("piglatin-gru-scaled-dot").trace
    changed = compare_view.compare_state(additive.trace, scaled_dot, Selection(kind="cross"))
    assert "identical" not in changed.diff.state.title
