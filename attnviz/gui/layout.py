"""Where the views sit: the input bars over the focus heatmap (or the comparison) beside the grids, the Model dock
on the left and the Decoding dock below. ``setup_views`` makes the views and returns them as one frozen ``Views``,
which the window keeps (``window.views``) and hands to each feature; the features connect their signals."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtCore import QSize, Qt
from PySide6.QtWidgets import QDockWidget, QMainWindow, QSplitter, QStatusBar, QTabWidget, QVBoxLayout, QWidget

from .docks import DockArea
from .saved_layout import default_docks

if TYPE_CHECKING:  # the views load pyqtgraph: imported when ``setup_views`` runs
    from .views.compare import CompareBar, CompareView
    from .views.controls import AblationBar, InputBar, SelectorBar, SnapshotBar
    from .views.decoding import DecodingPanel
    from .views.heatmap import HeatmapView
    from .views.model_panel import ModelPanel
    from .views.mosaic import MosaicGrid
    from .views.thumbnails import ThumbnailGrid


@dataclass(frozen=True)
class Views:
    """The views the window holds: what the features show states in and take the user's choices from."""

    input_bar: InputBar  # the sentence, the decoding settings, the output line and the one-line errors
    ablation_bar: AblationBar
    snapshot_bar: SnapshotBar
    selector: SelectorBar  # kind, layer, head, Show, colours, masks
    focus: HeatmapView
    compare_bar: CompareBar
    compare_view: CompareView  # model A | model B | B − A, in the focus view's place while comparing
    grids: QTabWidget  # the two thumbnail grids' tabs
    head_grid: ThumbnailGrid  # the heads of the selected layer
    model_view: MosaicGrid  # every layer × head
    decoding: DecodingPanel
    model_panel: ModelPanel
    docks: DockArea  # the docks: the two below and the corpus panels made on first use
    model_dock: QDockWidget
    decoding_dock: QDockWidget
    status_bar: QStatusBar

    def show_error(self, message: str) -> None:
        """One line saying what went wrong, under the sentence box."""
        self.input_bar.show_error(message)


class ViewsSplitter(QSplitter):
    """The heatmap beside the grids: content with its least height, it takes the central widget's height that the
    bars over it leave (its stretch), so that in a short window the output line and the notices over it keep their
    lines and give way only where the window has no more room (they scroll then; the window stays on the screen)."""

    def sizeHint(self) -> QSize:  # noqa: N802 (Qt's name)
        return QSize(super().sizeHint().width(), self.minimumSizeHint().height())


def setup_views(window: QMainWindow, devices: list[str], demos: list[Path]) -> Views:
    """Make the views in ``window``: the central widget, the docks and their default places."""
    from .views.compare import CompareBar, CompareView
    from .views.controls import AblationBar, InputBar, SelectorBar, SnapshotBar
    from .views.decoding import DecodingPanel
    from .views.heatmap import HeatmapView
    from .views.model_panel import ModelPanel
    from .views.mosaic import MosaicGrid
    from .views.thumbnails import ThumbnailGrid

    bars = {"input_bar": InputBar(), "ablation_bar": AblationBar(), "snapshot_bar": SnapshotBar(),
            "compare_bar": CompareBar()}
    selector, focus, compare_view = SelectorBar(), HeatmapView(), CompareView()
    selector.setEnabled(False)  # nothing to choose from until a trace exists
    compare_view.hide()
    head_grid, model_view = ThumbnailGrid(), MosaicGrid()
    focus_area = QWidget()
    focus_layout = QVBoxLayout(focus_area)
    focus_layout.setContentsMargins(4, 4, 4, 4)
    for view, stretch in ((selector, 0), (focus, 1), (compare_view, 1)):
        focus_layout.addWidget(view, stretch)
    grids = QTabWidget()
    # In a narrow panel both tabs stay in view, their titles shortened ("Heads of th…"), not behind arrows.
    grids.setUsesScrollButtons(False)
    grids.setElideMode(Qt.TextElideMode.ElideRight)
    for view, title in ((head_grid, "Heads of this layer"), (model_view, "All layers × heads")):
        grids.setTabToolTip(grids.addTab(view, title), title)
    splitter = ViewsSplitter(Qt.Orientation.Horizontal)
    splitter.addWidget(focus_area)
    splitter.addWidget(grids)
    splitter.setSizes([700, 420])
    central = QWidget()
    layout = QVBoxLayout(central)
    layout.setContentsMargins(0, 0, 0, 0)
    for name in ("input_bar", "ablation_bar", "snapshot_bar", "compare_bar"):
        layout.addWidget(bars[name])
    layout.addWidget(splitter, 1)
    window.setCentralWidget(central)
    decoding, model_panel = DecodingPanel(), ModelPanel(devices, demos)
    docks = _setup_docks(window, model_panel, decoding)
    return Views(**bars, selector=selector, focus=focus, compare_view=compare_view, grids=grids,
                 head_grid=head_grid, model_view=model_view, decoding=decoding, model_panel=model_panel, docks=docks,
                 model_dock=docks.model_dock, decoding_dock=docks.decoding_dock, status_bar=window.statusBar())


def _setup_docks(window: QMainWindow, model_panel: QWidget, decoding) -> DockArea:
    docks = DockArea(window)
    docks.model_dock = docks.add("Model", model_panel, Qt.DockWidgetArea.LeftDockWidgetArea)
    docks.decoding_dock = docks.add("Decoding", decoding, Qt.DockWidgetArea.BottomDockWidgetArea)
    docks.decoding_dock.dockLocationChanged.connect(
        lambda area: decoding.set_stacked(area in (Qt.DockWidgetArea.LeftDockWidgetArea,
                                                   Qt.DockWidgetArea.RightDockWidgetArea)))
    default_docks(docks)
    return docks
