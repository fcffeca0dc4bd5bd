"""Start the desktop app: one QApplication, the main window, the bundled demos, a clean shutdown."""

from __future__ import annotations

import ctypes.util
import dataclasses
import importlib
import os
import sys
import threading
import time
import traceback
from collections.abc import Callable

from ..state.demos import ICON, demo_checkpoints, initial_checkpoint

# What Qt's xcb platform plugin needs beyond Qt itself (Debian/Ubuntu package names): without them Qt aborts.
XCB_LIBRARIES = {"xcb-cursor": "libxcb-cursor0", "xcb-icccm": "libxcb-icccm4", "xcb-keysyms": "libxcb-keysyms1",
                 "xkbcommon-x11": "libxkbcommon-x11-0"}
HEADLESS = "or run headless with QT_QPA_PLATFORM=offscreen, or draw images with `attnviz render`"


def _quit_on_interrupt(app, window) -> None:
    """Ctrl+C in the terminal closes the window cleanly (settings saved, the worker stopped): Python only
    sees the signal when it runs, so a timer gives it a moment every 200 ms. The close itself waits for the
    event loop: the signal may arrive in the middle of building the window, whose worker must exist (and
    be stopped) before the window goes."""
    import signal

    from PySide6.QtCore import QTimer

    signal.signal(signal.SIGINT, lambda *_: QTimer.singleShot(0, window.close))
    timer = QTimer(app)
    timer.timeout.connect(lambda: None)
    timer.start(200)


def platform_problem() -> str | None:
    """Why Qt could not open a window here (one line with what to do), or None. Checked before Qt starts,
    because Qt answers a missing display or library by aborting the process."""
    platform = os.environ.get("QT_QPA_PLATFORM", "")
    if not sys.platform.startswith("linux") or platform.split(":")[0] not in ("", "xcb", "wayland"):
        return None  # macOS, Windows and the offscreen/minimal platforms need nothing more
    if platform.startswith("wayland"):
        if os.environ.get("WAYLAND_DISPLAY"):
            return None
        return f"no Wayland display (WAYLAND_DISPLAY is not set); {HEADLESS}"
    if not os.environ.get("DISPLAY"):
        if not platform and os.environ.get("WAYLAND_DISPLAY"):
            return None
        return f"no display to open the window on (DISPLAY is not set); {HEADLESS}"
    missing = [package for library, package in XCB_LIBRARIES.items() if ctypes.util.find_library(library) is None]
    if missing:
        return (f"Qt's xcb platform needs system libraries that are missing: apt-get install {' '.join(missing)} "
                f"(Debian/Ubuntu); {HEADLESS}")
    return None


def create_window(checkpoint: str | None = None, device: str | None = None, settings=None, *,
                  weights: str | None = None):
    """The main window, with ``checkpoint`` (or the default demo) being opened; needs a QApplication."""
    from .main_window import MainWindow

    window = MainWindow(demo_checkpoints(), settings)
    build_window(window, checkpoint, device, weights=weights)
    return window


def build_window(window, checkpoint: str | None, device: str | None, *, weights: str | None = None) -> None:
    """Load what the window needs (pyqtgraph, torch), make its views and start opening the checkpoint;
    ``weights`` (``attnviz --dtype``): the precision models open in this time (the Weights box; its saved choice
    stays for the next launch)."""
    from models.inference.translator import available_devices

    from ..state.session import NO_REQUEST
    from .views.style import follow_palette
    from .work import leave_a_core_for_the_gui

    leave_a_core_for_the_gui()
    follow_palette()
    window.build(["auto", *available_devices()])
    if device:
        window.views.model_panel.set_device_name(device)
    if weights:
        window.views.model_panel.set_weights_name(weights)
        window.opening.weights_requested.emit(NO_REQUEST, weights)  # before the first open, as a stored choice
    path = initial_checkpoint(checkpoint)
    if path:
        window.open_path(path)
    else:
        window.statusBar().showMessage("No bundled demo checkpoint found: open one with File → Open (Ctrl+O).")


# The worker's module, imported on a thread of its own: with it come torch and every piece of the model code the
# worker runs, whatever it comes to import.
WORKER_MODULE = "attnviz.gui.worker"


def _on_gui_thread(then):
    """A QObject made on the GUI thread whose ``imported`` signal, emitted from any thread, calls ``then`` on
    the GUI thread, from its event loop (a slot of a QObject living there: a plain function connected to a
    signal would run on the emitting thread)."""
    from PySide6.QtCore import QObject, Signal, Slot

    class Imported(QObject):
        imported = Signal()

        def __init__(self):
            super().__init__()
            self.imported.connect(self.arrived)

        @Slot()
        def arrived(self) -> None:
            then()

    return Imported()


@dataclasses.dataclass
class BackgroundImport:
    """``WORKER_MODULE`` (and so torch) imported on a thread started once the window shows, so that the window stays
    drawn and responsive while torch loads (seconds on a busy machine); ``started`` and ``ended`` are epoch times,
    ``notifier.imported`` is emitted when the import has ended (succeeded or not)."""

    thread: threading.Thread
    notifier: object
    started: float
    ended: float | None = None
    error: str = ""  # why the import failed, in one line ("" while it has not)
    answered: bool = False  # the GUI thread has handled the end of the import (``then()`` has returned)

    @property
    def done(self) -> bool:
        return self.ended is not None


def import_torch_in_background(then) -> BackgroundImport:
    """Start importing ``WORKER_MODULE``; ``then()`` is called on the GUI thread once it is imported."""
    def load() -> None:
        try:
            importlib.import_module(WORKER_MODULE)
        except Exception as error:  # the window says it (a second try on the GUI thread would fail differently)
            traceback.print_exc()
            importing.error = f"{type(error).__name__}: {error}"
        finally:
            importing.ended = time.time()
            importing.notifier.imported.emit()

    def answer() -> None:
        then()
        importing.answered = True

    importing = BackgroundImport(threading.Thread(target=load, name="attnviz-import", daemon=True),
                                 _on_gui_thread(answer), time.time())
    importing.thread.start()
    return importing


def _launch_signals():
    """The signals a launch emits (made once a QApplication exists)."""
    from PySide6.QtCore import QObject, Signal

    class LaunchSignals(QObject):
        """What a launch says as it goes, for whoever follows it from outside (benchmarks/startup_probe.py and the
        tests that launch the app connect to these through ``run_app(watch=)``)."""

        built = Signal()  # the window is built (views, worker, menus) and opening its checkpoint

    return LaunchSignals()


@dataclasses.dataclass
class Launch:
    """The app as ``run_app`` starts it: the window on screen saying it is loading, being built; ``signals`` says
    when it is built, ``importing.ended`` when torch was imported."""

    app: object
    window: object
    importing: BackgroundImport
    signals: object


def launch(checkpoint: str | None = None, device: str | None = None, settings=None, *,
           weights: str | None = None) -> Launch:
    """Show the window at once, import torch on another thread, and build the window from the event loop once
    torch is there (needs a display: see :func:`platform_problem`)."""
    from PySide6.QtGui import QIcon
    from PySide6.QtWidgets import QApplication

    app = QApplication.instance() or QApplication(sys.argv)
    app.setWindowIcon(QIcon(str(ICON)))
    app.setApplicationName("attnviz")
    app.setOrganizationName("attnviz")
    app.setApplicationDisplayName("attnviz")
    from .main_window import MainWindow

    window = MainWindow(demo_checkpoints(), settings)
    _quit_on_interrupt(app, window)  # from the first moment the window is on screen
    window.show()  # at once, saying it is loading; the heavy imports follow from the event loop,
    app.processEvents()  # once the window has had a moment to be drawn
    # Only now, and nothing else on the GUI thread meanwhile: an import holds the GIL for long stretches
    # (loading libtorch), so torch imported from the very start kept the window from showing for 0.4-1 s more,
    # and importing pyqtgraph and the views beside it, or looking whether it is done every few milliseconds,
    # made both slower on a loaded machine (each hand-over of the GIL waits for the scheduler).
    signals = _launch_signals()
    importing = import_torch_in_background(
        lambda: _build_once_imported(window, checkpoint, device, importing=importing, weights=weights,
                                     signals=signals))
    return Launch(app, window, importing, signals=signals)


def _build_once_imported(window, checkpoint: str | None, device: str | None, *,
                         importing: BackgroundImport, signals, weights: str | None = None) -> None:
    """Build the window now that torch is imported; not one closed meanwhile (no model thread, no model
    opened for a window nobody sees), and not after a failed import, which the window says instead."""
    if window.closed:
        return
    if importing.error:
        window.show_start_failure(importing.error)
        return
    build_window(window, checkpoint, device, weights=weights)
    signals.built.emit()


def run_app(checkpoint: str | None = None, device: str | None = None, *, weights: str | None = None,
            watch: Callable[[Launch], None] | None = None) -> int:
    """Run the app until its window closes; ``watch`` (a benchmark's or a test's) is given the :class:`Launch` once
    the window shows, before the event loop starts, to connect to its signals."""
    problem = platform_problem()
    if problem:
        print(f"attnviz: error: {problem}", file=sys.stderr)
        return 1
    started = launch(checkpoint, device, weights=weights)
    app, window = started.app, started.window
    if watch is not None:
        watch(started)
    # closed before the event loop began (Ctrl+C at launch): the loop would never hear that its last window went
    code = 0 if window.closed else app.exec()
    window.shut_down()  # whatever ended the loop, the model thread stops before Python tears Qt down
    del started, window
    return code
