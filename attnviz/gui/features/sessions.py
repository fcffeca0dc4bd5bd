"""Session files (attnviz/state/session_file.py): saving the view as a small .attnviz file, and reopening one as a
plan (attnviz/state/open_plan.py): its model, then its model B, then its selection once the first run arrives."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtCore import QObject
from PySide6.QtWidgets import QFileDialog, QWidget

from ...state.open_plan import OpenPlan
from ...state.session import Session
from ...state.session_file import SUFFIX as SESSION_SUFFIX
from ...state.settings import SettingsReader
from ..dialogs import ask_save_path
from ..layout import Views

if TYPE_CHECKING:
    from .comparing import Comparing
    from .contributions import Contributions
    from .opening import Opening

SESSION_FILTER = "attnviz sessions (*.attnviz);;All files (*)"


class Sessions(QObject):
    def __init__(self, session: Session, views: Views, *, opening: Opening, comparing: Comparing,
                 contributions: Contributions, parent: QWidget, stored: SettingsReader):
        super().__init__(parent)
        self.session, self.views, self.parent_widget, self.stored = session, views, parent, stored
        self.opening, self.comparing, self.contributions = opening, comparing, contributions
        opening.session_file_chosen.connect(self.open_session)  # a session file opened as a model (dropped, recent)

    def open_session_dialog(self) -> None:
        folder = self.stored.text("files/session_folder", "")
        path, _ = QFileDialog.getOpenFileName(self.parent_widget, "Open a session", folder, SESSION_FILTER)
        if path:
            self.open_session(path)

    def open_session(self, path: str) -> None:
        """Reopen a saved view: its model is opened (its input bar filled from the session), the sentence
        runs, and the saved head, step and hypothesis are selected when the run arrives. A bad file or a
        moved checkpoint is one line in the window; the open model stays."""
        from ...state.session_file import SessionFileError, read_session
        from ..views.style import COLORMAPS

        views = self.views
        try:
            saved = read_session(path, COLORMAPS)
        except SessionFileError as problem:
            kept = f" — still showing {self.session.model.path.name}" if self.session.model else ""
            views.show_error(f"Cannot open the session: {problem}{kept}")
            return
        self.stored.store.setValue("files/session_folder", str(Path(path).resolve().parent))
        views.selector.set_colormap_name(saved.look.colormap)
        views.selector.set_masks_visible(saved.look.masks)
        views.selector.set_view_options(saved.look.options)
        self.session.options = saved.look.options
        self.session.keep_run_settings(views.input_bar.run_settings())
        self.session.run_settings.pop(str(saved.checkpoint), None)  # the session's input, not the last one
        if saved.compare is None and self.session.comparing:
            self.comparing.stop_comparing()
        self.opening.follow(OpenPlan.for_session(saved))
        if saved.ignored:
            views.status_bar.showMessage(f"Session from a newer attnviz: ignored {', '.join(saved.ignored)}", 10000)

    def save_session(self, path: str | None = None) -> None:
        from models.storage.files import WriteError

        from ...state.session_file import Look, SessionFileError, save_session

        session, views = self.session, self.views
        if session.model is None:
            return
        path = path or ask_save_path(self.parent_widget, self.stored, "Save session",
                                     name=Path(session.model.path).stem + SESSION_SUFFIX, file_filter=SESSION_FILTER)
        if not path:
            return
        look = Look(colormap=views.selector.colormap_name(), masks=views.selector.masks_visible(),
                    options=views.selector.view_options())
        try:
            written = save_session(path, checkpoint=session.model.path, run=views.input_bar.run_settings(),
                                   selection=session.selection, look=look, ablation=session.ablation,
                                   snapshot_step=session.snapshot_step,
                                   compare=session.partner.path if session.comparing else None,
                                   show=self.contributions.method, contrast=self.contributions.saved_contrast())
        except (SessionFileError, WriteError, OSError) as failure:
            views.show_error(f"Saving the session failed: {failure}")
            return
        views.status_bar.showMessage(f"Saved the session as {written}", 5000)
