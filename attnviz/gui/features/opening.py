"""Opening models: the Open dialogs, dropped files, the recent files and the Demos menu, a foreign checkpoint's
import dialog, the device and the weights' precision, and the plan of a multi-step opening (a saved session, a demo
pair: attnviz/state/open_plan.py). Every open, import or device move is a model job; only the newest one's answer
is shown. A session file dropped or chosen here, and a plan's model B, are said by signals (``session_file_chosen``,
``partner_planned``) that the sessions and comparing features follow."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtCore import QObject, Signal
from PySide6.QtWidgets import QFileDialog, QMenu, QWidget

from models.inference.modes import MAX_BEAM, MIN_BEAM_SEARCH, MODE_NAMES

from ...state import viewmodel
from ...state.demos import demo_name, demo_pairs, model_examples
from ...state.open_plan import OpenPlan
from ...state.prompt_view import input_words
from ...state.session import FILLS, NO_REQUEST, ModelInfo, RunSettings, Session
from ...state.session_file import SUFFIX as SESSION_SUFFIX
from ...state.settings import SettingsReader
from ..actions import make_action
from ..dialogs import CHECKPOINT_FILTER, ask_save_path
from ..layout import Views
from .viewing import NOTHING_RUN

if TYPE_CHECKING:
    from ..worker import ModelWorker
    from .ablation import Ablation
    from .contributions import Contributions
    from .viewing import Viewing

MAX_RECENT = 8


def window_title(path: Path) -> str:
    """The model's name once (a demo's own name), then the app's. Qt appends the application's display name
    to a title that does not end with it: "attnviz — model" would read "attnviz — model — attnviz"."""
    return f"{demo_name(path) or Path(path).name} — attnviz"


class Opening(QObject):
    load_requested = Signal(int, str, str)  # job id, path, device → worker
    import_requested = Signal(int, object)  # job id, ImportAnswer → worker
    save_requested = Signal(str)
    device_requested = Signal(int, str)  # job id, device
    weights_requested = Signal(int, str)  # job id (0: the setting only), float32 | bfloat16 | float16
    session_file_chosen = Signal(str)  # a saved session's path: the sessions feature reopens it
    partner_planned = Signal(str)  # the plan's model B, once its model A is open: the comparing feature opens it

    def __init__(self, session: Session, views: Views, worker: ModelWorker, *, viewing: Viewing, ablation: Ablation,
                 contributions: Contributions, parent: QWidget, stored: SettingsReader):
        super().__init__(parent)
        self.session, self.views, self.parent_widget, self.stored = session, views, parent, stored
        self.viewing, self.ablation, self.contributions = viewing, ablation, contributions
        self.opening_name = ""  # the file being opened, for the loading progress
        self.ask_again = None  # asks for the open (or import) under way again: done when the precision changes
        self.plan: OpenPlan | None = None  # a multi-step opening under way
        self.import_dialog = None
        self.demo_actions = {}  # path → its action, checked while that demo is open (or being opened)
        self.recent_menu: QMenu | None = None  # File → Open Recent, once the menus are built
        self._connect(worker)
        views.model_panel.demo_chosen.connect(self.open_path)
        views.model_panel.device_chosen.connect(self._on_device)
        views.model_panel.weights_chosen.connect(self._on_weights)
        viewing.run_arrived.connect(self._on_run_arrived)

    def _connect(self, worker) -> None:
        self.load_requested.connect(worker.load)
        self.import_requested.connect(worker.import_model)
        self.save_requested.connect(worker.save)
        self.device_requested.connect(worker.set_device)
        self.weights_requested.connect(worker.set_weights)
        worker.import_needed.connect(self._ask_import)
        worker.loaded.connect(self._on_loaded)
        worker.load_failed.connect(self._on_load_failed)
        worker.load_progress.connect(self._on_load_progress)
        worker.device_changed.connect(self._on_device_changed)
        worker.weights_changed.connect(self._on_weights_changed)

    # --- the File menu's lists ------------------------------------------------------------------------
    def fill_menus(self, *, recent: QMenu, demos: QMenu, demo_paths: list[Path]) -> None:
        """File → Open Recent (kept up to date from now on) and File → Demos (the demos, then their pairs)."""
        self.recent_menu = recent
        self._fill_demos_menu(demos, demo_paths)

    def _fill_demos_menu(self, menu: QMenu, demos: list[Path]) -> None:
        for path in demos:
            action = make_action(menu, path.stem, lambda _=False, p=path: self.open_path(str(p)))
            action.setCheckable(True)
            menu.addAction(action)
            self.demo_actions[path] = action
        pairs = demo_pairs() if demos else []
        if pairs:
            menu.addSeparator()
        for title, a, b in pairs:
            tip = f"Open {a.stem} as model A and {b.stem} as model B, side by side with B − A"
            menu.addAction(make_action(menu, f"Compare {title}",
                                       lambda _=False, a=a, b=b: self.open_pair(a, b), tip=tip))
        menu.setEnabled(bool(demos))

    def recent_files(self) -> list[str]:
        return self.stored.strings("files/recent")

    def _remember(self, path: str) -> None:
        recent = [path] + [item for item in self.recent_files() if item != path]
        self.stored.store.setValue("files/recent", recent[:MAX_RECENT])
        self.update_recent_menu()

    def update_recent_menu(self) -> None:
        menu = self.recent_menu
        if menu is None:
            return
        menu.clear()
        for path in self.recent_files():
            menu.addAction(make_action(menu, path, lambda _=False, p=path: self.open_path(p)))
        menu.setEnabled(bool(self.recent_files()))

    # --- opening --------------------------------------------------------------------------------------
    def open_dialog(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self.parent_widget, "Open a checkpoint", "", CHECKPOINT_FILTER)
        if path:
            self.open_path(path)

    def open_folder_dialog(self) -> None:
        path = QFileDialog.getExistingDirectory(self.parent_widget, "Open a checkpoint folder")
        if path:
            self.open_path(path)

    def save_model_as(self, path: str | None = None) -> None:
        if self.session.model is None:
            return
        name = Path(self.session.model.path).stem + ".safetensors"
        path = path or ask_save_path(self.parent_widget, self.stored, "Save model as", name=name,
                                     file_filter="attnviz checkpoint (*.safetensors)")
        if path:
            self.save_requested.emit(path)

    def follow(self, plan: OpenPlan) -> None:
        """Open ``plan``'s model A; the plan's next steps follow its events."""
        self.plan = plan
        self.open_path(str(plan.model))

    def open_pair(self, a: Path, b: Path) -> None:
        """Open ``a`` as model A, then ``b`` as model B to compare with it (the Demos menu's pairs)."""
        self.follow(OpenPlan.for_pair(a, b))

    def _on_run_arrived(self) -> None:
        """A run of the open model arrived: the selection (and contrast) a reopened session saved apply, once."""
        saved = self.plan.saved if self.plan is not None else None
        selection = self.plan.run_arrived() if self.plan is not None else None
        self._drop_finished_plan()
        if selection is not None:
            self.session.replace_selection(**dataclasses.asdict(selection))
            self.contributions.restore_contrast(saved.contrast)  # y′ of the contrastive maps, on this run

    def _drop_finished_plan(self) -> None:
        if self.plan is not None and not self.plan.active:
            self.plan = None

    def open_path(self, path: str) -> None:
        if Path(path).suffix == SESSION_SUFFIX:
            self.session_file_chosen.emit(path)
            return
        if self.plan is not None:
            self.plan.another_model_opened(path)
            self._drop_finished_plan()
        self.views.status_bar.showMessage(f"Opening {path}…")
        self.opening_name = Path(path).name
        self.ask_again = lambda: self.open_path(path)
        self.views.input_bar.set_busy(True)
        self._show_opening(Path(path))
        self.load_requested.emit(self._new_model_job(), str(path), self.views.model_panel.device_name())

    def _new_model_job(self, because: str = "") -> int:
        """An id for an open, import or device move; the worker skips any older one still queued, and a corpus
        job it overtakes stops, saying ``because`` (default: another model was opened)."""
        return self.session.new_model_job(because)

    def _show_opening(self, path: Path) -> None:
        """Nothing of the open model stays on screen while another one loads (its steps, its next tokens,
        its beam, its demo marked in the Demos list and menu)."""
        views = self.views
        self.viewing.clear_views(f"Opening {path.name}…")
        views.decoding.clear()
        views.input_bar.show_message(f"Opening {path.name}…")
        views.model_panel.show_note(f"Opening {path.name}…")
        self.show_open_demo(path)

    def show_open_demo(self, path: Path | None) -> None:
        demo = Path(path).resolve() if path is not None and demo_name(path) is not None else None
        for demo_path, action in self.demo_actions.items():
            action.setChecked(demo_path.resolve() == demo)
        self.views.model_panel.show_open_demo(next((p for p in self.demo_actions if p.resolve() == demo), None))

    def _show_kept_model(self) -> None:
        """Another model did not open: the one still open is shown again, as it was."""
        model, views = self.session.model, self.views
        self.show_open_demo(model.path if model is not None else None)
        if model is None:
            views.model_panel.show_note("No model open.")
            self.viewing.clear_views("Open a model: File → Open (Ctrl+O), or a demo.")
        else:
            views.model_panel.show_model(model)
            self.viewing.clear_views(NOTHING_RUN)
            self.viewing.show_run()

    # --- a foreign checkpoint's questions -------------------------------------------------------------
    def _ask_import(self, job_id: int, question) -> None:
        """A foreign checkpoint needs answers: one dialog, then the worker converts it."""
        if not self.session.is_current_model_job(job_id):
            return
        self.ask_again = None  # the open now waits for the import dialog's answers
        self.views.input_bar.set_busy(False)
        self.views.status_bar.showMessage(f"{Path(question.path).name} needs a few answers before it can open")
        from ..views.import_dialog import ImportDialog

        self.import_dialog = ImportDialog(question, self.parent_widget)
        self.import_dialog.accepted.connect(self._on_import_answered)
        self.import_dialog.rejected.connect(self._show_kept_model)
        self.import_dialog.open()  # window-modal without blocking the event loop

    def _on_import_answered(self) -> None:
        self._import(self.import_dialog.answer(self.views.model_panel.device_name()))

    def _import(self, answer) -> None:
        self.views.input_bar.set_busy(True)
        self.ask_again = lambda: self._import(answer)
        self.import_requested.emit(self._new_model_job(), answer)

    # --- the worker's answers -------------------------------------------------------------------------
    def _on_load_progress(self, job_id: int, done: int, total: int) -> None:
        """How much of a model's weights is read, while it opens (a large model takes seconds)."""
        if self.session.is_current_model_job(job_id) and total:
            self.views.status_bar.showMessage(viewmodel.loading_text(self.opening_name, done, total))

    def _on_loaded(self, job_id: int, info: ModelInfo) -> None:
        if not self.session.is_current_model_job(job_id):
            return
        views = self.views
        self.ask_again = None
        self.session.keep_run_settings(views.input_bar.run_settings())
        self.session.accept_model(job_id, info)
        self._show_model(info)
        plan = self.plan if self.plan is not None and self.plan.model_loaded(info.path) else None
        self._drop_finished_plan()
        saved = plan.saved if plan is not None else None
        examples = model_examples(info.path, info.provenance)
        views.input_bar.set_examples(examples)
        views.input_bar.set_languages(info.languages)
        views.input_bar.set_words(input_words(info.prompted))
        views.input_bar.set_chat_available(info.chat)
        run = saved.run if saved is not None else self._run_settings_for(info, examples)
        views.input_bar.show_run_settings(run, info.max_len)
        views.input_bar.set_fill_reason(FILLS if self.session.fills else "")
        show_problem = ""
        if saved is not None:  # the heads the session had switched off, the snapshot and the method it showed
            self.session.ablation = saved.ablation
            show_problem = self.contributions.restore(saved.show, info)
            self.ablation.show_ablation()
            if saved.snapshot_step is not None:
                self.session.choose_snapshot_step(saved.snapshot_step)
        self.viewing.show_snapshot_bar()
        if plan is not None and plan.partner is not None:
            self.partner_planned.emit(str(plan.partner))  # the run follows once model B is there
        self.viewing.run()
        for problem in (saved.compare_problem, show_problem) if saved is not None else ():
            if problem:
                self.session.accept_notice(NO_REQUEST, problem)  # shown with this run's output
        self.contributions.model_changed(job_id, info)

    def _show_model(self, info: ModelInfo) -> None:
        views = self.views
        self.ablation.show_ablation()
        self.viewing.clear_views(NOTHING_RUN)
        views.decoding.clear()
        self.show_open_demo(info.path)
        self._remember(str(info.path))
        views.input_bar.set_busy(False)
        views.model_panel.show_model(info)
        self.parent_widget.window().setWindowTitle(window_title(info.path))
        views.status_bar.showMessage(f"Opened {info.path} on {info.device}", 5000)

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
        if self.plan is not None:
            self.plan.model_failed()
            self._drop_finished_plan()
        self.ask_again = None
        self.views.input_bar.set_busy(False)
        self.views.status_bar.clearMessage()
        self._show_kept_model()
        kept = f" — still showing {self.session.model.path.name}" if self.session.model else ""
        self.views.show_error(f"Cannot open it: {message}{kept}")

    # --- the device and the precision -----------------------------------------------------------------
    def _on_device(self, device: str) -> None:
        moved = f"the model moved to {device or 'the best device'}"
        self.device_requested.emit(self._new_model_job(moved), device)
        self.viewing.run()  # queued after the move, so it runs on the new device

    def _on_weights(self, weights: str) -> None:
        """Remember the precision and re-open what is open (or being opened) in it; the sentence runs again."""
        self.stored.store.setValue("model/weights", weights)
        ask_again, model = self.ask_again, self.session.model
        if ask_again is None and (model is None or model.weights == weights):
            self.weights_requested.emit(NO_REQUEST, weights)  # nothing to read again: models open in it from now on
            return
        self.weights_requested.emit(self._new_model_job(f"the model's weights became {weights}"), weights)
        if ask_again is not None:  # the open under way is now stale: asked again, in the new precision
            ask_again()
        else:
            self.viewing.run()  # queued after the re-open, so it runs in the new precision

    def _on_weights_changed(self, job_id: int, info: ModelInfo) -> None:
        if self.session.accept_device(job_id, info):
            self.views.model_panel.show_model(info)
            self.views.status_bar.showMessage(f"The model's weights are now {info.weights}", 5000)
            self.contributions.model_changed(job_id, info)

    def _on_device_changed(self, job_id: int, info: ModelInfo) -> None:
        if self.session.accept_device(job_id, info):
            self.views.model_panel.show_model(info)
            self.views.status_bar.showMessage(f"The model now runs on {info.device}", 5000)
