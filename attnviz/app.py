"""Start the desktop app: one QApplication, the main window, the bundled demos, a clean shutdown."""

from __future__ import annotations

import sys

from .demos import demo_checkpoints, initial_checkpoint


def create_window(checkpoint: str | None = None, device: str | None = None, settings=None):
    """The main window, with ``checkpoint`` (or the default demo) being opened; needs a QApplication."""
    from .main_window import MainWindow

    window = MainWindow(demo_checkpoints(), settings)
    build_window(window, checkpoint, device)
    return window


def build_window(window, checkpoint: str | None, device: str | None) -> None:
    """Load what the window needs (pyqtgraph, torch), make its views and start opening the checkpoint."""
    from models.translator import available_devices

    from .views.style import follow_palette
    from .worker import leave_a_core_for_the_gui

    leave_a_core_for_the_gui()
    follow_palette()
    window.build(["auto", *available_devices()])
    if device:
        window.model_panel.set_device_name(device)
    path = initial_checkpoint(checkpoint)
    if path:
        window.open_path(path)
    else:
        window.statusBar().showMessage("No bundled demo checkpoint found: open one with File → Open (Ctrl+O).")


def run_app(checkpoint: str | None = None, device: str | None = None) -> int:
    from PySide6.QtWidgets import QApplication

    app = QApplication.instance() or QApplication(sys.argv)
    app.setApplicationName("attnviz")
    app.setOrganizationName("attnviz")
    app.setApplicationDisplayName("attnviz")
    from PySide6.QtCore import QTimer

    from .main_window import MainWindow

    window = MainWindow(demo_checkpoints())
    window.show()  # at once, saying it is loading; the heavy imports follow from the event loop,
    app.processEvents()  # once the window has had a moment to be drawn
    QTimer.singleShot(30, lambda: build_window(window, checkpoint, device))
    code = app.exec()
    del window
    return code
