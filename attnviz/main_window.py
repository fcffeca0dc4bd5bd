"""The main window: wires the session, the worker thread and the views; menus, shortcuts, files, settings."""

from __future__ import annotations

import html
from pathlib import Path

import numpy as np
from PySide6.QtCore import QSettings, Qt, QUrl, Signal
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import (QDockWidget, QFileDialog, QMainWindow, QMessageBox, QSplitter, QTabWidget,
                               QVBoxLayout, QWidget)

from models.aggregate import aggregate
from models.errors import AttnvizError

from . import __version__
from .export import save_widget_image, write_csv, write_npz
from .session import AXIS_NAMES, KIND_LABELS, ModelInfo, Session
from .views.controls import InputBar, ModelPanel, SelectorBar
from .views.decoding import DecodingPanel
from .views.heatmap import HeatmapView
from .views.import_dialog import ImportDialog
from .views.thumbnails import ThumbnailGrid
from .worker import WorkerThread

CHECKPOINT_FILTER = "Checkpoints (*.safetensors *.pt *.pth *.bin *.chkpt);;All files (*)"
MAX_RECENT = 8


class MainWindow(QMainWindow):
    load_requested = Signal(str, str)  # path, device → worker
    import_requested = Signal(object)  # ImportAnswer → worker
    save_requested = Signal(str)
    run_requested = Signal(object)  # Request → worker
    device_requested = Signal(str)

    def __init__(self, demos: list[Path], devices: list[str], settings: QSettings | None = None):
        super().__init__()
        self.settings = settings or QSettings()
        self.session = Session()
        self.demos = demos
        self.setWindowTitle("attnviz")
        self.setAcceptDrops(True)
        self._build_views(devices)
        self._build_menus()
        self._start_worker()
        self._restore_settings()

    # --- construction -------------------------------------------------------------------------------
    def _build_views(self, devices: list[str]) -> None:
        self.input_bar = InputBar()
        self.selector = SelectorBar()
        self.selector.setEnabled(False)  # nothing to choose from until a trace exists
        self.focus = HeatmapView()
        self.head_grid = ThumbnailGrid()
        self.model_view = ThumbnailGrid()
        self.decoding = DecodingPanel()
        self.model_panel = ModelPanel(devices, self.demos)
        focus_area = QWidget()
        focus_layout = QVBoxLayout(focus_area)
        focus_layout.setContentsMargins(4, 4, 4, 4)
        focus_layout.addWidget(self.selector)
        focus_layout.addWidget(self.focus, 1)
        self.grids = QTabWidget()
        self.grids.addTab(self.head_grid, "Heads of this layer")
        self.grids.addTab(self.model_view, "All layers × heads")
        splitter = QSplitter(Qt.Orientation.Horizontal)
        splitter.addWidget(focus_area)
        splitter.addWidget(self.grids)
        splitter.setSizes([700, 420])
        central = QWidget()
        layout = QVBoxLayout(central)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.input_bar)
        layout.addWidget(splitter, 1)
        self.setCentralWidget(central)
        self.model_dock = self._dock("Model", self.model_panel, Qt.DockWidgetArea.LeftDockWidgetArea)
        self.decoding_dock = self._dock("Decoding", self.decoding, Qt.DockWidgetArea.BottomDockWidgetArea)
        self.resizeDocks([self.model_dock], [300], Qt.Orientation.Horizontal)
        self.resizeDocks([self.decoding_dock], [280], Qt.Orientation.Vertical)
        self.input_bar.run_requested.connect(self.run)
        self.selector.changed.connect(self._on_selector_changed)
        self.selector.colormap.currentTextChanged.connect(self.set_colormap)
        self.selector.masks.toggled.connect(self.focus.set_masks_visible)
        self.head_grid.clicked.connect(lambda _, head: self.select(head=head))
        self.model_view.clicked.connect(lambda layer, head: self.select(layer=layer, head=head))
        self.decoding.controls.step_changed.connect(lambda step: self.select(step=step))
        self.decoding.beam.hypothesis_chosen.connect(self._on_hypothesis)
        self.model_panel.demo_chosen.connect(self.open_path)
        self.model_panel.device_chosen.connect(self._on_device)
        self.focus.hovered.connect(lambda text: self.statusBar().showMessage(text))

    def _dock(self, title: str, widget: QWidget, area: Qt.DockWidgetArea) -> QDockWidget:
        dock = QDockWidget(title, self)
        dock.setObjectName(f"{title.lower()}Dock")
        dock.setWidget(widget)
        self.addDockWidget(area, dock)
        return dock

    def _action(self, menu, text: str, slot, shortcut=None, tip: str = "") -> QAction:
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
        self._action(file_menu, "&Open…", self.open_dialog, QKeySequence.StandardKey.Open,
                     "Open an attnviz checkpoint, or one trained with other code (converted on opening)")
        self._action(file_menu, "Open &Folder…", self.open_folder_dialog, None,
                     "Open a checkpoint folder (a Hugging Face Marian model, the seq2seq tutorial's files)")
        self._action(file_menu, "Save Model &As…", self.save_model_as, "Ctrl+Shift+S",
                     "Save the open model as an attnviz checkpoint (an imported model keeps your answers)")
        self.recent_menu = file_menu.addMenu("Open &Recent")
        demo_menu = file_menu.addMenu("&Demos")
        for path in self.demos:
            self._action(demo_menu, path.stem, lambda _=False, p=path: self.open_path(str(p)))
        demo_menu.setEnabled(bool(self.demos))
        file_menu.addSeparator()
        export_menu = file_menu.addMenu("&Export")
        self._action(export_menu, "Heatmap as &image…", self.export_focus_image, QKeySequence.StandardKey.Save,
                     "The focus view as PNG (2×) or SVG")
        self._action(export_menu, "All &heads of this layer as image…", self.export_grid_image, None)
        self._action(export_menu, "Attention &data (NPZ)…", self.export_npz, None)
        self._action(export_menu, "This heatmap as &CSV…", self.export_csv, None)
        file_menu.addSeparator()
        self._action(file_menu, "&Quit", self.close, QKeySequence.StandardKey.Quit)
        view_menu = self.menuBar().addMenu("&View")
        self._action(view_menu, "Next layer", lambda: self.step_selection("layer", 1), "Ctrl+Down")
        self._action(view_menu, "Previous layer", lambda: self.step_selection("layer", -1), "Ctrl+Up")
        self._action(view_menu, "Next head", lambda: self.step_selection("head", 1), "Ctrl+Right")
        self._action(view_menu, "Previous head", lambda: self.step_selection("head", -1), "Ctrl+Left")
        self._action(view_menu, "Next step", lambda: self.step_selection("step", 1), "Alt+Right")
        self._action(view_menu, "Previous step", lambda: self.step_selection("step", -1), "Alt+Left")
        self._action(view_menu, "Toggle masks", self.selector.masks.toggle, "Ctrl+M")
        view_menu.addSeparator()
        view_menu.addAction(self.model_dock.toggleViewAction())
        view_menu.addAction(self.decoding_dock.toggleViewAction())
        help_menu = self.menuBar().addMenu("&Help")
        self._action(help_menu, "&About attnviz", self.about)

    def _start_worker(self) -> None:
        self.worker_thread = WorkerThread()
        worker = self.worker_thread.worker
        self.load_requested.connect(worker.load)
        self.import_requested.connect(worker.import_model)
        self.save_requested.connect(worker.save)
        worker.import_needed.connect(self._ask_import)
        self.run_requested.connect(worker.run)
        self.device_requested.connect(worker.set_device)
        worker.loaded.connect(self._on_loaded)
        worker.load_failed.connect(self._on_load_failed)
        worker.device_changed.connect(self._on_device_changed)
        worker.step.connect(self._on_step)
        worker.finished.connect(self._on_finished)
        worker.failed.connect(self._on_failed)
        worker.notice.connect(self._on_notice)

    # --- settings -----------------------------------------------------------------------------------
    def _restore_settings(self) -> None:
        geometry = self.settings.value("window/geometry")
        if geometry is not None:
            self.restoreGeometry(geometry)
        else:
            self.resize(1360, 860)
        state = self.settings.value("window/state")
        if state is not None:
            self.restoreState(state)
        bar = self.input_bar
        bar.mode.setCurrentIndex(max(0, bar.mode.findData(self.settings.value("run/mode", "greedy"))))
        bar.beam.setValue(int(self.settings.value("run/beam", 4)))
        bar.max_len.setValue(int(self.settings.value("run/max_len", 100)))
        self.selector.colormap.setCurrentText(str(self.settings.value("view/colormap", "viridis")))
        self.selector.masks.setChecked(self.settings.value("view/masks", True) in (True, "true"))
        self._update_recent_menu()

    def _save_settings(self) -> None:
        self.settings.setValue("window/geometry", self.saveGeometry())
        self.settings.setValue("window/state", self.saveState())
        options = self.input_bar.options()
        for key in ("mode", "beam", "max_len"):
            self.settings.setValue(f"run/{key}", options[key])
        self.settings.setValue("view/colormap", self.selector.colormap.currentText())
        self.settings.setValue("view/masks", self.selector.masks.isChecked())
        if self.session.model is not None:
            self.settings.setValue("run/text", self.input_bar.text.text())
        self.settings.sync()

    def recent_files(self) -> list[str]:
        value = self.settings.value("files/recent", [])
        return [value] if isinstance(value, str) else list(value or [])

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

    def _ask_import(self, question) -> None:
        """A foreign checkpoint needs answers: one dialog, then the worker converts it."""
        self.input_bar.set_busy(False)
        self.statusBar().showMessage(f"{Path(question.path).name} needs a few answers before it can open")
        self.import_dialog = ImportDialog(question, self)
        self.import_dialog.accepted.connect(self._on_import_answered)
        self.import_dialog.open()  # window-modal without blocking the event loop

    def _on_import_answered(self) -> None:
        device = self.model_panel.device.currentText()
        self.input_bar.set_busy(True)
        self.import_requested.emit(self.import_dialog.answer("" if device == "auto" else device))

    def open_path(self, path: str) -> None:
        self.statusBar().showMessage(f"Opening {path}…")
        self.input_bar.set_busy(True)
        device = self.model_panel.device.currentText()
        self.load_requested.emit(str(path), "" if device == "auto" else device)

    def run(self) -> None:
        text = self.input_bar.text.text()
        if self.session.model is None:
            return
        if not text.strip():
            self.input_bar.output.setText("Type a sentence to see its attention.")
            return
        request = self.session.new_request(text, **self.input_bar.options())
        self.worker_thread.worker.latest_request = request.id  # the running decode stops at its next step
        self.input_bar.set_busy(True)
        self.run_requested.emit(request)

    def _on_loaded(self, info: ModelInfo) -> None:
        self.session.set_model(info)
        self.clear_views("The attention appears here once a sentence has run.")
        self._remember(str(info.path))
        self.input_bar.set_busy(False)
        self.model_panel.show_model(info)
        self.setWindowTitle(f"attnviz — {info.path.name}")
        self.statusBar().showMessage(f"Opened {info.path} on {info.device}", 5000)
        self.input_bar.max_len.setMaximum(info.max_len)
        if not self.input_bar.text.text():
            from .app import demo_example

            self.input_bar.text.setText(str(self.settings.value("run/text", "")) or demo_example(info.path))
        self.run()

    def _on_load_failed(self, message: str) -> None:
        self.input_bar.set_busy(False)
        self.statusBar().clearMessage()
        kept = f" — still showing {self.session.model.path.name}" if self.session.model else ""
        self.show_error(f"Cannot open it: {message}{kept}")

    def show_error(self, message: str) -> None:
        """Errors are said in the window, under the input, never in a blocking dialog."""
        self.input_bar.output.setText(f"<span style='color:#c62828'>{html.escape(message)}</span>")

    def _on_device(self, device: str) -> None:
        self.device_requested.emit("" if device == "auto" else device)
        self.run()  # queued after the move, so it runs on the new device

    def _on_device_changed(self, info: ModelInfo) -> None:
        self.session.model = info
        self.model_panel.show_model(info)
        self.statusBar().showMessage(f"The model now runs on {info.device}", 5000)

    def _on_step(self, request_id: int, step) -> None:
        if self.session.accept_step(request_id, step):
            self.statusBar().showMessage(f"decoding… step {step.step + 1}: {' '.join(step.tokens[:1])}")

    def _on_finished(self, request_id: int, results) -> None:
        if not self.session.accept_results(request_id, results):
            return
        self.input_bar.set_busy(False)
        self.statusBar().clearMessage()
        self._show_output()
        beam = self.session.request.mode == "beam"
        self.decoding.beam.show_results(results if beam else [], self.session.steps)
        self.decoding.beam.setVisible(beam)
        self.refresh(rebuild=True)

    def _on_failed(self, request_id: int, message: str) -> None:
        if self.session.is_current(request_id):
            self.input_bar.set_busy(False)
            self.show_error(message)

    def _on_notice(self, message: str) -> None:
        self.session.notices.append(message)
        self.statusBar().showMessage(message, 8000)
        self._show_output()

    def _show_output(self) -> None:
        result = self.session.result
        if result is None:
            return
        notices = "".join(f"<br><span style='color:#e65100'>⚠ {html.escape(notice)}</span>" for notice in self.session.notices)
        self.input_bar.output.setText(f"<b>{html.escape(result.text) or '(empty)'}</b> &nbsp; score {result.score:.3f} · "
                                      f"log p {result.log_prob:.3f} · {len(result.token_ids)} tokens{notices}")

    def _on_hypothesis(self, index: int) -> None:
        self.session.selection.hypothesis = index
        self.session.clamp()
        self._show_output()
        self.refresh(rebuild=True)

    # --- what the views show ------------------------------------------------------------------------
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
        trace, selection = self.session.trace, self.session.selection
        if trace is None or not trace.kinds:
            return
        if field == "head":
            heads = trace.heads(selection.kind)
            head = selection.head if isinstance(selection.head, int) else -1 if delta > 0 else heads
            self.select(head=(head + delta) % heads)
        else:
            self.select(**{field: getattr(selection, field) + delta})

    def current_matrix(self) -> tuple[np.ndarray, np.ndarray, list[str], list[str], str, tuple[str, str]] | None:
        trace, selection = self.session.trace, self.session.selection
        if trace is None or selection.kind not in trace.attention:
            return None
        kind, layer, head = selection.kind, selection.layer, selection.head
        matrix = trace.attention[kind][layer][head] if isinstance(head, int) else aggregate(trace, kind, layer, head)
        head_name = f"head {head}" if isinstance(head, int) else ("attention rollout" if head == "rollout" else f"{head} of heads")
        title = f"<b>{KIND_LABELS[kind]}</b> · layer {layer} · {head_name}"  # plain words only: no token text
        return matrix, trace.masks[kind], trace.query_tokens(kind), trace.key_tokens(kind), title, AXIS_NAMES[kind]

    def refresh(self, rebuild: bool = False, layer_changed: bool = True) -> None:
        trace, selection = self.session.trace, self.session.selection
        if trace is None:
            return
        if not trace.kinds:
            self.clear_views("This model has no attention (a GRU decoder without attention): only its outputs are shown.")
            self.decoding.controls.set_count(len(trace.tgt_tokens), selection.step)
            self._refresh_step()
            return
        kind = selection.kind
        layers, heads = trace.layers(kind), trace.heads(kind)
        self.selector.setEnabled(True)
        self.selector.configure(trace.kinds)
        self.selector.show_selection(kind, selection.layer, selection.head, layers, heads)
        self.focus.show_matrix(*self.current_matrix())
        if rebuild or layer_changed:
            self.head_grid.build(1, heads, [f"L{selection.layer}"], [f"H{h}" for h in range(heads)])
            self.head_grid.set_images(list(trace.attention[kind][selection.layer]))
        if rebuild:
            self.model_view.build(layers, heads, [f"L{layer}" for layer in range(layers)], [f"H{h}" for h in range(heads)])
            self.model_view.set_images([weights for layer in trace.attention[kind] for weights in layer])
        head = selection.head if isinstance(selection.head, int) else None
        self.head_grid.select(0 if head is not None else None, head)
        self.model_view.select(selection.layer if head is not None else None, head)
        self.decoding.controls.set_count(len(trace.tgt_tokens), selection.step)
        self._refresh_step()

    def clear_views(self, message: str) -> None:
        self.focus.clear(message)
        for grid in (self.head_grid, self.model_view):
            grid.build(0, 0, [], [])
        self.selector.setEnabled(False)

    def _refresh_step(self) -> None:
        result, trace, selection = self.session.result, self.session.trace, self.session.selection
        step_index = selection.step
        self.focus.set_step(step_index if selection.kind in ("dec_self", "cross") else None)
        step = result.steps[step_index] if result is not None and step_index < len(result.steps) else None
        if step is None:
            self.decoding.show_prefix(trace.tgt_tokens, step_index, None, None)
            return
        row = result.rows[step_index]
        self.decoding.show_prefix(trace.tgt_tokens, step_index, step.tokens[row], float(step.probabilities[row]))
        cross = None
        if "cross" in trace.attention:
            layer = min(selection.layer, trace.layers("cross") - 1) if selection.kind == "cross" else trace.layers("cross") - 1
            weights = trace.attention["cross"][layer][:, step_index]
            cross = weights[selection.head] if isinstance(selection.head, int) and selection.kind == "cross" else weights.mean(axis=0)
        self.decoding.show_step(step, row, cross, trace.src_tokens)

    def set_colormap(self, name: str) -> None:
        for view in (self.focus, self.head_grid, self.model_view):
            view.set_colormap(name)

    # --- export ---------------------------------------------------------------------------------------
    def _ask_path(self, title: str, default_name: str, file_filter: str) -> str:
        folder = str(self.settings.value("files/export_folder", str(Path.home())))
        path, _ = QFileDialog.getSaveFileName(self, title, str(Path(folder) / default_name), file_filter)
        if path:
            self.settings.setValue("files/export_folder", str(Path(path).parent))
        return path

    def _export(self, write, *args) -> None:
        try:
            path = write(*args)
        except (AttnvizError, OSError) as failure:
            self.show_error(f"Export failed: {failure}")
            return
        self.statusBar().showMessage(f"Saved {path}", 5000)

    def _export_name(self) -> str:
        selection = self.session.selection
        return f"{selection.kind}-L{selection.layer}-{selection.head if isinstance(selection.head, str) else f'H{selection.head}'}"

    def export_focus_image(self, path: str | None = None) -> None:
        path = path or self._ask_path("Export heatmap", self._export_name() + ".png", "PNG (*.png);;SVG (*.svg)")
        if path:
            self._export(save_widget_image, self.focus, path)

    def export_grid_image(self, path: str | None = None) -> None:
        name = f"{self.session.selection.kind}-L{self.session.selection.layer}-heads.png"
        path = path or self._ask_path("Export all heads of this layer", name, "PNG (*.png);;SVG (*.svg)")
        if path:
            self._export(save_widget_image, self.head_grid, path)

    def export_npz(self, path: str | None = None) -> None:
        if self.session.result is None or self.session.trace is None:
            return
        path = path or self._ask_path("Export attention data", "attention.npz", "NumPy archive (*.npz)")
        if path:
            self._export(write_npz, path, self.session.result)

    def export_csv(self, path: str | None = None) -> None:
        current = self.current_matrix()
        if current is None:
            return
        path = path or self._ask_path("Export this heatmap", self._export_name() + ".csv", "CSV (*.csv)")
        if path:
            matrix, _, queries, keys, _, _ = current
            self._export(write_csv, path, matrix, queries, keys)

    # --- window events --------------------------------------------------------------------------------
    def dragEnterEvent(self, event) -> None:  # noqa: N802 (Qt's name)
        if event.mimeData().hasUrls() and any(url.isLocalFile() for url in event.mimeData().urls()):
            event.acceptProposedAction()

    def dropEvent(self, event) -> None:  # noqa: N802
        paths = [url.toLocalFile() for url in event.mimeData().urls() if isinstance(url, QUrl) and url.isLocalFile()]
        if paths:
            event.acceptProposedAction()
            self.open_path(paths[0])

    def about(self) -> None:
        QMessageBox.about(self, "About attnviz",
                          f"<h3>attnviz {__version__}</h3><p>See exactly what the attention of a sequence-to-sequence "
                          "model did: every layer, every head, every decoding step, with its masks.</p>"
                          "<p>Offline and native: PyTorch, Qt (PySide6) and pyqtgraph.</p>")

    def closeEvent(self, event) -> None:  # noqa: N802
        self.decoding.controls.stop()
        self.input_bar.debounce.stop()
        self._save_settings()
        self.worker_thread.close()
        super().closeEvent(event)
