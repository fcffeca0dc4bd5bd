"""Teaching views at the default size, driven in a real offscreen window: the Demos list keeps marking model A
while comparing, a corpus panel drops the tables of the model that was open before, and the B − A colour bar
reads plain weights."""

from __future__ import annotations

from attnviz.state.demos import demo_reference_pairs
from tests.test_gui import WAIT
from tests.test_gui_compare import open_demo


def test_comparing_from_the_demos_list_keeps_model_a_marked(qtbot, window):
    open_demo(qtbot, window, "piglatin-gru-additive")
    demos = window.views.model_panel.demos
    item = next(demos.item(row) for row in range(demos.count()) if demos.item(row).text() == "piglatin-gru-scaled-dot")
    demos.setCurrentItem(item)  # a right click makes the clicked demo the list's current item
    (action,) = [action for action in window.views.model_panel.demo_actions(item).actions()
                 if action.text() == "Compare with the open model"]
    action.trigger()
    qtbot.waitUntil(lambda: window.session.partner is not None, timeout=WAIT)
    assert demos.currentItem().text() == "piglatin-gru-additive"


def test_the_head_importance_tables_go_when_another_model_opens(qtbot, window):
    open_demo(qtbot, window, "piglatin-gru-additive")
    window.importance.open(demo_reference_pairs(window.session.model.path)[:4])
    panel = window.importance_panel
    qtbot.waitUntil(lambda: panel.importance is not None, timeout=60_000)
    assert not panel.view.panel_scroll.isHidden()
    open_demo(qtbot, window, "piglatin-gru-scaled-dot")
    assert panel.view.panel_scroll.isHidden()
    assert "A new model is open" in panel.view.summary.text()


def test_the_difference_colour_bar_reads_plain_weights(qtbot, window):
    bar = window.views.compare_view.diff.colorbar
    bar.setLevels((-0.0009, 0.0009))
    assert "x0.001" not in bar.axis.labelString() and "(m" not in bar.axis.labelString()
    assert not bar.axis.autoSIPrefix


def test_presenting_scales_the_charts_titles_keeps_the_colour_bar_name_clear_and_gives_the_beam_room(qtbot, window):
    """Presenting drew the colour bar's name over its 0.4/0.6, left the step bars' and next-token titles at 9
    points, and gave the beam's hypotheses one row."""
    from PySide6.QtGui import QFontMetricsF
    from PySide6.QtWidgets import QApplication

    from attnviz.gui.features.presenting import PRESENTATION_FONT_SCALE
    from tests.test_gui import run_text

    run_text(qtbot, window, "abc", mode="beam", beam=3, max_len=6)
    qtbot.waitUntil(lambda: window.views.decoding.beam.hypotheses.count() > 1, timeout=WAIT)
    window.named_actions["present"].trigger()
    qtbot.waitUntil(lambda: window.presenting.on, timeout=WAIT)
    font = QApplication.font()
    axis = window.views.focus.colorbar.axis
    numbers = QFontMetricsF(font).horizontalAdvance("0.8")
    qtbot.waitUntil(lambda: axis.width() >= numbers + axis.label.boundingRect().height() * 0.8,  # name beside them
                    timeout=WAIT)
    decoding = window.views.decoding
    for chart in (decoding.top_k, decoding.source_strip):  # larger, as far as the chart is wide
        size = float(chart.getPlotItem().titleLabel.opts["size"].removesuffix("pt"))
        assert 9 <= size <= 9 * PRESENTATION_FONT_SCALE
        assert size == 9 or chart.getPlotItem().titleLabel.boundingRect().width() <= chart.width()
    line = QFontMetricsF(font).lineSpacing()
    assert window.views.decoding.beam.hypotheses.minimumHeight() >= 3 * line
    assert window.views.decoding.beam.graph.minimumHeight() >= 4 * line - 1
    window.presenting.set_presenting(False)
    assert window.views.decoding.top_k.getPlotItem().titleLabel.opts["size"] == "9pt"


def test_compare_with_offers_the_demos_the_recent_files_and_browse(qtbot, window, random_checkpoint, tmp_path):
    """File → Compare With… was a bare file dialog."""
    import shutil

    other = shutil.copy(random_checkpoint, tmp_path / "other.safetensors")
    window.open_path(str(other))
    qtbot.waitUntil(lambda: window.session.model.path.name == "other.safetensors", timeout=WAIT)
    open_demo(qtbot, window, "piglatin-gru-additive")
    menu = window.named_actions["compare_with"]
    menu.aboutToShow.emit()
    texts = [action.text() for action in menu.actions()]
    assert "piglatin-gru-scaled-dot" in texts and "piglatin-gru-additive" not in texts  # not the open model
    assert str(other) in texts and texts[-1] == "Browse…"
    next(action for action in menu.actions() if action.text() == "piglatin-gru-scaled-dot").trigger()
    qtbot.waitUntil(lambda: window.session.partner is not None
                    and window.session.partner.path.stem == "piglatin-gru-scaled-dot", timeout=WAIT)


def test_outputs_that_differ_offer_forcing_b_to_a_and_the_action_does_it(qtbot, window):
    """B − A in greedy mode said why it was empty but not what to do."""
    from tests.test_gui import run_text
    from tests.test_gui_compare import compare

    open_demo(qtbot, window, "piglatin-gru-additive")
    compare(qtbot, window, "piglatin-gru-scaled-dot")
    run_text(qtbot, window, "strength rhythm queen", max_len=40)
    qtbot.waitUntil(lambda: window.session.partner_result is not None, timeout=WAIT)
    window.select(kind="cross", layer=0, head=0)
    diff = window.views.compare_view.diff
    assert "the outputs differ" in diff.title.text() and "Force B to A's Output" in diff.title.text()
    a_output = window.session.result.text
    force = window.named_actions["force_b"]
    assert force.isEnabled()
    force.trigger()
    request = window.session.request
    assert (request.settings.mode, request.settings.target) == ("forced", a_output)
    qtbot.waitUntil(lambda: bool(window.session.results) and window.session.partner_result is not None
                    and window.session.request is request, timeout=WAIT)
    qtbot.waitUntil(lambda: "not shown" not in diff.title.text(), timeout=WAIT)
    assert diff.title.text().startswith("<b>B − A</b>")


def test_a_snapshot_series_opens_with_examples_offered(qtbot, window, tmp_path):
    """The bundled series (a demo's run) opened with an empty sentence; a series trained here offers its
    corpus' first sources."""
    from attnviz.state.demos import RESOURCES, demo_examples, demo_path, model_examples

    series = RESOURCES / "series" / "piglatin-gru-additive.snapshots"
    window.open_path(str(series))
    qtbot.waitUntil(lambda: window.session.model is not None and window.session.model.path == series, timeout=WAIT)
    examples = demo_examples(demo_path("piglatin-gru-additive"))
    assert examples and window.views.input_bar.text.text() == examples[0]
    corpus = tmp_path / "pairs.tsv"
    corpus.write_text("abc\tcba\nhag\tgah\nabc\tcba\n", encoding="utf-8")
    run = tmp_path / "run.snapshots"
    run.mkdir()
    assert model_examples(run, {"corpus": "pairs.tsv"}) == ["abc", "hag"]
    assert model_examples(run, {"corpus": str(tmp_path / "gone.tsv")}) == []
