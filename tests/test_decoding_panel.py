"""The decoding panel at length, in a real offscreen QApplication: a long prefix keeps the current step in
view, and bar labels are thinned to the chart's size so they never overlap, keeping the tallest bar's."""

from __future__ import annotations

import numpy as np
import pytest
from PySide6.QtGui import QFontMetrics

from attnviz.state.charts import bars_that_fit, fitted_top
from attnviz.state.viewmodel import BarsState
from attnviz.gui.views.decoding import LABEL_CHARS, PREFIX_WINDOW, BarChart, DecodingPanel, short_label


def ticks(chart: BarChart) -> list[tuple[int, str]]:
    return list(chart.getAxis("left" if chart.horizontal else "bottom")._tickLevels[0])


def test_a_long_prefix_shows_a_window_ending_at_the_step(qtbot):
    panel = DecodingPanel()
    qtbot.addWidget(panel)
    tokens = [f"w{index}" for index in range(1024)]
    panel.show_prefix(tokens, 700, "w701", 0.25)
    text = panel.prefix.text()
    first = 700 - PREFIX_WINDOW
    assert f"… {first} earlier" in text
    assert f" w{first} " in text and f"w{first - 1} " not in text and "w0 " not in text
    assert ">w700</b>" in text and "w701</b> (p = 0.250)" in text and " w702" not in text
    panel.show_prefix(tokens, 3, None, None)  # a short prefix is written out whole
    assert "earlier" not in panel.prefix.text() and panel.prefix.text().startswith("Step 4, decoder input: w0 w1 w2 ")


def test_bar_labels_are_thinned_to_the_chart_size_and_follow_a_resize(qtbot):
    chart = BarChart(horizontal=False)
    qtbot.addWidget(chart)
    chart.resize(680, 200)
    chart.show()
    labels = [f"t{index}" for index in range(1024)]
    chart.set_bars(labels, np.full(1024, 1 / 1024), 3)
    shown = ticks(chart)
    stride = shown[1][0] - shown[0][0]
    assert shown == [(index, labels[index]) for index in range(3 % stride, 1024, stride)]  # evenly, through bar 3
    axis = chart.getAxis("bottom")
    room = (QFontMetrics(axis.tick_font()).height() if axis.layout.upright
            else max(QFontMetrics(axis.tick_font()).horizontalAdvance(label) for _, label in shown))
    assert stride * axis.width() / 1024 >= room  # neighbours never overlap
    chart.resize(1360, 200)
    qtbot.waitUntil(lambda: len(ticks(chart)) > len(shown))


@pytest.mark.parametrize("tallest", [517, 1000, 0])
def test_the_tallest_source_bar_keeps_its_label_when_labels_thin_out(qtbot, tallest):
    chart = BarChart(horizontal=False)
    qtbot.addWidget(chart)
    chart.resize(500, 160)
    chart.show()
    labels = [f"▁word{index}" for index in range(1024)]
    values = np.full(1024, 0.5 / 1023)
    values[tallest] = 0.5
    chart.show_bars(source_bars_state(labels, values))
    shown = ticks(chart)
    assert len(shown) < 1024 and (tallest, labels[tallest]) in shown


def test_source_bars_label_every_token_in_full_when_they_fit(qtbot):
    chart = BarChart(horizontal=False)
    qtbot.addWidget(chart)
    chart.resize(640, 180)
    chart.show()
    labels = ["▁In", "▁the", "▁beginning", "▁God", "▁created", "▁the", "▁heavens", "▁and", "▁the", "▁earth", ".",
              "</s>"]
    chart.show_bars(source_bars_state(labels, np.linspace(0.01, 0.3, 12)))
    assert ticks(chart) == list(enumerate(labels))  # staggered or upright where a word is wider than its bar


def source_bars_state(labels: list[str], values: np.ndarray) -> BarsState:
    return BarsState(labels=labels, values=values, highlight=int(values.argmax()), title="cross-attention")


def test_top_k_labels_all_show_and_long_tokens_are_cut(qtbot):
    chart = BarChart(horizontal=True)
    qtbot.addWidget(chart)
    chart.resize(260, 300)
    chart.show()
    labels = [f"tok{index}" for index in range(9)] + ["a-very-long-subword-token"]
    chart.set_bars(labels, np.linspace(0.3, 0.01, 10), 0)
    shown = ticks(chart)
    assert [index for index, _ in shown] == list(range(10))
    assert shown[-1][1] == "a-very-long-subword-token"[: LABEL_CHARS - 1] + "…"


def test_the_beam_tree_is_built_for_a_beam_only(qtbot):
    import torch

    from models import build_model
    from models.inference.decoding import Capture, beam_search, greedy, run
    from tests.helpers import tiny_config

    torch.manual_seed(0)
    model = build_model(tiny_config("transformer-preln")).eval()
    panel = DecodingPanel()
    qtbot.addWidget(panel)
    from attnviz.state.viewmodel import beam_state

    run(greedy(model, [5, 6, 7, 3], Capture(max_len=30)))
    panel.show_beam(None)  # what the window passes when the mode is not beam search: nothing is laid out
    assert panel.beam.graph.labels == [] and panel.beam.isHidden()
    steps, results = run(beam_search(model, [5, 6, 7, 3], Capture(max_len=6), beam=2))
    panel.show_beam(beam_state(results, steps))
    assert len(panel.beam.graph.state.roots) == 2 and panel.beam.hypotheses.count() == len(results)


def test_top_k_labels_stay_in_one_column_and_thin_out_when_the_chart_is_short(qtbot):
    """A bar chart's labels beside their bars: staggered lanes would widen the axis past a narrow dock and
    leave labels far from their bars; a short chart labels every other bar, the chosen one included."""
    chart = BarChart(horizontal=True)
    qtbot.addWidget(chart)
    chart.resize(330, 110)
    chart.show()
    tokens = ["</s>", "_Amén", "_Y", "_Bienaventurados", "_En", "_Aleluya", "_¿", "_Yo", "_El", "."]
    chart.set_bars(tokens, np.linspace(0.9, 0.0, 10), highlight=0)
    qtbot.waitUntil(lambda: chart.token_axis.layout.ticks != [])
    layout = chart.token_axis.layout
    assert layout.lanes == 1
    shown = [index for index, _ in layout.ticks]
    assert 0 in shown and len(shown) < len(tokens)


def test_the_next_token_chart_labels_every_bar_it_draws_on_an_axis_fitted_to_the_step(qtbot):
    """At 1366×768 the chart labelled every second bar (the runner-up, p ≈ 0.15, unnamed) and kept a 0–1 axis
    when the best token had p = 0.07: a short chart now draws the bars it can label, the chosen one among them."""
    chart = BarChart(horizontal=True)
    qtbot.addWidget(chart)
    chart.resize(330, 110)
    chart.show()
    tokens = ["</s>", "_Amén", "_Y", "_Bienaventurados", "_En", "_Aleluya", "_¿", "_Yo", "_El", "."]
    values = np.array([0.07, 0.05, 0.04, 0.03, 0.02, 0.02, 0.01, 0.01, 0.01, 0.005])
    chart.show_bars(BarsState(labels=tokens, values=values, highlight=8, title="next token", top=fitted_top(0.07)))
    qtbot.waitUntil(lambda: chart.token_axis.layout.ticks != [])
    drawn = list(chart.labels)
    assert 1 < len(drawn) < len(tokens) and drawn[-1] == "_El"  # the chosen token keeps its place in view
    assert [label for _, label in chart.token_axis.layout.ticks] == [short_label(label) for label in drawn]
    assert chart.getViewBox().viewRange()[0][1] == pytest.approx(0.1 * 1.02, abs=0.01)  # not 0–1
    chart.resize(330, 400)
    qtbot.waitUntil(lambda: len(chart.labels) == len(tokens))


def test_a_probability_axis_ends_at_a_round_value_over_the_largest_bar():
    assert [fitted_top(p) for p in (0.07, 0.15, 0.18, 0.22, 0.55, 0.95, 1.0, 0.0)] == \
        pytest.approx([0.1, 0.2, 0.2, 0.25, 1.0, 1.0, 1.0, 1.0])
    state = BarsState(labels=list("abcdef"), values=np.array([0.3, 0.2, 0.1, 0.05, 0.02, 0.01]), highlight=5,
                      title="", top=1.0)
    fitted = bars_that_fit(state, 3)
    assert fitted.labels == ["a", "b", "f"] and fitted.highlight == 2 and fitted.top == pytest.approx(0.5)
    assert bars_that_fit(state, 10) is state


def test_a_chart_title_grows_with_the_text_scale_as_far_as_the_chart_is_wide(qtbot):
    chart = BarChart(horizontal=True)
    qtbot.addWidget(chart)
    chart.resize(700, 300)
    chart.show()
    chart.show_bars(BarsState(labels=["a", "b"], values=np.array([0.6, 0.3]), highlight=0,
                              title="next token ‘a’: p = 0.600, rank 1"))
    assert chart.getPlotItem().titleLabel.opts["size"] == "9pt"
    def points() -> float:
        return float(chart.getPlotItem().titleLabel.opts["size"].removesuffix("pt"))

    chart.set_text_scale(1.6)
    wide = points()
    assert 9 < wide <= 14.4
    chart.resize(240, 300)
    qtbot.waitUntil(lambda: 9 <= points() < wide)  # narrower: a smaller title, never under 9 points
