"""The window fits its screen: the first window's size comes from the screen's available area, and the docks
opened later (Head statistics, Head importance) take their room from the views, never from past the screen's
edge. The offscreen platform's screen (800 × 800 here) is smaller than the window attnviz prefers."""

from __future__ import annotations

from PySide6.QtCore import QRect, QSize, Qt

from attnviz.gui.app import create_window
from attnviz.gui.docks import FRAME_ALLOWANCE, PREFERRED_SIZE, fit_inside, initial_size
from tests.test_gui import WAIT, run_text
from tests.test_gui_compare import open_demo
from tests.helpers import open_corpus_panels, plot_layout, settled


def test_the_first_size_is_the_preferred_one_where_it_fits_and_leaves_room_for_the_frame_where_not():
    assert initial_size(QSize(1920, 1050)) == PREFERRED_SIZE
    for available in (QSize(1366, 768 - 28), QSize(1280, 720), QSize(1000, 650)):
        size = initial_size(available)
        assert size.width() + FRAME_ALLOWANCE.width() <= available.width()
        assert size.height() + FRAME_ALLOWANCE.height() == available.height()


def test_a_frame_is_moved_then_shrunk_to_lie_inside_the_bounds():
    screen = QRect(0, 30, 1366, 738)  # a panel across the top
    assert fit_inside(QRect(10, 40, 800, 600), screen) == QRect(10, 40, 800, 600)
    assert fit_inside(QRect(900, 500, 800, 600), screen) == QRect(566, 168, 800, 600)
    assert fit_inside(QRect(-20, 0, 1400, 900), screen) == screen


def test_the_window_and_the_docks_opened_later_stay_inside_the_screen(qtbot, qsettings, random_checkpoint, tmp_path):
    window = create_window(str(random_checkpoint), "cpu", qsettings)
    qtbot.addWidget(window)
    window.show()
    qtbot.waitUntil(lambda: window.session.model is not None, timeout=WAIT)
    run_text(qtbot, window, "abc", max_len=4)
    available = window.screen().availableGeometry()
    assert available.contains(window.frameGeometry()), (window.frameGeometry(), available)
    views = window.centralWidget().width()
    open_corpus_panels(qtbot, window, tmp_path, timeout=WAIT)
    settled(qtbot, lambda: (window.frameGeometry(), window.head_stats.dock.geometry(),  # the panels laid out
                            window.importance_panel.dock.geometry()), timeout=WAIT)
    assert available.contains(window.frameGeometry()), (window.frameGeometry(), available)
    stats, importance = window.head_stats.dock, window.importance_panel.dock
    assert importance.isVisible()
    assert stats.isVisible() or stats in window.tabifiedDockWidgets(importance)  # no room for a column: a tab
    for dock in (window.head_stats.dock, window.importance_panel.dock):
        dock.close()
    qtbot.waitUntil(lambda: window.centralWidget().width() >= views, timeout=WAIT)  # and gave it back
    window.close()


def test_at_1000_by_650_the_rows_axis_name_and_the_output_line_with_its_coverage_fit(qtbot, window):
    """The smallest window attnviz is laid out for: the heatmap's rows' name stays whole inside the plot (it
    runs on into the corner under the rows rather than past the top edge), also at the window's least height,
    and the output with its scores and ALTI+ source contribution is one line."""
    open_demo(qtbot, window, "en-es-transformer")
    run_text(qtbot, window, "The house is small and the river is cold.", max_len=30)
    area = window.views.input_bar.output_area
    qtbot.waitUntil(lambda: bool(window.contributions.coverage), timeout=WAIT)
    assert "source contribution" in area.text()
    name = window.views.focus.plot.getAxis("left").label
    assert name.toPlainText().strip() == "decoder input (queries)"
    for height in (650, window.minimumSizeHint().height()):
        window.resize(1000, height)
        qtbot.waitUntil(lambda h=height: window.height() == max(h, window.minimumHeight()), timeout=WAIT)
        graphics = window.views.focus.graphics
        settled(qtbot, lambda: plot_layout(window.views.focus.plot) and (graphics.viewport().rect(),  # laid out anew
                                                                   name.sceneBoundingRect()), timeout=WAIT)
        shown = graphics.mapToScene(graphics.viewport().rect()).boundingRect()
        assert shown.contains(name.sceneBoundingRect()), (height, shown, name.sceneBoundingRect())
    window.resize(1000, 650)
    qtbot.waitUntil(lambda: window.height() == 650, timeout=WAIT)
    window.resizeDocks([window.views.model_dock], [300], Qt.Orientation.Horizontal)  # as a window opened at this size
    qtbot.waitUntil(lambda: window.views.model_dock.width() == 300, timeout=WAIT)
    settled(qtbot, lambda: (area.width(), area.document().size()), timeout=WAIT)  # the output line wrapped anew
    assert area.document().size().height() < 1.5 * area.fontMetrics().lineSpacing(), (area.width(), area.text())
    # ALTI+'s rollout has the longest title: it wraps instead of pushing the window past 1,000 pixels
    window.select(head="rollout")
    window.contributions.choose("alti")
    qtbot.waitUntil(lambda: "ALTI+</b> rollout" in window.views.focus.title.text(), timeout=WAIT)
    title = window.views.focus.title
    settled(qtbot, lambda: (window.geometry(), title.geometry(), window.centralWidget().width()), timeout=WAIT)
    assert window.minimumSizeHint().width() <= 1000 and window.width() == 1000
    assert title.minimumSizeHint().width() <= title.width() <= window.centralWidget().width()  # whole, wrapped


def test_every_demo_fits_1000_by_650_with_the_lens_neuron_and_patching_tabs_beside_the_decoding_dock(qtbot, window):
    """The heatmap is never shorter than its rows' name: a decoder-only model's ("prompt · continuation (queries)")
    and a decoder's rows labelled with their predictions ("decoder input → predicted token") with the Decoding dock's
    charts and the tab bar the Lens and Neuron panes add below them came to 693 pixels, and a run's notice line
    added 22 more: the tab bar was cut off at 650. Every demo's window fits 1000 × 650 with its tabs in it, also with
    its rows labelled with their predictions and a notice under the output."""
    from PySide6.QtWidgets import QTabBar

    from attnviz.state.demos import demo_checkpoints

    for demo in demo_checkpoints():
        open_demo(qtbot, window, demo.stem)
        window.lens.open()
        window.neuron.open()
        window.patching.open()
        window.views.decoding_dock.raise_()
        qtbot.waitUntil(lambda: window.views.decoding.isVisible(), timeout=WAIT)
        run_text(qtbot, window, "Hello World! 123 ☃")  # a character no demo's vocabulary has: a notice
        qtbot.waitUntil(lambda: "vocabulary has no token" in window.views.input_bar.notices.text(), timeout=WAIT)
        for predicted in (False, True):
            window.views.selector.predicted.setChecked(predicted)
            settled(qtbot, lambda: (window.minimumSizeHint(), window.views.focus.graphics.minimumHeight()),
                    timeout=WAIT)
            least = window.minimumSizeHint()
            assert least.width() <= 1000 and least.height() <= 650, (demo.stem, predicted, least)
        window.resize(1000, 650)
        qtbot.waitUntil(lambda: window.size() == QSize(1000, 650), timeout=WAIT)
        tabs = [bar for bar in window.findChildren(QTabBar) if bar.parent() is window and bar.isVisible()]
        assert tabs, demo.stem
        for bar in tabs:
            assert {bar.tabText(i) for i in range(bar.count())} == {"Decoding", "Lens", "Neuron", "Patching"}
            assert window.rect().contains(bar.geometry()), (demo.stem, bar.geometry())
