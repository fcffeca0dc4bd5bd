"""The main window: wires the session, the worker thread and the views; menus, shortcuts, files, settings.

The window is made in two steps so that it can appear at once: the constructor shows the window with a
"loading" line (Qt only), and ``build`` — which loads pyqtgraph and torch — makes the views and the
worker. ``attnviz`` calls ``build`` from the event loop right after the window is on screen.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import QEvent, QRect, QSettings, QSize, Qt, QUrl, Signal
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import (QDockWidget, QFileDialog, QLabel, QMainWindow, QMenu, QMessageBox, QScrollArea,
                               QSplitter, QTabWidget, QVBoxLayout, QWidget)

from models.errors import AttnvizError
from models.inference.modes import MAX_BEAM, MIN_BEAM_SEARCH, MODE_NAMES, Mode

from .. import __version__
from ..state import viewmodel
from ..state.demos import demo_examples, demo_name, demo_pairs
from ..state.export import write_csv, write_npz
from ..state.figures import Caption, compare_svg, heads_svg, heatmap_svg, without_masks
from ..state.session import NO_REQUEST, ModelInfo, RunSettings, Session
from ..state.session_file import SUFFIX as SESSION_SUFFIX
from ..state.settings import SettingsReader
from .rendering import figure_image, save_figure

CHECKPOINT_FILTER = "Checkpoints (*.safetensors *.pt *.pth *.bin *.chkpt *.ckpt);;All files (*)"
SESSION_FILTER = "attnviz sessions (*.attnviz);;All files (*)"
PRESENTATION_FONT_SCALE = 1.6  # presentation mode: text readable from the back of a classroom
MAX_RECENT = 8
NOTHING_RUN = "The attention appears here once a sentence has run."
PREFERRED_SIZE = QSize(1360, 860)  # the first window's size where the screen has room for it
FRAME_ALLOWANCE = QSize(16, 40)  # a window manager's borders and title bar: unknown until the window is shown


def initial_size(available: QSize) -> QSize:
    """The first window's size: the preferred one, or what the screen's available area (without its panels)
    leaves once the window manager has framed the window."""
    return PREFERRED_SIZE.boundedTo(available - FRAME_ALLOWANCE)


def window_title(path: Path) -> str:
    """The model's name once (a demo's own name), then the app's. Qt appends the application's display name
    to a title that does not end with it: "attnviz — model" would read "attnviz — model — attnviz"."""
    return f"{demo_name(path) or Path(path).name} — attnviz"


def fit_inside(frame: QRect, bounds: QRect) -> QRect:
    """``frame`` moved, and shrunk where it must be, to lie inside ``bounds``."""
    size = frame.size().boundedTo(bounds.size())
    left = min(max(frame.left(), bounds.left()), bounds.right() + 1 - size.width())
    top = min(max(frame.top(), bounds.top()), bounds.bottom() + 1 - size.height())
    return QRect(left, top, size.width(), size.height())


class MainWindow(QMainWindow):
    load_requested = Signal(int, str, str)  # job id, path, device → worker
    import_requested = Signal(int, object)  # job id, ImportAnswer → worker
    save_requested = Signal(str)
    run_requested = Signal(object)  # Request → worker
    device_requested = Signal(int, str)  # job id, device
    weights_requested = Signal(int, str)  # job id (0: the setting only), float32 | bfloat16 | float16
    partner_requested = Signal(int, str, str)  # job id, path, device → worker (the model to compare with)
    partner_dropped = Signal(int)  # job id: stop comparing

    def __init__(self, demos: list[Path], settings: QSettings | None = None):
        super().__init__()
        self.settings = settings or QSettings()
        self.stored = SettingsReader(self.settings)  # every read goes through it: a bad value cannot stop the app
        self.session = Session()
        self.demos = demos
        self.built = False
        self.opening_name = ""  # the file being opened, for the loading progress
        self.ask_again = None  # asks for the open (or import) under way again: done when the precision changes
        self.pending_session = None  # a SavedSession being reopened: applied once its model and run arrive
        self.pending_partner = None  # a reopened session's model B: opened once model A has loaded
        self.pending_pair: tuple[Path, Path] | None = None  # a demo pair: model B opens once model A has loaded
        self.pending_session_opened = False  # its model has loaded (a run of the model before cannot take it)
        self.presentation = None  # while presenting: what to restore (window state, fonts, full screen)
        self.setWindowTitle("attnviz")
        geometry = self.stored.blob("window/geometry")
        if geometry is None or not self.restoreGeometry(geometry):
            self._place_on_screen()
        loading = QLabel("Loading attnviz and the model…")
        loading.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.setCentralWidget(loading)

    def build(self, devices: list[str]) -> None:
        """Make the views, menus and worker thread (this loads pyqtgraph and torch)."""
        before = self.frameGeometry()
        self._build_views(devices)
        self._build_menus()
        self._start_worker()
        self._restore_settings()
        self.setAcceptDrops(True)
        self.built = True
        self._keep_on_screen(before)

    # --- the window on its screen ---------------------------------------------------------------------
    def _place_on_screen(self) -> None:
        """The first window: as large as the screen's available area allows, centred in it."""
        available = self.screen().availableGeometry()
        size = initial_size(available.size())
        frame = QRect(0, 0, size.width() + FRAME_ALLOWANCE.width(), size.height() + FRAME_ALLOWANCE.height())
        frame.moveCenter(available.center())
        self.resize(size)
        self.move(frame.topLeft())

    def _screen_room(self, before: QRect) -> QRect:
        """Where the window may be: the screen's available area (or its own frame ``before``, where it was
        already larger than the screen)."""
        return self.screen().availableGeometry().united(before)

    def _fits(self, before: QRect) -> bool:
        """Whether the window's minimum size, framed, fits its room on the screen."""
        self.layout().activate()  # the minimum size of what was just shown applies now, not at the next event
        room, frame = self._screen_room(before), self.frameGeometry().size() - self.size()
        needed = self.minimumSizeHint().expandedTo(self.minimumSize()) + frame
        return needed.width() <= room.width() and needed.height() <= room.height()

    def _keep_on_screen(self, before: QRect) -> None:
        """Undo what a new view's minimum size added past the screen (a window already larger than the
        screen may keep its size, never more)."""
        self.layout().activate()
        frame = self.frameGeometry()
        target = fit_inside(frame, self._screen_room(before))
        if target != frame:
            self.resize(target.size() - (frame.size() - self.size()))
            self.move(target.topLeft())

    def _show_dock(self, dock: QDockWidget) -> None:
        """Show a panel made on first use (Head statistics, Head importance) beside the views: it takes its
        room from them, never from past the screen's edge. A second such panel is a tab of the first (stacked,
        each would be a strip of a screen 768 pixels high); where the screen has no room for another column of
        docks, the panel shares the Model dock's, as a tab."""
        before = self.frameGeometry()
        open_already = [other for other in self.panel_docks
                        if other is not dock and other.toggleViewAction().isChecked()]  # shown, or a tab behind one
        if dock not in self.panel_docks:
            self.panel_docks.append(dock)
        dock.show()
        if open_already and dock not in self.tabifiedDockWidgets(open_already[0]):
            self.tabifyDockWidget(open_already[0], dock)
        elif not self._fits(before) and self.dockWidgetArea(dock) != self.dockWidgetArea(self.model_dock):
            self.tabifyDockWidget(self.model_dock, dock)
        dock.raise_()
        self._keep_on_screen(before)

    # --- construction -------------------------------------------------------------------------------
    def _build_views(self, devices: list[str]) -> None:
        from .views.compare import CompareBar, CompareView
        from .views.controls import AblationBar, InputBar, ModelPanel, SelectorBar, SnapshotBar
        from .views.decoding import DecodingPanel
        from .views.heatmap import HeatmapView
        from .views.thumbnails import ThumbnailGrid

        self.input_bar = InputBar()
        self.ablation_bar = AblationBar()
        self.snapshot_bar = SnapshotBar()
        self.selector = SelectorBar()
        self.selector.setEnabled(False)  # nothing to choose from until a trace exists
        self.focus = HeatmapView()
        self.compare_bar = CompareBar()
        self.compare_view = CompareView()  # model A | model B | B − A, in the focus view's place while comparing
        self.compare_view.hide()
        self.head_grid = ThumbnailGrid()
        self.model_view = ThumbnailGrid()
        self.decoding = DecodingPanel()
        self.model_panel = ModelPanel(devices, self.demos)
        focus_area = QWidget()
        focus_layout = QVBoxLayout(focus_area)
        focus_layout.setContentsMargins(4, 4, 4, 4)
        focus_layout.addWidget(self.selector)
        focus_layout.addWidget(self.focus, 1)
        focus_layout.addWidget(self.compare_view, 1)
        self.grids = QTabWidget()
        # In a narrow panel both tabs stay in view, their titles shortened ("Heads of th…"), not behind arrows.
        self.grids.setUsesScrollButtons(False)
        self.grids.setElideMode(Qt.TextElideMode.ElideRight)
        for view, title in ((self.head_grid, "Heads of this layer"), (self.model_view, "All layers × heads")):
            self.grids.setTabToolTip(self.grids.addTab(view, title), title)
        splitter = QSplitter(Qt.Orientation.Horizontal)
        splitter.addWidget(focus_area)
        splitter.addWidget(self.grids)
        splitter.setSizes([700, 420])
        central = QWidget()
        layout = QVBoxLayout(central)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.input_bar)
        layout.addWidget(self.ablation_bar)
        layout.addWidget(self.snapshot_bar)
        layout.addWidget(self.compare_bar)
        layout.addWidget(splitter, 1)
        self.setCentralWidget(central)
        self.model_dock = self._dock("Model", self.model_panel, Qt.DockWidgetArea.LeftDockWidgetArea)
        self.panel_docks: list[QDockWidget] = []  # the panels made on first use, in the order they were made
        self.decoding_dock = self._dock("Decoding", self.decoding, Qt.DockWidgetArea.BottomDockWidgetArea)
        self.decoding_dock.dockLocationChanged.connect(
            lambda area: self.decoding.set_stacked(area in (Qt.DockWidgetArea.LeftDockWidgetArea,
                                                            Qt.DockWidgetArea.RightDockWidgetArea)))
        self.resizeDocks([self.model_dock], [300], Qt.Orientation.Horizontal)
        # A third of a short window at most: on a 720-pixel screen the heatmap keeps the larger share.
        self.resizeDocks([self.decoding_dock], [min(280, self.height() // 3)], Qt.Orientation.Vertical)
        self.input_bar.run_requested.connect(self.run)
        self.selector.changed.connect(self._on_selector_changed)
        self.selector.colormap_changed.connect(self.set_colormap)
        self.selector.masks_toggled.connect(self.focus.set_masks_visible)
        self.selector.masks_toggled.connect(self.compare_view.set_masks_visible)
        self.compare_bar.stop_requested.connect(self.stop_comparing)
        self.compare_view.hovered.connect(lambda text: self.statusBar().showMessage(text))
        self.model_panel.compare_chosen.connect(self.compare_with)
        self.selector.options_changed.connect(self._on_options_changed)
        self.head_grid.clicked.connect(lambda _, head: self.select(head=head))
        self.model_view.clicked.connect(lambda layer, head: self.select(layer=layer, head=head))
        self.head_grid.head_toggled.connect(lambda _, head: self.toggle_head(self.session.selection.layer, head))
        self.head_grid.layer_toggled.connect(lambda _: self.toggle_layer(self.session.selection.layer))
        self.model_view.head_toggled.connect(self.toggle_head)
        self.model_view.layer_toggled.connect(self.toggle_layer)
        self.snapshot_bar.index_chosen.connect(self.choose_snapshot)
        self.ablation_bar.restore_requested.connect(self.restore_heads)
        self.ablation_bar.compare_toggled.connect(self.show_original)
        self.decoding.step_changed.connect(lambda step: self.select(step=step))
        self.decoding.hypothesis_chosen.connect(self._on_hypothesis)
        self.model_panel.demo_chosen.connect(self.open_path)
        self.model_panel.device_chosen.connect(self._on_device)
        self.model_panel.weights_chosen.connect(self._on_weights)
        self.focus.hovered.connect(lambda text: self.statusBar().showMessage(text))

    def _dock(self, title: str, widget: QWidget, area: Qt.DockWidgetArea, *, scrolls: bool = False) -> QDockWidget:
        """``scrolls``: the widget scrolls inside the dock when the dock is smaller than it, so that its
        minimum size (a corpus panel's choices and lists) never makes the window grow past the screen; the
        panel itself lays out and scrolls its maps within what the dock gives it."""
        dock = QDockWidget(title, self)
        dock.setObjectName(f"{title.lower()}Dock")
        if scrolls:
            scroll = QScrollArea()
            scroll.setWidget(widget)
            scroll.setWidgetResizable(True)
            scroll.setFrameShape(QScrollArea.Shape.NoFrame)
            widget = scroll
        dock.setWidget(widget)
        self.addDockWidget(area, dock)
        return dock

    def _action(self, menu, text: str, slot, *, shortcut=None, tip: str = "") -> QAction:
        action = QAction(text, self)
        if shortcut is not None:
            action.setShortcut(QKeySequence(shortcut))
        action.setToolTip(tip or text)
        action.setStatusTip(tip)
        action.triggered.connect(slot)
        menu.addAction(action)
        return action

    def _build_menus(self) -> None:
        file_menu = self.menuBar().addMenu("&File")
        self._action(file_menu, "&Open…", self.open_dialog, shortcut=QKeySequence.StandardKey.Open,
                     tip="Open an attnviz checkpoint, or one trained with other code (converted on opening)")
        self._action(file_menu, "Open &Folder…", self.open_folder_dialog,
                     tip="Open a snapshot series (train --snapshots N) or a checkpoint folder (a Hugging Face Marian, BART, mBART, NLLB, Pegasus, BlenderbotSmall, "
                         "FSMT or T5 model, the seq2seq tutorial's files)")
        self._action(file_menu, "Save Model &As…", self.save_model_as, shortcut="Ctrl+Shift+S",
                     tip="Save the open model as an attnviz checkpoint (an imported model keeps your answers)")
        self.recent_menu = file_menu.addMenu("Open &Recent")
        file_menu.addSeparator()
        self._action(file_menu, "Open Sessio&n…", self.open_session_dialog, shortcut="Ctrl+Shift+O",
                     tip="Reopen a saved view: the model, the sentence, the decoding and the selected head")
        self._action(file_menu, "Save Sess&ion As…", self.save_session, shortcut="Ctrl+Alt+S",
                     tip="Save this view (model, sentence, decoding, head, colours) as a small .attnviz file")
        demo_menu = file_menu.addMenu("&Demos")
        self.demo_actions = {}  # path → its action, checked while that demo is open (or being opened)
        for path in self.demos:
            action = self._action(demo_menu, path.stem, lambda _=False, p=path: self.open_path(str(p)))
            action.setCheckable(True)
            self.demo_actions[path] = action
        pairs = demo_pairs() if self.demos else []
        if pairs:
            demo_menu.addSeparator()
        for title, a, b in pairs:
            self._action(demo_menu, f"Compare {title}", lambda _=False, a=a, b=b: self.open_pair(a, b),
                         tip=f"Open {a.stem} as model A and {b.stem} as model B, side by side with B − A")
        demo_menu.setEnabled(bool(self.demos))
        file_menu.addSeparator()
        self._action(file_menu, "Compare &With…", self.compare_dialog,
                     tip="Open a second model beside this one: the same sentence runs on both, one selection drives "
                         "both, and B − A is shown where their tokens agree")
        self.stop_compare_action = self._action(file_menu, "Stop &Comparing", self.stop_comparing,
                                                tip="Back to one model")
        self.stop_compare_action.setEnabled(False)
        file_menu.addSeparator()
        export_menu = file_menu.addMenu("&Export")
        self._action(export_menu, "Heatmap as &image…", self.export_focus_image,
                     shortcut=QKeySequence.StandardKey.Save, tip="The focus view as PNG (2×) or SVG")
        self._action(export_menu, "&Copy image", self.copy_focus_image, shortcut="Ctrl+Shift+C",
                     tip="The focus view to the clipboard, for pasting into slides")
        self._action(export_menu, "All &heads of this layer as image…", self.export_grid_image)
        self._action(export_menu, "Attention &data (NPZ)…", self.export_npz)
        self._action(export_menu, "This heatmap as &CSV…", self.export_csv)
        file_menu.addSeparator()
        self._action(file_menu, "&Quit", self.close, shortcut=QKeySequence.StandardKey.Quit)
        view_menu = self.menuBar().addMenu("&View")
        self._action(view_menu, "Next layer", lambda: self.step_selection("layer", 1), shortcut="Ctrl+Down")
        self._action(view_menu, "Previous layer", lambda: self.step_selection("layer", -1), shortcut="Ctrl+Up")
        self._action(view_menu, "Next head", lambda: self.step_selection("head", 1), shortcut="Ctrl+Right")
        self._action(view_menu, "Previous head", lambda: self.step_selection("head", -1), shortcut="Ctrl+Left")
        self._action(view_menu, "Next step", lambda: self.step_selection("step", 1), shortcut="Alt+Right")
        self._action(view_menu, "Previous step", lambda: self.step_selection("step", -1), shortcut="Alt+Left")
        self._action(view_menu, "First step", lambda: self.select(step=0), shortcut="Alt+Home")
        self._action(view_menu, "Last step", lambda: self.select(step=len(self.session.trace.tgt_tokens) - 1)
                     if self.session.trace else None, shortcut="Alt+End")
        self._action(view_menu, "Next training step", lambda: self.step_snapshot(1), shortcut="Ctrl+Shift+Right",
                     tip="A snapshot series: the next snapshot of the training run")
        self._action(view_menu, "Previous training step", lambda: self.step_snapshot(-1), shortcut="Ctrl+Shift+Left",
                     tip="A snapshot series: the previous snapshot of the training run")
        self._action(view_menu, "Toggle masks", self.selector.toggle_masks, shortcut="Ctrl+M")
        view_menu.addAction(self.selector.reveal_rows)
        self._action(view_menu, "Reset zoom", self.focus.reset_zoom, shortcut="Ctrl+0",
                     tip="Show the whole heatmap again (or double-click it)")
        self.present_action = self._action(view_menu, "&Present", self.toggle_presentation, shortcut="F11",
                                           tip="Full screen, large text, the decoding beside the heatmap; ← → walk the "
                                               "steps, ↑ ↓ the layers, Esc ends")
        self.present_action.setCheckable(True)
        self.presentation_keys = self._presentation_keys()
        self.window_keys = {action.shortcut().toString() for action in view_menu.actions() if not action.shortcut().isEmpty()}
        for line in self.input_bar.line_edits():  # the sentence box has the focus at start: the keys work there too
            line.installEventFilter(self)
        view_menu.addSeparator()
        self._action(view_menu, "Corpus head &statistics…", self.corpus_head_stats,
                     tip="What every head does over a PAIRS.tsv corpus, and where each head is most and least typical")
        self._action(view_menu, "Head &importance…", self.head_importance,
                     tip="How much the score on a PAIRS.tsv corpus drops when each head is switched off alone")
        view_menu.addAction(self.model_dock.toggleViewAction())
        view_menu.addAction(self.decoding_dock.toggleViewAction())
        help_menu = self.menuBar().addMenu("&Help")
        self._action(help_menu, "&What am I looking at?", self.explain, shortcut="F1",
                     tip="Attention kinds, masks, aggregates, decoding steps and beams, on one page")
        self._action(help_menu, "&Keyboard shortcuts", self.show_shortcuts)
        self._action(help_menu, "&About attnviz", self.about)

    def _start_worker(self) -> None:
        from .worker import WorkerThread

        self.worker_thread = WorkerThread()
        worker = self.worker_thread.worker
        self.load_requested.connect(worker.load)
        self.import_requested.connect(worker.import_model)
        self.save_requested.connect(worker.save)
        worker.import_needed.connect(self._ask_import)
        self.run_requested.connect(worker.run)
        self.device_requested.connect(worker.set_device)
        self.weights_requested.connect(worker.set_weights)
        worker.loaded.connect(self._on_loaded)
        worker.load_failed.connect(self._on_load_failed)
        worker.load_progress.connect(self._on_load_progress)
        worker.device_changed.connect(self._on_device_changed)
        worker.weights_changed.connect(self._on_weights_changed)
        worker.steps.connect(self._on_steps)
        worker.finished.connect(self._on_finished)
        worker.original.connect(self._on_original)
        worker.failed.connect(self._on_failed)
        worker.notice.connect(self._on_notice)
        self.partner_requested.connect(worker.load_partner)
        self.partner_dropped.connect(worker.drop_partner)
        worker.partner_loaded.connect(self._on_partner_loaded)
        worker.partner_failed.connect(self._on_partner_failed)
        worker.partner_finished.connect(self._on_partner_finished)

    # --- settings -----------------------------------------------------------------------------------
    def _restore_settings(self) -> None:
        from .views.controls import WEIGHTS
        from .views.style import COLORMAPS

        state = self.stored.blob("window/state")
        if state is not None:
            self.restoreState(state)
        self.selector.set_colormap_name(self.stored.choice("view/colormap", "viridis", COLORMAPS))
        self.selector.set_masks_visible(self.stored.boolean("view/masks", True))
        self.selector.reveal_rows.setChecked(self.stored.boolean("view/reveal_rows", False))
        self.model_panel.set_weights_name(self.stored.choice("model/weights", WEIGHTS[0], WEIGHTS))
        self.weights_requested.emit(NO_REQUEST, self.model_panel.weights_name())  # before the first open
        if self.stored.problems:
            self.statusBar().showMessage("Settings ignored: " + "; ".join(self.stored.problems), 15000)
        self._update_recent_menu()

    def _save_settings(self) -> None:
        self.settings.setValue("window/geometry", self.saveGeometry())
        self.settings.setValue("window/state", self.saveState())
        self.settings.setValue("view/colormap", self.selector.colormap_name())
        self.settings.setValue("view/masks", self.selector.masks_visible())
        self.settings.setValue("view/reveal_rows", self.selector.reveal_rows.isChecked())
        if self.session.model is not None:  # the open model's input, restored when it is opened next
            run = self.input_bar.run_settings()
            self.settings.setValue("run/model", str(self.session.model.path))
            for key in ("text", "mode", "beam", "target"):
                self.settings.setValue(f"run/{key}", getattr(run, key))
            self.settings.remove("run/max_len")  # each model's limit is its own
        self.settings.sync()

    def recent_files(self) -> list[str]:
        return self.stored.strings("files/recent")

    def _remember(self, path: str) -> None:
        recent = [path] + [item for item in self.recent_files() if item != path]
        self.settings.setValue("files/recent", recent[:MAX_RECENT])
        self._update_recent_menu()

    def _update_recent_menu(self) -> None:
        self.recent_menu.clear()
        for path in self.recent_files():
            self._action(self.recent_menu, path, lambda _=False, p=path: self.open_path(p))
        self.recent_menu.setEnabled(bool(self.recent_files()))

    # --- opening and running ------------------------------------------------------------------------
    def open_dialog(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Open a checkpoint", "", CHECKPOINT_FILTER)
        if path:
            self.open_path(path)

    def open_folder_dialog(self) -> None:
        path = QFileDialog.getExistingDirectory(self, "Open a checkpoint folder")
        if path:
            self.open_path(path)

    def save_model_as(self, path: str | None = None) -> None:
        if self.session.model is None:
            return
        path = path or self._ask_path("Save model as", Path(self.session.model.path).stem + ".safetensors",
                                      "attnviz checkpoint (*.safetensors)")
        if path:
            self.save_requested.emit(path)

    def _ask_import(self, job_id: int, question) -> None:
        """A foreign checkpoint needs answers: one dialog, then the worker converts it."""
        if not self.session.is_current_model_job(job_id):
            return
        self.ask_again = None  # the open now waits for the import dialog's answers
        self.input_bar.set_busy(False)
        self.statusBar().showMessage(f"{Path(question.path).name} needs a few answers before it can open")
        from .views.import_dialog import ImportDialog

        self.import_dialog = ImportDialog(question, self)
        self.import_dialog.accepted.connect(self._on_import_answered)
        self.import_dialog.rejected.connect(self._show_kept_model)
        self.import_dialog.open()  # window-modal without blocking the event loop

    def _on_import_answered(self) -> None:
        self._import(self.import_dialog.answer(self.model_panel.device_name()))

    def _import(self, answer) -> None:
        self.input_bar.set_busy(True)
        self.ask_again = lambda: self._import(answer)
        self.import_requested.emit(self._new_model_job(), answer)

    def _new_model_job(self, because: str = "") -> int:
        """An id for an open, import or device move; the worker skips any older one still queued, and a corpus
        job it overtakes stops, saying ``because`` (default: another model was opened)."""
        job_id = self.session.new_model_job()
        self.worker_thread.worker.jobs.post("model", job_id, because=because)
        return job_id

    def open_path(self, path: str) -> None:
        if Path(path).suffix == SESSION_SUFFIX:
            self.open_session(path)
            return
        self.statusBar().showMessage(f"Opening {path}…")
        self.opening_name = Path(path).name
        self.ask_again = lambda: self.open_path(path)
        self.input_bar.set_busy(True)
        self._show_opening(Path(path))
        self.load_requested.emit(self._new_model_job(), str(path), self.model_panel.device_name())

    def _show_opening(self, path: Path) -> None:
        """Nothing of the open model stays on screen while another one loads (its steps, its next tokens,
        its beam, its demo marked in the Demos list and menu)."""
        self.clear_views(f"Opening {path.name}…")
        self.decoding.clear()
        self.input_bar.show_message(f"Opening {path.name}…")
        self.model_panel.show_note(f"Opening {path.name}…")
        self._show_open_demo(path)

    def _show_open_demo(self, path: Path | None) -> None:
        demo = Path(path).resolve() if path is not None and demo_name(path) is not None else None
        for demo_path, action in self.demo_actions.items():
            action.setChecked(demo_path.resolve() == demo)
        self.model_panel.show_open_demo(next((p for p in self.demo_actions if p.resolve() == demo), None))

    def _show_kept_model(self) -> None:
        """Another model did not open: the one still open is shown again, as it was."""
        model = self.session.model
        self._show_open_demo(model.path if model is not None else None)
        if model is None:
            self.model_panel.show_note("No model open.")
            self.clear_views("Open a model: File → Open (Ctrl+O), or a demo.")
        else:
            self.model_panel.show_model(model)
            self.clear_views(NOTHING_RUN)
            self._show_run()

    def run(self) -> None:
        settings = self.input_bar.run_settings()
        if self.session.model is None:
            return
        if not settings.text.strip():
            self.input_bar.show_message("Type a sentence to see its attention.")
            return
        if settings.mode == Mode.FORCED and not settings.target.strip():
            self.input_bar.ask_for_target()
            return
        request = self.session.new_request(settings)
        self.worker_thread.worker.jobs.post("run", request.id)  # the running decode stops at its next step
        self.input_bar.set_busy(True)
        self.run_requested.emit(request)

    # --- a snapshot series (models/storage/snapshots.py) --------------------------------------------------------
    def choose_snapshot(self, index: int) -> None:
        """Run the same sentence and settings on the series' ``index``-th snapshot (the newest request wins)."""
        if self.session.choose_snapshot(index):
            self._show_snapshot_bar()
            self.run()

    def step_snapshot(self, delta: int) -> None:
        if self.session.model is not None and self.session.model.snapshots:
            self.choose_snapshot(self.session.snapshot_index() + delta)

    def _show_snapshot_bar(self) -> None:
        steps = self.session.model.snapshots if self.session.model is not None else ()
        self.snapshot_bar.show_state(viewmodel.snapshot_bar(steps, self.session.snapshot_step))

    # --- switching heads off (models/nn/ablation.py) -------------------------------------------------------
    def toggle_head(self, layer: int, head: int) -> None:
        """Switch a head of the selected kind off or on, and run again."""
        if self.session.trace is None:
            return
        self.session.toggle_head(self.session.selection.kind, layer, head)
        self._show_ablation()
        self.run()

    def toggle_layer(self, layer: int) -> None:
        """Switch every head of a layer of the selected kind off (or on again), and run again."""
        if self.session.trace is None:
            return
        self.session.toggle_layer(self.session.selection.kind, layer)
        self._show_ablation()
        self.run()

    def restore_heads(self) -> None:
        self.session.restore_heads()
        self._show_ablation()
        self.run()

    def show_original(self, on: bool) -> None:
        """Show the same input's run with every head on in every view (or this run's again)."""
        self.session.show_original = on
        self.session.clamp()
        self.refresh(rebuild=True)

    def _show_ablation(self) -> None:
        self.ablation_bar.show_state(viewmodel.ablation_state(self.session.ablation, self.session.trace),
                                     self.session.show_original)

    def _on_original(self, request_id: int, result) -> None:
        if self.session.accept_original(request_id, result):
            self._show_output()

    def corpus_head_stats(self, corpus: str | list[tuple[str, str]] | None = None) -> None:
        """Run a corpus (a PAIRS.tsv path, or the pairs; asked for when None) on the worker; the Head statistics
        dock shows every head's statistics."""
        if self.session.model is None:
            return
        from .features.head_stats import choose_corpus

        corpus = corpus or choose_corpus(self, "Corpus head statistics", checkpoint=self.session.model.path)
        if not corpus:
            return
        if getattr(self, "head_stats", None) is None:  # made on first use: most sessions never need it
            from .features.head_stats import HeadStatsPanel

            self.head_stats = HeadStatsPanel(self.worker_thread.worker, self)
            self.head_stats.view.sentence_chosen.connect(lambda text: (self.input_bar.set_text(text), self.run()))
            self.head_stats.dock = self._dock("Head statistics", self.head_stats.view,
                                              Qt.DockWidgetArea.RightDockWidgetArea, scrolls=True)
        self._show_dock(self.head_stats.dock)
        self.head_stats.start(self.session.next_id(), corpus)

    def head_importance(self, corpus: str | list[tuple[str, str]] | None = None) -> None:
        """Score a corpus (a PAIRS.tsv path, or the pairs; asked for when None) on the worker with each head
        switched off alone; the Head importance dock shows the drops as a layers × heads heatmap per kind."""
        if self.session.model is None:
            return
        from .features.head_stats import choose_corpus

        corpus = corpus or choose_corpus(self, "Head importance", checkpoint=self.session.model.path)
        if not corpus:
            return
        if getattr(self, "importance_panel", None) is None:  # made on first use
            from .features.importance import ImportancePanel

            self.importance_panel = ImportancePanel(self.worker_thread.worker, self, next_id=self.session.next_id)
            self.importance_panel.head_chosen.connect(lambda kind, layer, head: self.select(kind=kind, layer=layer, head=head))
            self.importance_panel.dock = self._dock("Head importance", self.importance_panel.view,
                                                    Qt.DockWidgetArea.RightDockWidgetArea, scrolls=True)
        self._show_dock(self.importance_panel.dock)
        self.importance_panel.start(self.session.next_id(), corpus)

    # --- comparing with a second model (model B) -------------------------------------------------------
    def compare_dialog(self) -> None:
        if self.session.model is None:
            return
        path, _ = QFileDialog.getOpenFileName(self, "Compare with a checkpoint", "", CHECKPOINT_FILTER)
        if path:
            self.compare_with(path)

    def open_pair(self, a: Path, b: Path) -> None:
        """Open ``a`` as model A, then ``b`` as model B to compare with it (the Demos menu's pairs)."""
        self.pending_pair = (Path(a), Path(b))
        self.open_path(str(a))

    def compare_with(self, path: str) -> None:
        """Open ``path`` as model B on the worker; once it is there, the sentence runs on both."""
        if self.session.model is None:
            self.show_error("Open a model first, then compare another one with it.")
            return
        job_id = self.session.new_partner_job()
        self.worker_thread.worker.jobs.post("partner", job_id)
        self.statusBar().showMessage(f"Opening {path} to compare…")
        self.partner_requested.emit(job_id, str(path), self.model_panel.device_name())

    def stop_comparing(self) -> None:
        self.session.stop_comparing()
        self.worker_thread.worker.jobs.post("partner", self.session.partner_job)
        self.partner_dropped.emit(self.session.partner_job)
        self._show_comparing()
        self._show_output()
        self.refresh(rebuild=True)

    def _on_partner_loaded(self, job_id: int, info: ModelInfo) -> None:
        if not self.session.accept_partner(job_id, info):
            return
        self.statusBar().showMessage(f"Comparing with {info.path}", 5000)
        self._show_comparing()
        self.run()

    def _on_partner_failed(self, job_id: int, message: str) -> None:
        if job_id != self.session.partner_job:
            return
        self.pending_partner = None
        self.statusBar().clearMessage()
        kept = f" — still showing {self.session.model.path.name}" if self.session.model else ""
        self.show_error(f"Cannot compare with it: {message}{kept}")

    def _on_partner_finished(self, request_id: int, result) -> None:
        if self.session.accept_partner_result(request_id, result):
            self._show_output()

    def _show_comparing(self) -> None:
        comparing = self.session.comparing
        model, partner = self.session.model, self.session.partner
        self.compare_bar.show_text(f"Comparing model A ({model.path.stem}) with model B ({partner.path.stem}): "
                                   "one selection drives both" if comparing and model is not None else None)
        self.stop_compare_action.setEnabled(comparing)
        self.focus.setVisible(not comparing)
        self.compare_view.setVisible(comparing)
        self.grids.setVisible(not comparing)  # three maps need the width; the grids return with one model

    def _on_load_progress(self, job_id: int, done: int, total: int) -> None:
        """How much of a model's weights is read, while it opens (a large model takes seconds)."""
        if self.session.is_current_model_job(job_id) and total:
            self.statusBar().showMessage(viewmodel.loading_text(self.opening_name, done, total))

    def _on_loaded(self, job_id: int, info: ModelInfo) -> None:
        if not self.session.is_current_model_job(job_id):
            return
        self.ask_again = None
        self.session.keep_run_settings(self.input_bar.run_settings())
        self.session.accept_model(job_id, info)
        self._show_ablation()
        self.clear_views(NOTHING_RUN)
        self.decoding.clear()
        self._show_open_demo(info.path)
        self._remember(str(info.path))
        self.input_bar.set_busy(False)
        self.model_panel.show_model(info)
        self.setWindowTitle(window_title(info.path))
        self.statusBar().showMessage(f"Opened {info.path} on {info.device}", 5000)
        examples = demo_examples(info.path)
        self.input_bar.set_examples(examples)
        self.input_bar.set_languages(info.languages)
        pending = self.pending_session
        if pending is not None and Path(pending.checkpoint).resolve() != Path(info.path).resolve():
            self.pending_session = pending = None  # another model was opened meanwhile
        self.pending_session_opened = pending is not None  # its selection applies to runs of this model only
        run = pending.run if pending is not None else self._run_settings_for(info, examples)
        self.input_bar.show_run_settings(run, info.max_len)
        if pending is not None:  # the heads the session had switched off, the snapshot it showed
            self.session.ablation = pending.ablation
            self._show_ablation()
            if pending.snapshot_step is not None:
                self.session.choose_snapshot_step(pending.snapshot_step)
        self._show_snapshot_bar()
        partner, self.pending_partner = self.pending_partner, None
        if partner is not None and pending is not None and partner.compare is not None:
            self.compare_with(str(partner.compare))  # the run follows once model B is there
        pair, self.pending_pair = self.pending_pair, None
        if pair is not None and pair[0].resolve() == Path(info.path).resolve():
            self.compare_with(str(pair[1]))  # the run follows once model B is there
        self.run()
        if partner is not None and pending is not None and partner.compare_problem:
            self.session.accept_notice(NO_REQUEST, partner.compare_problem)  # shown with this run's output

    def _run_settings_for(self, info: ModelInfo, examples: list[str]) -> RunSettings:
        """The model's own input: as left this session, as saved at the last exit for the same model, or
        its first example at its own length limit."""
        settings = self.session.run_settings_for(info, next(iter(examples), ""))

        stored = self.stored
        if str(info.path) in self.session.run_settings or stored.text("run/model") != str(info.path):
            return settings
        return dataclasses.replace(settings, text=stored.text("run/text", settings.text),
                                   mode=stored.choice("run/mode", settings.mode, MODE_NAMES),
                                   beam=stored.integer("run/beam", settings.beam, minimum=MIN_BEAM_SEARCH,
                                                       maximum=MAX_BEAM),
                                   target=stored.text("run/target", ""), max_len=info.max_len)

    def _on_load_failed(self, job_id: int, message: str) -> None:
        if not self.session.is_current_model_job(job_id):
            return
        self.pending_session, self.ask_again = None, None
        self.input_bar.set_busy(False)
        self.statusBar().clearMessage()
        self._show_kept_model()
        kept = f" — still showing {self.session.model.path.name}" if self.session.model else ""
        self.show_error(f"Cannot open it: {message}{kept}")

    def show_error(self, message: str) -> None:
        self.input_bar.show_error(message)

    def _on_device(self, device: str) -> None:
        moved = f"the model moved to {device or 'the best device'}"
        self.device_requested.emit(self._new_model_job(moved), device)
        self.run()  # queued after the move, so it runs on the new device

    def _on_weights(self, weights: str) -> None:
        """Remember the precision and re-open what is open (or being opened) in it; the sentence runs again."""
        self.settings.setValue("model/weights", weights)
        ask_again, model = self.ask_again, self.session.model
        if ask_again is None and (model is None or model.weights == weights):
            self.weights_requested.emit(NO_REQUEST, weights)  # nothing to read again: models open in it from now on
            return
        self.weights_requested.emit(self._new_model_job(f"the model's weights became {weights}"), weights)
        if ask_again is not None:  # the open under way is now stale: asked again, in the new precision
            ask_again()
        else:
            self.run()  # queued after the re-open, so it runs in the new precision

    def _on_weights_changed(self, job_id: int, info: ModelInfo) -> None:
        if not self.session.accept_device(job_id, info):
            return
        self.model_panel.show_model(info)
        self.statusBar().showMessage(f"The model's weights are now {info.weights}", 5000)

    def _on_device_changed(self, job_id: int, info: ModelInfo) -> None:
        if not self.session.accept_device(job_id, info):
            return
        self.model_panel.show_model(info)
        self.statusBar().showMessage(f"The model now runs on {info.device}", 5000)

    def _on_steps(self, request_id: int, steps: list) -> None:
        if self.session.accept_steps(request_id, steps):
            last = steps[-1]
            self.statusBar().showMessage(f"decoding… step {last.step + 1}: {' '.join(last.tokens[:1])}")

    def _on_finished(self, request_id: int, results) -> None:
        if not self.session.accept_results(request_id, results):
            return
        self.input_bar.set_busy(False)
        self.statusBar().clearMessage()
        if self.pending_session is not None and self.pending_session_opened:  # a reopened session's selection
            selection, self.pending_session = self.pending_session.selection, None
            self.session.replace_selection(**dataclasses.asdict(selection))
        self._show_ablation()  # a whole layer's entry is counted in heads once the model's shape is known
        self._show_output()
        self._show_run()

    def _show_run(self) -> None:
        """Every view of the newest run (the beam's tree too)."""
        if not self.session.results:
            return
        beam = self.session.request.settings.mode == Mode.BEAM
        self.decoding.show_beam(viewmodel.beam_state(self.session.results, self.session.steps) if beam else None,
                                self.session.selection.hypothesis)
        self.refresh(rebuild=True)

    def _on_failed(self, request_id: int, message: str) -> None:
        if self.session.is_current(request_id):
            self.input_bar.set_busy(False)
            self.show_error(message)

    def _on_notice(self, request_id: int, message: str) -> None:
        if not self.session.accept_notice(request_id, message):
            return
        self.statusBar().showMessage(message, 8000)
        self._show_output()

    def _show_output(self) -> None:
        result = self.session.run_result
        if result is not None:
            run = self.session.request.settings
            limit = run.max_len if run.mode != Mode.FORCED else None
            eos_id = self.session.model.config.get("eos_id") if self.session.model else None
            partner = None
            if self.session.comparing:
                partner = viewmodel.partner_line(self.session.partner_result or self.session.partner_error or None,
                                                 self.session.partner.path.stem)
            self.input_bar.show_result(viewmodel.result_line(result, self.session.notices, limit=limit, eos_id=eos_id,
                                                             original=self.session.original, partner=partner))
        elif self.session.notices:
            self.input_bar.show_message(self.session.notices[-1])

    def _on_hypothesis(self, index: int) -> None:
        self.session.selection.hypothesis = index
        self.session.clamp()
        self._show_output()
        self.refresh(rebuild=True)

    # --- what the views show (computed by attnviz/state/viewmodel.py) -------------------------------------
    def _on_selector_changed(self) -> None:
        chosen = self.selector.selection()
        if chosen["kind"] is not None:
            self.select(**chosen)

    def select(self, **changes) -> None:
        """Change the selection and update only the views it affects."""
        before = self.session.selection
        after = self.session.replace_selection(**changes)
        self.refresh(rebuild=after.kind != before.kind, layer_changed=after.layer != before.layer)

    def step_selection(self, field: str, delta: int) -> None:
        change = self.session.stepped_selection(field, delta)
        if change is not None:
            self.select(**change)

    def _on_options_changed(self) -> None:
        self.session.options = self.selector.view_options()
        current = self.current_heatmap()
        if current is not None:
            self.focus.show_heatmap(current)
        if self.session.comparing and current is not None:
            self.compare_view.show_compare(self.current_comparison())

    def current_heatmap(self) -> viewmodel.HeatmapState | None:
        trace, result = self.session.trace, self.session.result
        if trace is None:
            return None
        return viewmodel.heatmap(trace, self.session.selection, self.session.options, outputs=result.tokens)

    def current_comparison(self) -> viewmodel.CompareState | None:
        """Model A and B at the current selection, or what B lacks (its run failed, or is under way)."""
        trace, partner = self.session.trace, self.session.partner_result
        if trace is None or not self.session.comparing:
            return None
        if partner is None:
            waiting = viewmodel.ComparePane(None, self.session.partner_error or "model B is running…")
            return viewmodel.CompareState(a=viewmodel.compare_pane(trace, self.session.selection, name="A",
                                                                   options=self.session.options),
                                          b=waiting, diff=viewmodel.ComparePane(None, ""))
        return viewmodel.compare_state(trace, partner.trace, selection=self.session.selection,
                                       options=self.session.options)

    def refresh(self, rebuild: bool = False, layer_changed: bool = True) -> None:
        trace, selection, result = self.session.trace, self.session.selection, self.session.result
        if trace is None:
            return
        if not trace.kinds:
            self.clear_views("This model has no attention (a GRU decoder without attention): only its outputs are shown.")
        else:
            self.selector.show_state(viewmodel.selector_state(trace, selection))
            if self.session.comparing:
                self.compare_view.show_compare(self.current_comparison())
            else:
                self.focus.show_heatmap(self.current_heatmap())
            # Revealing rows step by step, a step changes what the thumbnails may show too.
            reveal_step = selection.step if self.session.options.reveal_rows else None
            images = rebuild or layer_changed or reveal_step is not None
            self.head_grid.show_grid(viewmodel.head_grid(trace, selection, images=images, reveal_step=reveal_step),
                                     images=images)
            everything = rebuild or reveal_step is not None
            self.model_view.show_grid(viewmodel.model_grid(trace, selection, images=everything,
                                                           reveal_step=reveal_step), images=everything)
        self.decoding.show_state(viewmodel.step_state(result, trace, selection))

    def clear_views(self, message: str) -> None:
        self.focus.clear(message)
        self.compare_view.clear(message)
        for grid in (self.head_grid, self.model_view):
            grid.build(0, 0, row_names=[], col_names=[])
        self.selector.setEnabled(False)

    def set_colormap(self, name: str) -> None:
        for view in (self.focus, self.head_grid, self.model_view, self.compare_view):
            view.set_colormap(name)

    # --- sessions and presenting (attnviz/state/session_file.py) -------------------------------------------
    def open_session_dialog(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Open a session", self.stored.text("files/session_folder", ""),
                                              SESSION_FILTER)
        if path:
            self.open_session(path)

    def open_session(self, path: str) -> None:
        """Reopen a saved view: its model is opened (its input bar filled from the session), the sentence
        runs, and the saved head, step and hypothesis are selected when the run arrives. A bad file or a
        moved checkpoint is one line in the window; the open model stays."""
        from ..state.session_file import SessionFileError, read_session
        from .views.style import COLORMAPS

        try:
            saved = read_session(path, COLORMAPS)
        except SessionFileError as problem:
            kept = f" — still showing {self.session.model.path.name}" if self.session.model else ""
            self.show_error(f"Cannot open the session: {problem}{kept}")
            return
        self.settings.setValue("files/session_folder", str(Path(path).resolve().parent))
        self.selector.set_colormap_name(saved.look.colormap)
        self.selector.set_masks_visible(saved.look.masks)
        self.selector.set_view_options(saved.look.options)
        self.session.options = saved.look.options
        self.session.keep_run_settings(self.input_bar.run_settings())
        self.session.run_settings.pop(str(saved.checkpoint), None)  # the session's input, not the last one
        self.pending_session, self.pending_session_opened = saved, False
        self.pending_partner = saved
        if saved.compare is None and self.session.comparing:
            self.stop_comparing()
        self.open_path(str(saved.checkpoint))
        if saved.ignored:
            self.statusBar().showMessage(f"Session from a newer attnviz: ignored {', '.join(saved.ignored)}", 10000)

    def save_session(self, path: str | None = None) -> None:
        from ..state.session_file import Look, SessionFileError, save_session
        from models.storage.files import WriteError

        if self.session.model is None:
            return
        path = path or self._ask_path("Save session", Path(self.session.model.path).stem + SESSION_SUFFIX, SESSION_FILTER)
        if not path:
            return
        look = Look(colormap=self.selector.colormap_name(), masks=self.selector.masks_visible(),
                    options=self.selector.view_options())
        try:
            written = save_session(path, checkpoint=self.session.model.path, run=self.input_bar.run_settings(),
                                   selection=self.session.selection, look=look, ablation=self.session.ablation,
                                   snapshot_step=self.session.snapshot_step,
                                   compare=self.session.partner.path if self.session.comparing else None)
        except (SessionFileError, WriteError, OSError) as failure:
            self.show_error(f"Saving the session failed: {failure}")
            return
        self.statusBar().showMessage(f"Saved the session as {written}", 5000)

    def toggle_presentation(self) -> None:
        self.set_presenting(self.presentation is None)

    def set_presenting(self, on: bool) -> None:
        """Presentation mode: full screen, every font larger, the model panel, grids and corpus panels hidden, the
        decoding steps beside the heatmap; the arrow keys walk the decoding steps (← →) and the layers (↑ ↓),
        Esc or F11 ends it."""
        from PySide6.QtWidgets import QApplication

        app = QApplication.instance()
        if on == (self.presentation is not None):
            return
        if on:
            self.presentation = {"state": self.saveState(), "font": app.font(), "maximized": self.isMaximized(),
                                 "full_screen": self.isFullScreen()}
            font = app.font()
            font.setPointSizeF(font.pointSizeF() * PRESENTATION_FONT_SCALE)
            app.setFont(font)
            self.focus.set_tick_font(app.font())
            # The Decoding dock stays: its steps and next-token chart are what a class follows step by step.
            for dock in (self.model_dock, *self.panel_docks):
                dock.hide()
            self.grids.hide()
            # Beside the heatmap, where the grids were: under it, the dock would take the heatmap's height.
            self.addDockWidget(Qt.DockWidgetArea.RightDockWidgetArea, self.decoding_dock)
            self.showFullScreen()
            self.resizeDocks([self.decoding_dock], [self.width() * 2 // 5], Qt.Orientation.Horizontal)
            self.focus.setFocus()
            self.statusBar().showMessage("Presenting: ← → steps, ↑ ↓ layers, Esc ends", 8000)
        else:
            saved, self.presentation = self.presentation, None
            app.setFont(saved["font"])
            self.focus.set_tick_font(None)
            self.grids.setVisible(not self.session.comparing)  # the comparison keeps the grids aside
            self.restoreState(saved["state"])
            if not saved["full_screen"]:
                self.showMaximized() if saved["maximized"] else self.showNormal()
        for action in self.presentation_keys:
            action.setEnabled(on)
        self.present_action.setChecked(on)
        self.refresh(rebuild=True)

    def _presentation_keys(self) -> list[QAction]:
        """Bare arrow keys and Esc act only while presenting (elsewhere they belong to the widgets)."""
        keys = []
        for key, slot in (("Right", lambda: self.step_selection("step", 1)), ("Left", lambda: self.step_selection("step", -1)),
                          ("Down", lambda: self.step_selection("layer", 1)), ("Up", lambda: self.step_selection("layer", -1)),
                          ("Escape", lambda: self.set_presenting(False))):
            action = QAction(self)
            action.setShortcut(QKeySequence(key))
            action.setShortcutContext(Qt.ShortcutContext.WindowShortcut)
            action.triggered.connect(slot)
            action.setEnabled(False)
            self.addAction(action)
            keys.append(action)
        return keys

    # --- export ---------------------------------------------------------------------------------------
    def _ask_path(self, title: str, default_name: str, file_filter: str) -> str:
        folder = self.stored.text("files/export_folder", str(Path.home()))
        path, _ = QFileDialog.getSaveFileName(self, title, str(Path(folder) / default_name), file_filter)
        if path:
            self.settings.setValue("files/export_folder", str(Path(path).parent))
        return path

    def _export(self, write: Callable[[], str]) -> None:
        """Every export ends here: ``write`` writes its files and says what it saved, or fails with the writers'
        one line (attnviz/state/export.py), shown under the input."""
        try:
            saved = write()
        except AttnvizError as failure:
            self.show_error(f"Export failed: {failure}")
            return
        self.statusBar().showMessage(saved, 5000)

    def _export_name(self) -> str:
        selection = self.session.selection
        return viewmodel.export_name(selection.kind, selection.layer, selection.head)

    def _caption(self) -> Caption:
        """The input, and each shown model's name and output, for a figure's caption."""
        session = self.session
        outputs = [(session.model.path.stem, session.result.text)]
        if session.comparing:
            partner = session.partner_result
            waiting = session.partner_error or "model B is running…"
            outputs.append((session.partner.path.stem, partner.text if partner is not None else waiting))
        return Caption(session.request.settings.text if session.request is not None else "", tuple(outputs))

    def current_figure(self) -> str | None:
        """The focus heatmap as a slide-ready figure (while comparing, A | B | B − A), or None before a run."""
        from .views.style import lookup_table

        heatmap = self.current_heatmap()
        if heatmap is None:
            return None
        shown = self.current_comparison() if self.session.comparing else heatmap
        if not self.selector.masks_visible():
            shown = without_masks(shown)
        if not self.session.comparing:
            return heatmap_svg(shown, self.focus.lut(), caption=self._caption())
        names = (self.session.model.path.stem, self.session.partner.path.stem)
        luts = (self.focus.lut(), lookup_table(viewmodel.DIVERGING_COLORMAP))
        return compare_svg(shown, names, luts=luts, caption=self._caption())

    def export_focus_image(self, path: str | None = None) -> None:
        """The focus heatmap; while comparing, the three maps (A | B | B − A). PNG and SVG are one figure."""
        path = path or self._ask_path("Export heatmap", self._export_name() + ".png", "PNG (*.png);;SVG (*.svg)")
        if not path:
            return
        figure = self.current_figure()
        if figure is None:
            self.show_error("Export failed: nothing to export yet; run a sentence first")
            return
        self._export(lambda: f"Saved {save_figure(figure, path)}")

    def copy_focus_image(self) -> None:
        """The exported figure (PNG, 2×) to the clipboard, for pasting into slides."""
        from PySide6.QtWidgets import QApplication

        figure = self.current_figure()
        if figure is None:
            return
        QApplication.clipboard().setImage(figure_image(figure))
        self.statusBar().showMessage("The heatmap is on the clipboard", 5000)

    def export_grid_image(self, path: str | None = None) -> None:
        name = f"{self.session.selection.kind}-L{self.session.selection.layer}-heads.png"
        path = path or self._ask_path("Export all heads of this layer", name, "PNG (*.png);;SVG (*.svg)")
        trace, selection = self.session.trace, self.session.selection
        if path and trace is not None and selection.kind in trace.attention:
            mask = trace.masks[selection.kind] if self.selector.masks_visible() else None
            figure = heads_svg(viewmodel.head_grid(trace, selection), viewmodel.heads_title(selection.kind, selection.layer),
                               query_labels=trace.query_tokens(selection.kind),
                               key_labels=trace.key_tokens(selection.kind), lut=self.focus.lut(), mask=mask,
                               caption=self._caption())
            self._export(lambda: f"Saved {save_figure(figure, path)}")

    def export_npz(self, path: str | None = None) -> None:
        if self.session.result is None or self.session.trace is None:
            return
        path = path or self._ask_path("Export attention data", "attention.npz", "NumPy archive (*.npz)")
        if not path:
            return
        result, partner = self.session.result, self.session.partner_result if self.session.comparing else None
        if partner is None:
            self._export(lambda: f"Saved {write_npz(path, result)}")
            return
        beside = Path(path).with_name(Path(path).stem + "-B.npz")  # model B's run, in the same layout
        self._export(lambda: f"Saved {write_npz(path, result)} (model A) and {write_npz(beside, partner)} (model B)")

    def export_csv(self, path: str | None = None) -> None:
        current = self.current_heatmap()
        if current is None:
            return
        path = path or self._ask_path("Export this heatmap", current.file_stem + ".csv", "CSV (*.csv)")
        if not path:
            return
        comparison = self.current_comparison() if self.session.comparing else None
        # model A's map as asked; while comparing, B's and B − A beside it, where they exist
        panes = [(current, "")] if comparison is None else [
            (pane.state, suffix) for pane, suffix in ((comparison.a, ""), (comparison.b, "-B"),
                                                      (comparison.diff, "-B-minus-A")) if pane.state is not None]

        def write_panes() -> str:
            written = [write_csv(Path(path).with_name(Path(path).stem + suffix + ".csv") if suffix else path,
                                 state.matrix, query_tokens=state.query_labels, key_tokens=state.key_labels)
                       for state, suffix in panes]
            if comparison is None:
                return f"Saved {written[0]}"
            return f"Saved {', '.join(target.name for target in written)} in {Path(path).parent}"

        self._export(write_panes)

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

    def explain(self) -> None:
        from .views.help import explanation_dialog

        explanation_dialog(self).open()

    def show_shortcuts(self) -> None:
        from .views.help import shortcuts_dialog

        actions = [action for menu in self.menuBar().findChildren(QMenu) for action in menu.actions()]
        shortcuts_dialog(self, [(action.text().replace("&", ""), action.shortcut().toString(QKeySequence.SequenceFormat.NativeText))
                                for action in actions if not action.shortcut().isEmpty()]).open()

    def about(self) -> None:
        QMessageBox.about(self, "About attnviz",
                          f"<h3>attnviz {__version__}</h3><p>See exactly what the attention of a sequence-to-sequence "
                          "model did: every layer, every head, every decoding step, with its masks.</p>"
                          "<p>Offline and native: PyTorch, Qt (PySide6) and pyqtgraph.</p>")

    def resizeEvent(self, event) -> None:  # noqa: N802
        super().resizeEvent(event)
        if self.built and event.size().height() != event.oldSize().height():
            self.input_bar.output_area.updateGeometry()  # its line cap follows the window's height

    def closeEvent(self, event) -> None:  # noqa: N802
        if self.built:  # closed while still loading: nothing to stop or save yet
            self.decoding.stop()
            self.input_bar.stop()
            self._save_settings()
            self.worker_thread.close()
        super().closeEvent(event)

    def shut_down(self) -> None:
        """Stop the model thread if it still runs (the event loop can end without a close event)."""
        if self.built:
            self.worker_thread.close()
