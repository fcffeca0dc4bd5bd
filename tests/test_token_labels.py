"""Token labels on the focus heatmap, in a real offscreen QApplication with the bundled demos: every token
in full (level, staggered or upright), never cut with "…"; zoomed out, every n-th token, still in full."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from PySide6.QtWidgets import QApplication

from attnviz.state import viewmodel
from attnviz.state.demos import demo_path
from attnviz.state.session import Selection
from attnviz.gui.views.heatmap import HeatmapView
from attnviz.gui.views.token_axis import TokenLabels, column_ticks, row_ticks
from models.storage.checkpoint import load_checkpoint
from models.inference.translator import Translator

from .helpers import plot_layout, settled

FOCUS_SIZE = (640, 300)  # the focus heatmap's size in a 1366 × 768 window
RENDER_SIZE = (900, 700)  # `attnviz render`'s default


def measured(tokens: list[str], px_per_char: float = 6, line: float = 12) -> TokenLabels:
    return TokenLabels(tokens, widths=np.array([px_per_char * len(token) for token in tokens]), line=line)


def texts(layout) -> list[str]:
    return [label for _, label in layout.ticks]


def test_columns_that_fit_stay_level_and_wide_ones_stagger_or_turn_upright():
    tokens = list("abcdef") + ["</s>"]
    level = column_ticks(measured(tokens), (-0.5, 6.5), cell=20)
    assert texts(level) == tokens and (level.lanes, level.upright) == (1, False)
    staggered = column_ticks(measured(tokens), (-0.5, 6.5), cell=12)  # "</s>" (24 px) by "f" needs 19 px
    assert texts(staggered) == tokens and (staggered.lanes, staggered.upright) == (2, False)
    words = ["▁beginning", "▁created", "▁heavens", "▁earth"]  # 48–60 px in 20 px cells: upright, one line each
    upright = column_ticks(measured(words), (-0.5, 3.5), cell=20)
    assert texts(upright) == words and (upright.lanes, upright.upright) == (1, True)
    assert upright.depth == 60  # as deep as the widest label is long


def test_rows_stagger_over_lanes_and_only_a_zoomed_out_axis_thins():
    rows = list("ethay ickquay ownbray oxfay") + ["</s>"]
    every = row_ticks(measured(rows), (-0.5, len(rows) - 0.5), cell=6)  # 12 px lines in 6 px rows: two lanes
    assert texts(every) == rows and every.lanes == 2
    assert every.depth == 2 * 24 + 6  # two lanes as wide as "</s>", a gap between
    thinned = row_ticks(measured(rows), (-0.5, len(rows) - 0.5), cell=3)  # would need four lanes
    assert [index for index, _ in thinned.ticks] == list(range(0, len(rows), 4)) and thinned.lanes == 1


def test_a_zoomed_out_axis_labels_every_nth_token_in_full_counted_from_the_anchor():
    tokens = [f"token{index}" for index in range(200)]
    thinned = column_ticks(measured(tokens), (-0.5, 199.5), cell=2, anchor=7)
    indices = [index for index, _ in thinned.ticks]
    assert 7 in indices and len(set(np.diff(indices))) == 1  # evenly spaced, through the anchor
    assert all(label == tokens[index] for index, label in thinned.ticks)  # zooming in shows the rest
    assert column_ticks(measured(tokens), (1.5, 3.2), cell=200).ticks == [(2, "token2"), (3, "token3")]


def decoded(demo: str, text: str):
    return Translator(load_checkpoint(demo_path(demo)), "cpu").translate(text, need_weights=True).trace


def shown_heatmap(qtbot, trace, kind: str, size: tuple[int, int]) -> HeatmapView:
    """The heatmap drawn the way `attnviz render` draws it: data first, then the final size, shown once."""
    view = HeatmapView()
    qtbot.addWidget(view)
    view.show_heatmap(viewmodel.heatmap(trace, Selection(kind=kind, layer=0, head=0)))
    view.resize(*size)
    view.show()
    qtbot.waitExposed(view)
    settled(qtbot, lambda: drawn(view))  # the axes' new sizes settle the plot's layout
    return view


def drawn(view: HeatmapView) -> tuple | None:
    """The plot's layout with the token labels its axes draw; None until it is laid out."""
    layout = plot_layout(view.plot)
    return layout and (layout, axis_labels(view, "left"), axis_labels(view, "bottom"))


def axis_labels(view: HeatmapView, name: str) -> list[str]:
    return [label for _, label in view.plot.getAxis(name)._tickLevels[0]]


@pytest.mark.parametrize("demo, text, kind", [
    ("en-es-transformer", "In the beginning God created the heavens and the earth.", "enc_self"),
    ("en-es-transformer", "My son, hear the instruction of your father.", "cross"),
    ("piglatin-gru-transformer-decoder", "strength through joy", "cross"),
])
def test_the_focus_heatmap_labels_every_token_in_full(qtbot, demo, text, kind):
    trace = decoded(demo, text)
    view = shown_heatmap(qtbot, trace, kind, FOCUS_SIZE)
    assert axis_labels(view, "bottom") == trace.key_tokens(kind)
    assert axis_labels(view, "left") == trace.query_tokens(kind)
    assert not any("…" in label for label in axis_labels(view, "bottom") + axis_labels(view, "left"))
    if demo.startswith("piglatin"):
        assert "␣" in axis_labels(view, "bottom")  # a character model's spaces are labelled too


def test_a_render_labels_every_row_of_a_long_output(qtbot):
    trace = decoded("en-es-transformer", "The Lord is my shepherd; I shall not want. He makes me lie down in green "
                                         "pastures, he leads me beside still waters, he restores my soul.")
    rows = trace.query_tokens("dec_self")
    assert len(rows) > 40  # more rows than lines of text fit beside the plot
    view = shown_heatmap(qtbot, trace, "dec_self", RENDER_SIZE)
    assert axis_labels(view, "left") == rows
    assert axis_labels(view, "bottom") == trace.key_tokens("dec_self")


def test_zooming_out_on_a_long_input_thins_in_full_and_zooming_in_shows_all(qtbot):
    tokens = [f"▁token{index}" for index in range(1024)]
    view = HeatmapView()
    qtbot.addWidget(view)
    view.resize(*FOCUS_SIZE)
    view.show()
    qtbot.waitExposed(view)
    view.show_matrix(np.random.default_rng(0).random((1024, 1024)).astype(np.float32), None, tokens, tokens)
    shown = axis_labels(view, "bottom")
    assert 3 < len(shown) < 100 and set(shown) <= set(tokens)  # a readable subset, each label whole
    view.plot.getViewBox().setRange(xRange=(100, 110), yRange=(100, 110), padding=0)
    assert axis_labels(view, "bottom") == tokens[100:111]
    assert axis_labels(view, "left") == tokens[100:111]


def test_help_explains_the_marks_in_token_labels(qtbot):
    from PySide6.QtWidgets import QTextBrowser, QWidget

    from attnviz.gui.views.help import explanation_dialog

    parent = QWidget()
    qtbot.addWidget(parent)
    text = explanation_dialog(parent).findChild(QTextBrowser).toPlainText()
    for mark, meaning in (("▁", "word starts"), ("<s>", "start token"), ("</s>", "end of the sentence"),
                          ("␣", "a space"), ("⟨…⟩", "does not have")):
        assert mark in text and meaning in text


def test_a_small_heatmap_settles_on_one_layout_of_both_axes(qtbot):
    """Row labels in lanes make the columns narrower, column labels in lanes make the rows lower: laid out
    one after the other, the two axes changed each other's labels at every resize, for ever."""
    rows = ["<s>", "▁Hijo", "▁mío", ",", "▁oye", "▁la", "▁ley", "▁de", "▁tu", "▁padre", "."]
    columns = ["▁My", "▁son", ",", "▁hear", "▁the", "▁instruction", "▁of", "▁your", "▁father", ".", "</s>"]
    view = HeatmapView()
    qtbot.addWidget(view)
    view.resize(530, 150)  # the focus heatmap in a 1000 × 650 window
    view.show()
    view.show_matrix(np.random.default_rng(0).random((11, 11)).astype(np.float32), None, rows, columns)
    layout = settled(qtbot, lambda: drawn(view))  # an axis that changes the other's labels for ever never settles
    for _ in range(10):  # nor does it start again at the next passes of the event loop
        QApplication.processEvents()
        assert drawn(view) == layout
    assert axis_labels(view, "bottom") == columns



def test_a_new_name_of_the_colour_scale_is_centred_on_its_bar(qtbot):
    """pyqtgraph places an axis' name when the axis is resized: a contribution's unit, longer than the name
    shown before it, kept the old name's place and ran past the top of a short bar."""
    view = HeatmapView()
    qtbot.addWidget(view)
    view.resize(640, 200)
    view.show()
    qtbot.waitExposed(view)
    matrix = np.random.default_rng(0).random((4, 5)).astype(np.float32)
    state = viewmodel.HeatmapState(matrix=matrix, mask=None, query_labels=list("abcd"), key_labels=list("vwxyz"),
                                   title="", axis_names=("queries", "keys"), levels=(0.0, 1.0), step_row=None,
                                   file_stem="map")
    scale = view.colorbar.axis
    for name in ("attention weight", "share of output"):
        view.show_heatmap(dataclasses.replace(state, scale_title=name))
        settled(qtbot, lambda name=name: scale.labelText == name and (scale.label.pos(), scale.label.boundingRect(),
                                                                        scale.size()))
    top, bottom = scale.label.pos().y() - scale.label.boundingRect().width(), scale.label.pos().y()
    assert 0 <= top and bottom <= scale.size().height(), (top, bottom, scale.size().height())
    assert abs((top + bottom) / 2 - scale.size().height() / 2) <= 2
