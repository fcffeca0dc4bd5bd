"""The window keeps its shape across launches and presentations: each dock's place is saved with the layout's
version and restored at start-up (also in a window built after it was shown, as ``attnviz`` launches), a saved
layout of another version, or one that does not fit the screen or leaves a view too small, gives way to the default
with a note, View → Reset layout brings the default back, and F11 then Esc returns the window exactly as it was."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from PySide6.QtCore import QRect, QSettings, Qt
from PySide6.QtWidgets import QLabel

from attnviz.gui.app import build_window
from attnviz.gui.features.presenting import PRESENTING_HINT
from attnviz.gui.main_window import MainWindow
from attnviz.state.demos import demo_checkpoints
from attnviz.state.layout import (CENTRAL_MINIMUM, LAYOUT_VERSION, MODEL_PANEL_SHARE, Box, DockPlace, frame_problem,
                                  places_text, read_places, squeeze_problem)
from tests.test_gui import WAIT, run_text
from tests.helpers import open_corpus_panels, settled

ROOT = Path(__file__).resolve().parents[1]

NAMES = {"modelDock", "decodingDock", "head statisticsDock"}


def test_saved_places_are_read_back_only_from_this_version():
    places = [DockPlace("modelDock", "left", True, 300), DockPlace("decodingDock", "bottom", True, 240),
              DockPlace("head statisticsDock", "left", False, 200, tab_of="modelDock")]
    assert read_places(places_text(places), NAMES) == (places, "")
    assert read_places(places_text(places), {"modelDock", "decodingDock"}) == (places[:2], "")  # not made yet
    older = places_text(places).replace(f'"version": {LAYOUT_VERSION}', '"version": 1')
    assert read_places(older, NAMES) == ([], "the saved window layout is from another version of attnviz")
    for damaged in ("{", '{"version": 2, "docks": [{"name": "modelDock"}]}',
                    places_text([DockPlace("modelDock", "middle", True, 300)])):
        assert read_places(damaged, NAMES) == ([], "the saved window layout could not be read")
    assert read_places("", NAMES) == ([], "")


def test_a_layout_that_squeezes_the_views_or_leaves_the_screen_is_not_used():
    model, decoding = DockPlace("modelDock", "left", True, 300), DockPlace("decodingDock", "bottom", True, 240)
    assert squeeze_problem([model, decoding], 1350, 728, model="modelDock") == ""
    wide = DockPlace("modelDock", "left", True, int(MODEL_PANEL_SHARE * 1350) + 1)
    assert "Model panel too much room" in squeeze_problem([wide, decoding], 1350, 728, model="modelDock")
    tall = DockPlace("decodingDock", "bottom", True, 728 - CENTRAL_MINIMUM[1] + 1)
    assert "too small" in squeeze_problem([model, tall], 1350, 728, model="modelDock")
    assert squeeze_problem([model, DockPlace("decodingDock", "bottom", False, 700)], 1350, 728, model="modelDock") == ""
    screen = Box(0, 0, 1366, 768)
    assert frame_problem(Box(1, 25, 1350, 728), screen) == ""
    assert frame_problem(Box(0, 0, 1350, 906), screen) == ("the saved window (1350 × 906) does not fit this screen "
                                                            "(1366 × 768)")


def launched(qtbot, settings: QSettings, checkpoint) -> MainWindow:
    """A window as ``attnviz`` makes it: shown first, built once torch is there."""
    window = MainWindow(demo_checkpoints(), settings)
    qtbot.addWidget(window)
    window.show()
    qtbot.waitExposed(window)
    build_window(window, str(checkpoint), "cpu")
    qtbot.waitUntil(lambda: window.session.model is not None, timeout=WAIT)
    settled(qtbot, lambda: (window.geometry(), view_sizes(window)), timeout=WAIT)  # laid out
    return window


def view_sizes(window) -> dict[str, tuple[int, int]]:
    views = window.views
    return {name: (view.width(), view.height()) for name, view in
            (("model", views.model_dock), ("decoding", views.decoding_dock), ("focus", views.focus),
             ("grids", views.grids))}


def test_every_view_keeps_its_room_after_the_corpus_panels_were_open_at_quit(qtbot, tmp_path, random_checkpoint):
    """Qt's saved state restored before the corpus panels existed gave their room to the Model dock: half the
    window, the heads grid a strip."""
    settings = QSettings(str(tmp_path / "attnviz.ini"), QSettings.Format.IniFormat)
    first = launched(qtbot, settings, random_checkpoint)
    default = view_sizes(first)
    run_text(qtbot, first, "abc", max_len=4)
    open_corpus_panels(qtbot, first, tmp_path, timeout=WAIT)
    at_quit = view_sizes(first)
    first.close()
    second = launched(qtbot, settings, random_checkpoint)
    sizes = view_sizes(second)
    assert sizes["model"] == (at_quit["model"][0], sizes["model"][1])  # as the user left it
    assert sizes["model"][0] <= MODEL_PANEL_SHARE * second.width(), (sizes, default)
    for name in ("focus", "grids", "decoding"):  # each at least as large as in the first window
        assert sizes[name][0] >= min(default[name][0], 160) and sizes[name][1] >= min(default[name][1], 150), \
            (name, sizes, default)
    second.close()


def test_a_layout_of_an_older_version_or_too_large_for_the_screen_gives_way_with_a_note(qtbot, tmp_path,
                                                                                       random_checkpoint):
    settings = QSettings(str(tmp_path / "attnviz.ini"), QSettings.Format.IniFormat)
    first = launched(qtbot, settings, random_checkpoint)
    available = first.screen().availableGeometry()
    first.setGeometry(QRect(0, 0, available.width() + 300, available.height() + 200))
    first.close()
    settings.setValue("window/docks", places_text([DockPlace("modelDock", "left", True, 300)]).replace(
        f'"version": {LAYOUT_VERSION}', '"version": 1'))
    second = launched(qtbot, settings, random_checkpoint)
    assert second.width() <= available.width() and second.height() <= available.height(), second.geometry()
    note = second.statusBar().findChild(QLabel, "layoutNote").text()
    assert "from another version" in note, note  # (Qt's restoreGeometry shrinks a window larger than the screen)
    second.close()


def test_reset_layout_brings_the_first_launch_docks_back(qtbot, tmp_path, random_checkpoint):
    settings = QSettings(str(tmp_path / "attnviz.ini"), QSettings.Format.IniFormat)
    window = launched(qtbot, settings, random_checkpoint)
    default = view_sizes(window)
    window.addDockWidget(Qt.DockWidgetArea.RightDockWidgetArea, window.views.model_dock)
    window.views.decoding_dock.hide()
    window.named_actions["reset_layout"].trigger()
    qtbot.waitUntil(lambda: view_sizes(window) == default, timeout=WAIT)
    assert window.dockWidgetArea(window.views.model_dock) == Qt.DockWidgetArea.LeftDockWidgetArea
    window.close()


@pytest.mark.parametrize("maximized", [False, True])
def test_presenting_then_esc_returns_the_same_geometry_state_and_docks(qtbot, tmp_path, random_checkpoint, maximized):
    settings = QSettings(str(tmp_path / "attnviz.ini"), QSettings.Format.IniFormat)
    window = launched(qtbot, settings, random_checkpoint)
    if maximized:
        window.showMaximized()
    else:
        window.setGeometry(QRect(20, 30, 700, 560))
    settled(qtbot, lambda: (window.geometry(), window.windowState(), view_sizes(window)), timeout=WAIT)
    geometry, state, sizes = window.geometry(), window.windowState(), view_sizes(window)
    window.named_actions["present"].trigger()
    qtbot.waitUntil(lambda: window.isFullScreen(), timeout=WAIT)
    assert window.statusBar().currentMessage() == PRESENTING_HINT
    next(action for action in window.named_actions["presenting"] if action.text() == "End presenting").trigger()
    qtbot.waitUntil(lambda: not window.isFullScreen(), timeout=WAIT)
    settled(qtbot, lambda: (window.geometry(), window.windowState(), view_sizes(window)), timeout=WAIT)
    assert (window.geometry(), window.windowState(), view_sizes(window)) == (geometry, state, sizes)
    assert window.statusBar().currentMessage() == ""  # the hint spoke of presenting
    window.named_actions["present"].trigger()  # closed while presenting: the layout saved is the one before
    qtbot.waitUntil(lambda: window.isFullScreen(), timeout=WAIT)
    window.close()
    again = launched(qtbot, settings, random_checkpoint)
    assert not again.isFullScreen() and view_sizes(again)["model"][0] == sizes["model"][0]
    again.close()


NARROW_SCREEN = textwrap.dedent("""
    import json, sys, time
    from PySide6.QtCore import QSettings
    from PySide6.QtWidgets import QApplication
    from attnviz.gui.app import launch
    started = launch(sys.argv[1], "cpu", QSettings(sys.argv[2], QSettings.Format.IniFormat))
    app, window = started.app, started.window
    def wait(condition):
        deadline = time.monotonic() + 120
        while not condition() and time.monotonic() < deadline:
            app.processEvents()
            time.sleep(0.005)
    wait(lambda: window.session.model is not None)
    font = app.font().pointSizeF()
    window.named_actions["present"].trigger()
    wait(window.isFullScreen)
    report = {"screen": window.screen().availableGeometry().width(), "minimum": window.minimumSizeHint().width(),
              "width": window.width(), "dock_right": window.views.decoding_dock.geometry().right(),
              "dock_shown": window.views.decoding_dock.isVisible(), "larger": app.font().pointSizeF() / font}
    window.presenting.set_presenting(False)
    report["font_back"] = app.font().pointSizeF() == font
    print(json.dumps(report))
    window.close()
    window.shut_down()
""")


def test_presenting_on_a_1000_pixel_screen_keeps_the_window_on_it(tmp_path, random_checkpoint):
    """Fonts 1.6× larger made the presenting window at least 1,192 pixels wide: on a 1000 × 650 screen the Decoding
    dock ran off its edge. The fonts now grow as much as the screen's width allows."""
    screen = tmp_path / "screen.json"
    screen.write_text(json.dumps({"screens": [{"name": "narrow", "x": 0, "y": 0, "width": 1000, "height": 650,
                                               "logicalDpi": 96, "logicalBaseDpi": 96, "dpr": 1}]}))
    env = {**os.environ, "QT_QPA_PLATFORM": f"offscreen:configfile={screen}", "PYTHONPATH": str(ROOT)}
    result = subprocess.run([sys.executable, "-c", NARROW_SCREEN, str(random_checkpoint), str(tmp_path / "s.ini")],
                            capture_output=True, text=True, env=env, cwd=str(tmp_path), timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["screen"] == 1000
    assert report["minimum"] <= 1000 and report["width"] <= 1000, report
    assert report["dock_shown"] and report["dock_right"] < 1000, report
    assert 1.0 < report["larger"] < 1.6 and report["font_back"], report
