"""Launch the app as `attnviz [ARGS]` would and report its own times from inside, then quit: what
benchmarks/startup.py measures, and how tests follow a real launch.

    python -m benchmarks.startup_probe LAUNCHED [attnviz arguments...]

LAUNCHED is the epoch time the launch began (the caller's `time.time()` before it started this process). Printed
on stdout, one line each, as they happen: `shown S` (the window is on screen, saying it is loading), `built S` (the
window built: views, worker, menus), then once the first heatmap is drawn `heatmap S`, `torch S` (the background
import of torch ended) and `weights NAME` (the precision the model opened in); S is seconds since LAUNCHED. The
probe follows the launch through the signals the launcher emits (`run_app(watch=)`, attnviz/gui/app.py).
"""

from __future__ import annotations

import sys
import time

PROBED = ("shown", "torch", "built", "heatmap")  # the times printed


class StartupProbe:
    """Given the launch once the window shows: says so, says when it is built (its ``built`` signal), and looks
    every 5 ms for the first heatmap, then closes the window."""

    def __init__(self, launched: float) -> None:
        self.launched = launched

    def __call__(self, started) -> None:
        from PySide6.QtCore import QTimer

        self.started = started
        self.say(f"shown {time.time() - self.launched:.3f}")
        started.signals.built.connect(lambda: self.say(f"built {time.time() - self.launched:.3f}"))
        self.timer = QTimer(started.window)
        self.timer.timeout.connect(self.look)
        self.timer.start(5)

    def look(self) -> None:
        app, window = self.started.app, self.started.window
        if window.built and window.session.results and window.views.focus.image.image is not None:
            app.processEvents()  # the heatmap's paint
            self.say(f"heatmap {time.time() - self.launched:.3f}")
            self.say(f"torch {self.started.importing.ended - self.launched:.3f}")
            self.say(f"weights {window.session.model.weights}")
            self.timer.stop()
            window.close()

    @staticmethod
    def say(line: str) -> None:
        print(line, flush=True)  # at once: a test waits for a line before it interrupts the app


def main(argv: list[str]) -> int:
    from attnviz.cli import build_parser
    from attnviz.gui.app import run_app

    launched, arguments = float(argv[0]), argv[1:]
    args = build_parser().parse_args(["gui", *arguments])
    return run_app(args.checkpoint, args.device, weights=args.dtype, watch=StartupProbe(launched))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
