"""The file dialogs the features share: where to save (asked in the folder of the last save) and the filters."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtWidgets import QFileDialog, QWidget

from ..state.settings import SettingsReader

CHECKPOINT_FILTER = "Checkpoints (*.safetensors *.pt *.pth *.bin *.chkpt *.ckpt);;All files (*)"
IMAGE_FILTER = "PNG (*.png);;SVG (*.svg)"


def ask_save_path(parent: QWidget, stored: SettingsReader, title: str, *, name: str, file_filter: str) -> str:
    """Where to save, asked in the folder of the last save ('' when the user cancels); the folder is remembered in
    ``stored``'s settings."""
    folder = stored.text("files/export_folder", str(Path.home()))
    path, _ = QFileDialog.getSaveFileName(parent, title, str(Path(folder) / name), file_filter)
    if path:
        stored.store.setValue("files/export_folder", str(Path(path).parent))
    return path
