"""The window's menus and keys come from one table (attnviz/gui/actions.py), which Help → Keyboard shortcuts lists;
a multi-step opening (attnviz/state/open_plan.py) gives way to a model opened meanwhile."""

from __future__ import annotations

import shutil

from PySide6.QtGui import QKeySequence
from PySide6.QtWidgets import QDialog, QMenu, QTextBrowser

from attnviz.gui.actions import ACTIONS, shortcut_list
from tests.test_gui import WAIT, run_text
from tests.test_sessions import _save


def _menu_shortcuts(menu: QMenu) -> set[tuple[str, str]]:
    found = set()
    for action in menu.actions():
        if action.menu() is not None:
            found |= _menu_shortcuts(action.menu())
        elif not action.shortcut().isEmpty():
            found.add((action.text().replace("&", ""), action.shortcut().toString()))
    return found


def test_the_menus_and_the_shortcuts_dialog_are_the_one_table(qtbot, window):
    in_menus = set().union(*(_menu_shortcuts(action.menu()) for action in window.menuBar().actions()))
    in_table = {(item.label.replace("&", ""), QKeySequence(item.shortcut).toString())
                for item in ACTIONS if item.menu and item.shortcut is not None
                and not QKeySequence(item.shortcut).isEmpty()}  # a standard key a platform may have no keys for
    assert in_menus == in_table and ("Next head", "Ctrl+Right") in in_menus
    assert all(not key.isEnabled() for key in window.named_actions["presenting"])  # only while presenting
    window.show_shortcuts()
    text = window.findChildren(QDialog)[-1].findChild(QTextBrowser).toPlainText()
    assert all(name in text and keys in text for name, keys in shortcut_list())
    assert "End presenting" in text  # the presenting keys are listed too


def test_a_session_gives_way_to_a_model_opened_before_its_own_loads(qtbot, window, tmp_path, random_checkpoint):
    lesson = _save(tmp_path / "lesson.attnviz", shutil.copy(random_checkpoint, tmp_path / "lesson.safetensors"))
    other = shutil.copy(random_checkpoint, tmp_path / "other.safetensors")
    window.sessions.open_session(str(lesson))
    assert window.opening.plan is not None
    window.open_path(str(other))
    assert window.opening.plan is None  # the session's steps are not applied to another model
    qtbot.waitUntil(lambda: window.session.model.path.name == "other.safetensors", timeout=WAIT)
    assert window.views.input_bar.run_settings().mode != "beam"  # the session's input stayed in the session
    run_text(qtbot, window, "abc")
    assert window.session.selection.head != "mean" and window.opening.plan is None
