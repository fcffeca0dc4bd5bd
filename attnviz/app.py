"""The desktop app's entry point. The full viewer is being built; this window shows the model it opened."""

from __future__ import annotations

import sys
from pathlib import Path

RESOURCES = Path(__file__).resolve().parent.parent / "resources"
DEMO_CHECKPOINT = RESOURCES / "checkpoints" / "en-es-transformer.safetensors"


def run_app(checkpoint: str | None, device: str | None) -> int:
    from PySide6.QtWidgets import QApplication, QLabel, QMainWindow

    from models.checkpoint import load_checkpoint
    from models.errors import AttnvizError

    from .commands.info import describe

    app = QApplication.instance() or QApplication(sys.argv)
    app.setApplicationName("attnviz")
    path = Path(checkpoint) if checkpoint else DEMO_CHECKPOINT
    try:
        summary = describe(load_checkpoint(path))
        lines = [f"{summary['arch']} — {summary['parameters']:,} parameters",
                 f"attention: {', '.join(summary['attention_kinds']) or 'none'}", str(path)]
    except AttnvizError as failure:
        lines = [f"Could not open a model: {failure}"]
    window = QMainWindow()
    window.setWindowTitle(f"attnviz — {path.name}")
    label = QLabel("\n".join(lines))
    label.setMargin(24)
    window.setCentralWidget(label)
    window.resize(640, 240)
    window.show()
    return app.exec()
