"""The main window: composes the views (layout.py: one frozen ``Views``), the worker thread, the features
(features/: each owns its widgets and signal wiring, and is handed the session, the views, the worker and the few
features it uses: docs/ARCHITECTURE.md, "The window's features") and the menus (actions.py: one table); keeps
the settings and the window's events.

The window is made in two steps so that it can appear at once: the constructor shows the window with a
"loading" line (Qt only), and ``build`` — which loads pyqtgraph and torch — makes the views and the
worker. ``attnviz`` imports torch on a thread of its own once the window is on screen and calls ``build``
from the event loop when that import is done (``gui/app.py:launch``), so the loading window keeps repainting.
"""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QEvent, QSettings, Qt, QUrl
from PySide6.QtGui import QKeySequence
from PySide6.QtWidgets import QLabel, QMainWindow, QMessageBox

from .. import __version__
from ..state.session import NO_REQUEST, Session
from ..state.settings import SettingsReader
from .docks import keep_on_screen
from .saved_layout import reset_layout, restore_docks, restore_geometry, save_layout, show_layout_note


class MainWindow(QMainWindow):
    def __init__(self, demos: list[Path], settings: QSettings | None = None):
        super().__init__()
        self.settings = settings or QSettings()
        self.stored = SettingsReader(self.settings)  # every read goes through it: a bad value cannot stop the app
        self.session = Session()
        self.demos = demos
        self.built = False
        self.closed = False  # a window closed while torch was still being imported is never built
        self.setWindowTitle("attnviz")
        self.layout_notes = [restore_geometry(self, self.stored)]  # said in the status bar once the window is built
        loading = QLabel("Loading attnviz and the model…")
        loading.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.setCentralWidget(loading)

    def build(self, devices: list[str]) -> None:
        """Make the views, the worker thread, the features and the menus (this loads pyqtgraph and torch)."""
        from .features.ablation import Ablation
        from .features.comparing import Comparing
        from .features.contributions import Contributions
        from .features.exporting import Exporting
        from .features.head_stats import head_stats_tool
        from .features.importance import ImportanceTool
        from .features.lens import Lens
        from .features.neuron import Neuron
        from .features.opening import Opening
        from .features.patching import Patching
        from .features.presenting import Presenting
        from .features.sessions import Sessions
        from .features.viewing import Viewing
        from .layout import setup_views
        from .worker import WorkerThread

        before = self.frameGeometry()
        self.views = views = setup_views(self, devices, self.demos)
        self.worker_thread = WorkerThread(self.session.jobs)  # the session's job board
        session, worker, stored = self.session, self.worker, self.stored
        # Each feature is handed the features it uses, made before it: they reach one another in one direction.
        self.contributions = Contributions(session, views, worker, parent=self)
        self.neuron = Neuron(session, views, worker, parent=self)
        self.lens = Lens(session, views, worker, parent=self)
        self.viewing = Viewing(session, views, worker, contributions=self.contributions, neuron=self.neuron,
                               lens=self.lens, parent=self)
        self.ablation = Ablation(session, views, worker, viewing=self.viewing, parent=self)
        self.patching = Patching(session, views, worker, viewing=self.viewing, parent=self, stored=stored)
        self.opening = Opening(session, views, worker, viewing=self.viewing, ablation=self.ablation,
                               contributions=self.contributions, parent=self, stored=stored)
        self.comparing = Comparing(session, views, worker, viewing=self.viewing, opening=self.opening,
                                   demos=self.demos, parent=self)
        self.sessions = Sessions(session, views, opening=self.opening, comparing=self.comparing,
                                 contributions=self.contributions, parent=self, stored=stored)
        self.exporting = Exporting(session, views, viewing=self.viewing, neuron=self.neuron, parent=self,
                                   stored=stored)
        self.presenting = Presenting(session, views, viewing=self.viewing, window=self)
        self.stats = head_stats_tool(session, views, worker, viewing=self.viewing, parent=self)
        self.importance = ImportanceTool(session, views, worker, viewing=self.viewing, exporting=self.exporting,
                                         parent=self, stored=stored)
        self._build_menus()
        for line in views.input_bar.line_edits():  # the sentence box has the focus at start: the keys work there too
            line.installEventFilter(self)
        self._restore_settings()
        self.setAcceptDrops(True)
        self.built = True
        keep_on_screen(self, before)

    def _build_menus(self) -> None:
        """The menu bar from actions.py's table; the menus the features fill, and the entries their state checks."""
        from .actions import build_menus, window_keys

        self.named_actions = named = build_menus(self)
        self.opening.fill_menus(recent=named["recent"], demos=named["demos"], demo_paths=self.demos)
        named["compare_with"].aboutToShow.connect(lambda: self.comparing.fill_compare_menu(named["compare_with"]))
        for action in (named["stop_compare"], named["force_b"]):
            self.comparing.comparing_changed.connect(action.setEnabled)
        for action in named["presenting"]:  # the bare keys act only while presenting
            self.presenting.presenting_changed.connect(action.setEnabled)
        self.presenting.presenting_changed.connect(named["present"].setChecked)
        self.window_keys = window_keys()

    @property
    def worker(self):
        """The worker object: its signals and slots cross to the worker thread."""
        return self.worker_thread.worker

    @property
    def head_stats(self):
        """The Head statistics panel, once View → Corpus head statistics… has made it (else None)."""
        return self.stats.panel

    @property
    def importance_panel(self):
        """The Head importance panel, once View → Head importance… has made it (else None)."""
        return self.importance.panel

    # --- what the rest of the app asks of the window --------------------------------------------------
    def open_path(self, path: str) -> None:
        self.opening.open_path(path)

    def run(self) -> None:
        self.viewing.run()

    def select(self, **changes) -> None:
        self.viewing.select(**changes)

    def show_error(self, message: str) -> None:
        self.views.show_error(message)

    # --- settings -------------------------------------------------------------------------------------
    def _restore_settings(self) -> None:
        from models.nn.precisions import PRECISIONS
        from .views.style import COLORMAPS

        views = self.views
        self.layout_notes.append(restore_docks(views.docks, self.stored))
        views.selector.set_colormap_name(self.stored.choice("view/colormap", "viridis", COLORMAPS))
        views.selector.set_masks_visible(self.stored.boolean("view/masks", True))
        views.selector.reveal_rows.setChecked(self.stored.boolean("view/reveal_rows", False))
        views.model_panel.set_weights_name(self.stored.choice("model/weights", PRECISIONS[0], PRECISIONS))
        self.opening.weights_requested.emit(NO_REQUEST, views.model_panel.weights_name())  # before the first open
        if self.stored.problems:
            self.statusBar().showMessage("Settings ignored: " + "; ".join(self.stored.problems), 15000)
        show_layout_note(self, "; ".join(note for note in self.layout_notes if note))
        self.opening.update_recent_menu()

    def _save_settings(self) -> None:
        selector = self.views.selector
        save_layout(self.settings, *self.presenting.layout_to_save())
        self.settings.setValue("view/colormap", selector.colormap_name())
        self.settings.setValue("view/masks", selector.masks_visible())
        self.settings.setValue("view/reveal_rows", selector.reveal_rows.isChecked())
        if self.session.model is not None:  # the open model's input, restored when it is opened next
            run = self.views.input_bar.run_settings()
            self.settings.setValue("run/model", str(self.session.model.path))
            for key in ("text", "mode", "beam", "target"):
                self.settings.setValue(f"run/{key}", getattr(run, key))
            self.settings.remove("run/max_len")  # each model's limit is its own
        self.settings.sync()

    # --- window events --------------------------------------------------------------------------------
    def eventFilter(self, watched, event) -> bool:  # noqa: N802 (Qt's name)
        """A line edit claims Ctrl/Alt+arrows for moving its cursor; the window's navigation keys win."""
        if event.type() == QEvent.Type.ShortcutOverride:
            if QKeySequence(event.keyCombination()).toString() in self.window_keys:
                event.ignore()
                return True
        return super().eventFilter(watched, event)

    def dragEnterEvent(self, event) -> None:  # noqa: N802 (Qt's name)
        if event.mimeData().hasUrls() and any(url.isLocalFile() for url in event.mimeData().urls()):
            event.acceptProposedAction()

    def dropEvent(self, event) -> None:  # noqa: N802
        paths = [url.toLocalFile() for url in event.mimeData().urls() if isinstance(url, QUrl) and url.isLocalFile()]
        if paths:
            event.acceptProposedAction()
            self.open_path(paths[0])

    def reset_layout(self) -> None:
        """View → Reset layout: presenting ends, then the first launch's window and docks."""
        self.presenting.set_presenting(False)
        reset_layout(self.views.docks)

    def explain(self) -> None:
        from .views.help import explanation_dialog

        explanation_dialog(self).open()

    def show_shortcuts(self) -> None:
        from .actions import shortcut_list
        from .views.help import shortcuts_dialog

        shortcuts_dialog(self, shortcut_list()).open()

    def about(self) -> None:
        QMessageBox.about(self, "About attnviz",
                          f"<h3>attnviz {__version__}</h3><p>See exactly what the attention of a sequence-to-sequence "
                          "model did: every layer, every head, every decoding step, with its masks.</p>"
                          "<p>Offline and native: PyTorch, Qt (PySide6) and pyqtgraph.</p>")

    def resizeEvent(self, event) -> None:  # noqa: N802
        super().resizeEvent(event)
        if self.built and event.size().height() != event.oldSize().height():
            self.views.input_bar.follow_window_height()
        if self.built and not self.closed:
            self.presenting.window_resized()

    def moveEvent(self, event) -> None:  # noqa: N802
        super().moveEvent(event)
        if self.built and not self.closed:
            self.presenting.window_resized()

    def show_start_failure(self, line: str) -> None:
        """What the app needs could not be imported: the loading line says so instead of loading for ever."""
        self.centralWidget().setText(f"attnviz could not start: {line}\n(the details are in the terminal)")

    def closeEvent(self, event) -> None:  # noqa: N802
        self.closed = True
        if self.built:  # closed while still loading: nothing to stop or save yet
            self.views.decoding.stop()
            self.views.input_bar.stop()
            self._save_settings()  # the layout saved is the user's own, never the presentation's
            self.presenting.window_closing()
            self.worker_thread.close()
        super().closeEvent(event)

    def shut_down(self) -> None:
        """Stop the model thread if it still runs (the event loop can end without a close event)."""
        if self.built:
            self.worker_thread.close()
