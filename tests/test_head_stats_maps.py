"""The Head statistics and Head importance maps read on their own: a colour bar per map with its range and
unit, and each cell's value written in it, in a colour that reads on the cell, with fewer digits (or none)
where cells are small. Real statistics of a real checkpoint; the view drawn offscreen."""

from __future__ import annotations

import numpy as np
import pytest

from attnviz.state import stats_view
from models.storage.checkpoint import load_checkpoint
from models.analysis.head_stats import corpus_head_stats
from models.analysis.importance import HeadImportance
from models.inference.translator import Translator
from tests.test_head_stats_gui import PAIRS


@pytest.fixture(scope="module")
def stats(random_checkpoint):
    return corpus_head_stats(Translator(load_checkpoint(random_checkpoint), "cpu"), PAIRS, batch_size=4)


def test_each_cell_is_written_out_and_each_map_names_its_unit(stats):
    state = stats_view.head_stats_state(stats, "reference", "cross")
    assert [(panel.name, panel.unit) for panel in state.panels] == \
        [("entropy", "nats"), ("confidence", "weight"), ("eos", "weight"), ("diagonal", "weight")]
    confidence = state.panels[1]
    longest, shortest = confidence.texts
    assert longest == [[stats_view.cell_text(value, 2) for value in row] for row in confidence.matrix]
    assert len(longest) == state.layers and len(longest[0]) == state.heads
    assert all(len(short) <= len(long) for row_s, row_l in zip(shortest, longest) for short, long in zip(row_s, row_l))
    # as short as it reads: no leading zero, "0" for nothing, a dash for no value
    assert [stats_view.cell_text(value, 2) for value in (0.534, -0.53, 1.0, 0.001, float("nan"))] == \
        [".53", "-.53", "1.00", "0", "–"]
    assert [stats_view.cell_text(value, 0) for value in (12.6, -3.2)] == ["13", "-3"]


def test_importance_maps_are_in_the_metrics_points():
    importance = HeadImportance(metric="chrf", baseline=57.16, examples=12,
                                scores={"cross": np.array([[58.06, 56.6], [54.2, 57.09]])})
    drop, left = stats_view.importance_state(importance, "cross").panels
    assert (drop.unit, left.unit) == ("chrF", "chrF")
    assert drop.texts[0] == [["-.9", ".6"], ["3.0", ".1"]] and drop.texts[1] == [["-1", "1"], ["3", "0"]]
    assert left.texts[0] == [["58.1", "56.6"], ["54.2", "57.1"]] and left.levels == (0.0, 100.0)


def test_the_view_draws_a_colour_bar_and_legible_numbers(qtbot, stats):
    from PySide6.QtGui import QFontMetrics

    from attnviz.gui.views.head_stats import HeadStatsView, fitting_texts, text_colour

    view = HeadStatsView()
    qtbot.addWidget(view)
    view.resize(900, 600)
    view.show()
    qtbot.waitExposed(view)
    state = stats_view.head_stats_state(stats, "reference", "cross")
    view.show_stats(state)
    assert len(view.colour_bars) == len(state.panels)
    assert [tuple(bar.levels()) for bar in view.colour_bars] == [panel.levels for panel in state.panels]
    assert view.plots[0][0].titleLabel.text.startswith("entropy") and "nats" in view.plots[0][0].titleLabel.text
    for labels, panel in zip(view.cell_labels, state.panels):  # a wide dock: every number in full
        assert [label.toPlainText() for label in labels] == [text for row in panel.texts[0] for text in row]
        assert all(label.isVisible() for label in labels)
        low, high = panel.levels
        for label, value in zip(labels, panel.matrix.ravel()):
            assert label.color.getRgb()[:3] == text_colour(view.lut, (value - low) / (high - low))
    # the text colour follows the cell's: white on viridis' dark end, black on its bright end
    assert text_colour(view.lut, 0.0) == (255, 255, 255) and text_colour(view.lut, 1.0) == (0, 0, 0)
    # small cells get fewer digits, tiny ones none
    metrics = QFontMetrics(view.cell_font)
    texts = state.panels[1].texts
    assert fitting_texts(texts, (60, 30), metrics) is texts[0]
    assert fitting_texts(texts, (metrics.horizontalAdvance(".5") + 8, 30), metrics) is texts[1]
    assert fitting_texts(texts, (8, 30), metrics) is None and fitting_texts(texts, (60, 4), metrics) is None


def test_the_maps_are_laid_out_for_the_largest_cells():
    from attnviz.gui.views.head_stats import panel_columns

    assert panel_columns(4, (3, 4), size=(520, 190)) == 4  # a wide, low dock: one row
    assert panel_columns(4, (3, 4), size=(260, 900)) == 1  # a tall, narrow one: stacked
    assert panel_columns(5, (6, 8), size=(900, 700)) in (2, 3)


def test_importance_of_rounded_weights_says_so_in_its_summary():
    from models.nn.precisions import rounded_weights_notice

    importance = HeadImportance(metric="nll", baseline=1.5, examples=3, scores={"cross": np.array([[1.6, 1.4]])})
    assert "rounded" not in stats_view.importance_state(importance, "cross").summary
    summary = stats_view.importance_state(importance, "cross", weights="float16").summary
    assert summary.endswith(f" Scores {rounded_weights_notice('float16')}.")
