"""Teaching views at the default size, driven in a real offscreen window: the Demos list keeps marking model A
while comparing, a corpus panel drops the tables of the model that was open before, and the B − A colour bar
reads plain weights."""

from __future__ import annotations

from attnviz.state.demos import demo_reference_pairs
from tests.test_gui import WAIT
from tests.test_gui_compare import open_demo


def test_comparing_from_the_demos_list_keeps_model_a_marked(qtbot, window):
    open_demo(qtbot, window, "piglatin-gru-additive")
    demos = window.model_panel.demos
    item = next(demos.item(row) for row in range(demos.count()) if demos.item(row).text() == "piglatin-gru-scaled-dot")
    demos.setCurrentItem(item)  # a right click makes the clicked demo the list's current item
    (action,) = [action for action in window.model_panel.demo_actions(item).actions()
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
    bar = window.compare_view.diff.colorbar
    bar.setLevels((-0.0009, 0.0009))
    assert "x0.001" not in bar.axis.labelString() and "(m" not in bar.axis.labelString()
    assert not bar.axis.autoSIPrefix
