"""Start the desktop app: one QApplication, the main window, the bundled demos, a clean shutdown."""

from __future__ import annotations

import sys
from pathlib import Path

RESOURCES = Path(__file__).resolve().parent.parent / "resources"
DEMO_FOLDER = RESOURCES / "checkpoints"
DEFAULT_DEMO = DEMO_FOLDER / "en-es-transformer.safetensors"


def demo_checkpoints() -> list[Path]:
    """The bundled checkpoints (not the trainer's ``*.train-state.safetensors`` beside them)."""
    return sorted(path for path in DEMO_FOLDER.glob("*.safetensors") if not path.name.endswith(".train-state.safetensors"))


def demo_example(path: Path) -> str:
    """The first example sentence recorded for a bundled demo ('' for any other checkpoint)."""
    import json

    records_file = DEMO_FOLDER / "demos.json"
    if path.parent.resolve() != DEMO_FOLDER.resolve() or not records_file.exists():
        return ""
    record = json.loads(records_file.read_text(encoding="utf-8")).get(path.stem, {})
    return next(iter(record.get("examples", {})), "")


def available_devices() -> list[str]:
    import torch

    devices = ["auto", "cpu"]
    if torch.cuda.is_available():
        devices.append("cuda")
    if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        devices.append("mps")
    return devices


def initial_checkpoint(requested: str | None) -> str | None:
    if requested:
        return requested
    if DEFAULT_DEMO.exists():
        return str(DEFAULT_DEMO)
    demos = demo_checkpoints()
    return str(demos[0]) if demos else None


def follow_palette() -> None:
    """Plots take the system palette's colours, so they follow light and dark themes."""
    import pyqtgraph as pg
    from PySide6.QtGui import QPalette
    from PySide6.QtWidgets import QApplication

    palette = QApplication.palette()
    pg.setConfigOptions(background=palette.color(QPalette.ColorRole.Base),
                        foreground=palette.color(QPalette.ColorRole.Text), antialias=True)


def create_window(checkpoint: str | None = None, device: str | None = None, settings=None):
    """The main window, with ``checkpoint`` (or the default demo) being opened; needs a QApplication."""
    from .main_window import MainWindow
    from .worker import leave_a_core_for_the_gui

    leave_a_core_for_the_gui()
    follow_palette()
    window = MainWindow(demo_checkpoints(), available_devices(), settings)
    if device:
        window.model_panel.device.setCurrentText(device)
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
