"""The Patching pane in the window (View → Patching): a dock made on first use, a tab beside the Decoding dock. Its
corrupted box is prefilled with the run's source; the user edits a word and runs it. The worker patches the clean
source into the corrupted one (a ``patching`` job, attnviz/state/patch_view.py: a newer one or a model job overtakes
it) and the pane draws the tables as heatmaps; a click on a head's cell focuses that head in the main view (through
the viewing feature, which it reaches), and the head the main view shows is outlined on its kind's table as on the
grids. "Export…" saves the tables (attnviz/state/export.py's writers): an NPZ of every table, or the shown ones as
CSV files. docs/ARCHITECTURE.md#activation-patching."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtCore import QObject, Qt, Signal
from PySide6.QtWidgets import QDockWidget, QWidget

from models.errors import AttnvizError

from ...state.export import write_arrays, write_csv
from ...state.patch_view import (
    WAITING, PatchAnswer, PatchJob, patch_arrays, patch_csv_tables, patch_panels, selected_cell,
)
from ...state.session import Session
from ...state.settings import SettingsReader
from ..dialogs import ask_save_path
from ..layout import Views

if TYPE_CHECKING:
    from ..views.patching import PatchingView
    from ..worker import ModelWorker
    from .viewing import Viewing


DOCK_SHARE = 0.5  # of the window's height the bottom docks take when the pane is first opened
EXPORT_FILTER = "NumPy archive (*.npz);;CSV, one file per table (*.csv)"


class Patching(QObject):
    requested = Signal(object)  # PatchJob → worker

    def __init__(self, session: Session, views: Views, worker: ModelWorker, *, viewing: Viewing,
                 parent: QWidget, stored: SettingsReader):
        super().__init__(parent)
        self.session, self.views, self.viewing = session, views, viewing
        self.parent_widget, self.stored = parent, stored
        self.report = None  # the newest PatchReport shown
        self.estimate = "exact"
        self.chosen: tuple[str, int, int] | None = None  # the cell clicked last
        self.asked = 0  # the job id whose answer is awaited
        self.source = ""  # the clean source of the shown (or awaited) tables
        self.pane: PatchingView | None = None
        self.dock: QDockWidget | None = None
        self.requested.connect(worker.patching)
        worker.patching_ready.connect(self._on_answer)
        # the main view's head, outlined on its kind's table as on the grids: redrawn once the viewing feature has
        # taken a choice of the selector or a grid (queued: after its own slot, whatever the order of connection)
        queued = Qt.ConnectionType.QueuedConnection
        for signal in (views.selector.changed, views.head_grid.clicked, views.model_view.clicked):
            signal.connect(self._follow_selection, queued)

    def open(self) -> None:
        """View → Patching: the pane's dock, made on first use as a tab beside the Decoding dock, shown and raised;
        the corrupted box takes the run's source when it holds none or another run's."""
        if self.dock is None:
            from ..views.patching import PatchingView

            self.pane = PatchingView()
            self.pane.run_requested.connect(self.run)
            self.pane.estimate_changed.connect(self._choose_estimate)
            self.pane.cell_clicked.connect(self.choose_cell)
            self.pane.hovered.connect(lambda text: self.views.status_bar.showMessage(text))
            self.pane.export_requested.connect(self.export)
            self.dock = self.views.docks.beside_decoding("Patching", self.pane)
            window = self.views.docks.window
            # the tables need more height than the decoding bars: the bottom docks take about half the window
            window.resizeDocks([self.dock], [int(window.height() * DOCK_SHARE)], Qt.Orientation.Vertical)
        text = self._text()
        if text and text != self.source:
            self.pane.set_source(text)
        self.dock.show()
        self.dock.raise_()

    def _text(self) -> str:
        request = self.session.request
        return request.settings.text if request is not None else self.views.input_bar.text()

    def run(self, corrupt: str, step: int, nll: bool) -> None:
        """Patch the run's source (the clean one) into ``corrupt`` at ``step`` (negative: auto)."""
        request = self.session.request
        settings = request.settings if request is not None else None
        self.source = self._text()
        job = PatchJob(self.session.new_job("patching", of_models=True), clean=self.source, corrupt=corrupt,
                       step=None if step < 0 else step, nll=nll, src_lang=getattr(settings, "src_lang", ""),
                       tgt_lang=getattr(settings, "tgt_lang", ""))
        self.asked = job.id
        self.pane.clear(WAITING)
        self.requested.emit(job)

    def _on_answer(self, answer: PatchAnswer) -> None:
        if answer.job.id != self.asked or self.pane is None:
            return
        if answer.line:
            self.report = None
            self.pane.clear(answer.line)
            return
        self.report, self.chosen = answer.value, None
        self.refresh()

    def _choose_estimate(self, estimate: str) -> None:
        self.estimate = estimate
        self.refresh()

    def choose_cell(self, panel: str, row: int, column: int) -> None:
        """A click on a cell: selected; a head's cell also focuses that head in the main view."""
        self.chosen = (panel, row, column)
        if panel.startswith("heads_") and self.session.trace is not None:
            kind = panel[len("heads_"):]
            if kind in self.session.trace.kinds:
                self.viewing.select(kind=kind, layer=row, head=column)
        self.refresh()

    def _follow_selection(self, *_) -> None:
        if self.chosen is not None and self.chosen[0].startswith("heads_"):
            self.chosen = None  # a head chosen elsewhere replaces the one clicked here
        self.refresh()

    def refresh(self) -> None:
        """Draw the tables (the viewing feature's selection outlined on its head table)."""
        if self.pane is None or self.report is None:
            return
        state = patch_panels(self.report, estimate=self.estimate, selected=self.chosen)
        selection = self.session.selection
        cell = self.chosen if self.chosen and not self.chosen[0].startswith("heads_") else selected_cell(
            state, kind=selection.kind, layer=selection.layer, head=selection.head)
        self.pane.show_patching(patch_panels(self.report, estimate=self.estimate, selected=cell))

    def export(self, path: str | None = None) -> None:
        """"Export…": the shown report's tables to ``path`` (asked when None): an ``.npz`` holds every table
        (``patch_view.patch_arrays``), a ``.csv`` the shown estimate's, one file per table beside it."""
        report = self.report
        if report is None:
            return
        path = path or ask_save_path(self.parent_widget, self.stored, "Export the patching tables",
                                     name="patching.npz", file_filter=EXPORT_FILTER)
        if not path:
            return
        target = Path(path)
        try:
            if target.suffix.lower() == ".csv":
                written = [write_csv(target.with_name(f"{target.stem}-{name}.csv"), values, rows, key_tokens=columns)
                           for name, values, rows, columns in patch_csv_tables(report, self.estimate)]
            else:
                written = [write_arrays(target if target.suffix.lower() == ".npz" else target.with_suffix(".npz"),
                                        patch_arrays(report))]
        except AttnvizError as failure:  # the writers' one line
            self.views.show_error(f"Export failed: {failure}")
            return
        self.views.status_bar.showMessage(f"Saved {', '.join(item.name for item in written)} in {target.parent}",
                                          5000)
