"""Exporting what the window shows: the focus heatmap as PNG/SVG or to the clipboard (while comparing, A | B | B − A),
a layer's heads as one figure, the run's attention as NPZ, the heatmap as CSV. A failed write is one line."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtCore import QObject
from PySide6.QtWidgets import QApplication, QWidget

from models.errors import AttnvizError

from ...state import compare_view, viewmodel
from ...state.export import write_csv, write_npz
from ...state.figures import Caption, compare_svg, heatmap_svg, neuron_svg, without_masks
from ...state.session import Session
from ...state.settings import SettingsReader
from ..dialogs import IMAGE_FILTER, ask_save_path
from ..layout import Views
from ..rendering import figure_image, heads_figure, save_figure

if TYPE_CHECKING:
    from .neuron import Neuron
    from .viewing import Viewing

NOTHING_RUN_YET = "nothing to export yet; run a sentence first"
RUN_UNDER_WAY = "a new run is under way; export once it has finished"
NO_ATTENTION = "this model has no attention: only its outputs are shown"


class Exporting(QObject):
    def __init__(self, session: Session, views: Views, *, viewing: Viewing, neuron: Neuron, parent: QWidget,
                 stored: SettingsReader):
        super().__init__(parent)
        self.session, self.views, self.viewing, self.neuron = session, views, viewing, neuron
        self.parent_widget, self.stored = parent, stored

    def _ask(self, title: str, *, name: str, file_filter: str) -> str:
        return ask_save_path(self.parent_widget, self.stored, title, name=name, file_filter=file_filter)

    def _write(self, write, *paths_and_data, saved: str = "") -> bool:
        """Run ``write`` on each tuple of arguments in turn; the first failure is one line in the window."""
        try:
            written = [write(*arguments) for arguments in paths_and_data]
        except AttnvizError as failure:  # the writers' one line (attnviz/state/export.py)
            self.views.show_error(f"Export failed: {failure}")
            return False
        self.views.status_bar.showMessage(saved or f"Saved {written[0]}", 5000)
        return True

    def _caption(self) -> Caption:
        """The input, and each shown model's name and output, for a figure's caption."""
        session = self.session
        outputs = [(session.model.path.stem, session.result.text)]
        if session.comparing:
            partner = session.partner_result
            waiting = session.partner_missing
            outputs.append((session.partner.path.stem, partner.text if partner is not None else waiting))
        return Caption(session.request.settings.text if session.request is not None else "", tuple(outputs))

    def write_figure(self, figure: str, path: str) -> bool:
        """A figure of attnviz/state/figures.py saved as PNG or SVG; a failure is one line in the window."""
        return self._write(save_figure, (figure, path))

    def shown_state(self) -> viewmodel.HeatmapState | compare_view.CompareState | str:
        """What the focus view shows as a figure would draw it (while comparing, A | B | B − A, as long as one pane
        has a map), or why there is nothing to draw: no run yet, a new run under way (the views still show the
        last one, which no longer matches the input), or the line the focus view shows in place of a map."""
        session, viewing = self.session, self.viewing
        trace = session.trace
        if trace is None:
            return RUN_UNDER_WAY if session.request is not None else NOTHING_RUN_YET
        if not trace.kinds:
            return NO_ATTENTION
        if session.comparing:
            comparison = viewing.current_comparison()
            panes = (comparison.a, comparison.b, comparison.diff)
            if any(pane.state is not None for pane in panes):
                return comparison
            return f"nothing to export: {comparison.a.message or comparison.b.message}"
        shown = viewing.focus_state()
        return f"nothing to export: {shown}" if isinstance(shown, str) else shown

    def current_figure(self) -> str | None:
        """The focus heatmap as a slide-ready figure (while comparing, A | B | B − A), or None when
        :meth:`shown_state` says why there is none."""
        from ..views.style import lookup_table

        focus, shown = self.views.focus, self.shown_state()
        if isinstance(shown, str):
            return None
        if not self.views.selector.masks_visible():
            shown = without_masks(shown)
        if isinstance(shown, viewmodel.HeatmapState):
            return heatmap_svg(shown, focus.lut(), caption=self._caption())
        names = (self.session.model.path.stem, self.session.partner.path.stem)
        luts = (focus.lut(), lookup_table(compare_view.DIVERGING_COLORMAP))
        return compare_svg(shown, names, luts=luts, caption=self._caption())

    def export_focus_image(self, path: str | None = None) -> None:
        """The focus heatmap; while comparing, the three maps (A | B | B − A). PNG and SVG are one figure."""
        selection = self.session.selection
        name = viewmodel.export_name(selection.kind, selection.layer, selection.head) + ".png"
        path = path or self._ask("Export heatmap", name=name, file_filter=IMAGE_FILTER)
        if not path:
            return
        figure = self.current_figure()
        if figure is None:
            self.views.show_error(f"Export failed: {self.shown_state()}")
            return
        self._write(save_figure, (figure, path))

    def copy_focus_image(self) -> None:
        """The exported figure (PNG, 2×) to the clipboard, for pasting into slides."""
        figure = self.current_figure()
        if figure is None:
            return
        QApplication.clipboard().setImage(figure_image(figure))
        self.views.status_bar.showMessage("The heatmap is on the clipboard", 5000)

    def export_grid_image(self, path: str | None = None) -> None:
        trace, selection = self.session.trace, self.session.selection
        name = f"{selection.kind}-L{selection.layer}-heads.png"
        path = path or self._ask("Export all heads of this layer", name=name, file_filter=IMAGE_FILTER)
        if path and trace is not None and selection.kind in trace.attention:
            from ..views.style import lookup_table

            mask = trace.masks[selection.kind] if self.views.selector.masks_visible() else None
            groups = self.session.model.kv_groups if self.session.model is not None else ()
            feature = self.viewing.contributions  # the shown method's heads, as the grid draws them
            maps = feature.maps_for()
            if isinstance(maps, str):
                self.views.show_error(f"Export failed: {maps}")
                return
            contribution = None if maps is None else (maps, feature.choice)
            try:
                figure = heads_figure(trace, selection, lut=lookup_table(self.views.selector.colormap_name()),
                                      mask=mask, caption=self._caption(), contribution=contribution, kv_groups=groups)
            except AttnvizError as error:
                self.views.show_error(f"Export failed: {error}")
                return
            self._write(save_figure, (figure, path))

    def export_neuron_image(self, path: str | None = None) -> None:
        """The Neuron view's head and query as a figure (PNG or SVG)."""
        state = self.neuron.state
        if state is None:
            self.views.show_error("Export failed: the Neuron view shows no head yet: View → Neuron, after a run")
            return
        selection = self.session.selection
        name = f"neuron-{viewmodel.export_name(selection.kind, selection.layer, selection.head)}-q{state.query_row}.png"
        path = path or self._ask("Export neuron view", name=name, file_filter=IMAGE_FILTER)
        if path:
            self._write(save_figure, (neuron_svg(state, caption=self._caption()), path))

    def export_npz(self, path: str | None = None) -> None:
        if self.session.result is None or self.session.trace is None:
            return
        path = path or self._ask("Export attention data", name="attention.npz", file_filter="NumPy archive (*.npz)")
        if not path:
            return
        partner = self.session.partner_result if self.session.comparing else None
        if partner is None:
            self._write(write_npz, (path, self.session.result))
            return
        beside = Path(path).with_name(Path(path).stem + "-B.npz")  # model B's run, in the same layout
        self._write(write_npz, (path, self.session.result), (beside, partner),
                    saved=f"Saved {path} (model A) and {beside} (model B)")

    def export_csv(self, path: str | None = None) -> None:
        current = self.viewing.current_heatmap()
        if current is None:
            return
        path = path or self._ask("Export this heatmap", name=current.file_stem + ".csv", file_filter="CSV (*.csv)")
        if not path:
            return
        comparison = self.viewing.current_comparison() if self.session.comparing else None
        if comparison is None:
            self._write(write_csv, (path, current.matrix, current.query_labels, current.key_labels))
            return
        # model A's map as asked; B's and B − A beside it, where they exist
        panes = [(Path(path).with_name(Path(path).stem + suffix + ".csv"), pane.state)
                 for pane, suffix in ((comparison.a, ""), (comparison.b, "-B"), (comparison.diff, "-B-minus-A"))
                 if pane.state is not None]
        rows = [(target, state.matrix, state.query_labels, state.key_labels) for target, state in panes]
        self._write(write_csv, *rows,
                    saved=f"Saved {', '.join(target.name for target, _ in panes)} in {Path(path).parent}")
