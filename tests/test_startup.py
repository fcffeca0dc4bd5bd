"""The app's start (attnviz/gui/app.py:launch), in a fresh interpreter as `attnviz` starts: the window shows
before torch is imported, torch is imported off the GUI thread, and the window is built once it is there, with
the device list torch gives."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

LAUNCH = textwrap.dedent("""
    import json, sys, threading, time
    importers = []  # the thread that first imported torch, and when
    sys.addaudithook(lambda event, args: event == "import" and str(args[0]).split(".")[0] == "torch"
                     and not importers and importers.append((threading.current_thread().name, time.time())))
    from PySide6.QtCore import QSettings
    from attnviz.gui.app import launch
    started = launch(sys.argv[1], "cpu", QSettings(sys.argv[2], QSettings.Format.IniFormat))
    app, window = started.app, started.window
    shown = {"visible": window.isVisible(), "built": window.built}
    deadline = time.monotonic() + 120
    while window.session.model is None and time.monotonic() < deadline:
        app.processEvents()
        time.sleep(0.005)
    from models.inference.translator import available_devices
    box = window.views.model_panel.device
    print(json.dumps({"shown": shown, "importers": [name for name, _ in importers],
                      # the import began once the window was shown and drawn (launch starts it then)
                      "torch after shown": importers[0][1] >= started.importing.started,
                      "opened": window.session.model is not None,
                      "devices": [box.itemText(index) for index in range(box.count())],
                      "expected": ["auto", *available_devices()],
                      "import_seconds": started.importing.ended - started.importing.started}))
    window.close()
    window.shut_down()
""")


def test_the_window_shows_at_once_and_torch_loads_off_the_gui_thread(tmp_path, random_checkpoint):
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen", "PYTHONPATH": str(ROOT)}
    result = subprocess.run([sys.executable, "-c", LAUNCH, str(random_checkpoint), str(tmp_path / "s.ini")],
                            capture_output=True, text=True, env=env, cwd=str(tmp_path), timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["shown"] == {"visible": True, "built": False}
    assert report["importers"] == ["attnviz-import"]  # never the GUI thread
    assert report["torch after shown"]
    assert report["opened"] and report["devices"] == report["expected"]
    assert report["import_seconds"] > 0


def test_a_window_closed_while_torch_is_imported_is_never_built(qtbot, qsettings, random_checkpoint):
    """No model thread and no model opened for a window nobody sees (the import's answer still arrives)."""
    from attnviz.gui.app import launch

    started = launch(str(random_checkpoint), "cpu", qsettings)
    window = started.window
    qtbot.addWidget(window)
    window.close()
    qtbot.waitUntil(lambda: started.importing.answered, timeout=120_000)  # handled on the GUI thread
    assert window.closed and not window.built and window.session.model is None


def test_a_failed_import_is_said_in_the_window_not_loaded_for_ever(qtbot, qsettings, random_checkpoint, monkeypatch):
    """A module the app needs cannot be imported (None in sys.modules makes Python's import refuse it): the
    window says why in one line and is not built."""
    from attnviz.gui.app import WORKER_MODULE, launch

    monkeypatch.setitem(sys.modules, WORKER_MODULE, None)
    started = launch(str(random_checkpoint), "cpu", qsettings)
    window = started.window
    qtbot.addWidget(window)
    qtbot.waitUntil(lambda: "could not start" in window.centralWidget().text(), timeout=120_000)
    assert "ModuleNotFoundError" in window.centralWidget().text()
    assert WORKER_MODULE in started.importing.error
    assert not window.built
    window.close()
