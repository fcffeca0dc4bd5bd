"""Start the desktop app: one QApplication, the main window, the bundled demos, a clean shutdown."""

from __future__ import annotations

import sys

from .demos import demo_checkpoints, initial_checkpoint


def create_window(checkpoint: str | None = None, device: str | None = None, settings=None):
    """The main window, with ``checkpoint`` (or the default demo) being opened; needs a QApplication."""
    from models.translator import available_devices

    from .main_window import MainWindow
    from .views.style import follow_palette
    from .worker import leave_a_core_for_the_gui

    leave_a_core_for_the_gui()
    follow_palette()
    window = MainWindow(demo_checkpoints(), ["auto", *available_devices()], settings)
    if device:
        window.model_panel.set_device_name(device)
    path = initial_checkpoint(checkpoint)
    if path:
        window.open_path(path)
    else:
        window.statusBar().showMessage("No bundled demo checkpoint found: open one with File → Open (Ctrl+O).")
    return window


def run_app(checkpoint: str | None = None, device: str | None = None) -> int:
    from PySide6.QtWidgets import QApplication

    app = QApplication.instance() or QApplication(sys.argv)
    app.setApplicationName("attnviz")
    app.setOrganizationName("attnviz")
    app.setApplicationDisplayName("attnviz")
    window = create_window(checkpoint, device)
    window.show()
    code = app.exec()
    del window
    return code
