"""Where the views sit: the input bars over the focus heatmap (or the comparison) beside the grids, the Model dock
on the left and the Decoding dock below. ``setup_views`` makes the views as the window's attributes (the pattern
of Qt Designer's ``setupUi``); the features connect their signals."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QMainWindow, QSplitter, QTabWidget, QVBoxLayout, QWidget

from .docks import DockArea
from .saved_layout import default_docks


def setup_views(window: QMainWindow, devices: list[str], demos: list[Path]) -> None:
    from .views.compare import CompareBar, CompareView
    from .views.controls import AblationBar, InputBar, SelectorBar, SnapshotBar
    from .views.model_panel import ModelPanel
    from .views.decoding import DecodingPanel
    from .views.heatmap import HeatmapView
    from .views.thumbnails import ThumbnailGrid

    window.input_bar, window.ablation_bar, window.snapshot_bar = InputBar(), AblationBar(), SnapshotBar()
    window.selector = SelectorBar()
    window.selector.setEnabled(False)  # nothing to choose from until a trace exists
    window.focus = HeatmapView()
    window.compare_bar = CompareBar()
    window.compare_view = CompareView()  # model A | model B | B − A, in the focus view's place while comparing
    window.compare_view.hide()
    window.head_grid, window.model_view = ThumbnailGrid(), ThumbnailGrid()
    window.decoding = DecodingPanel()
    window.model_panel = ModelPanel(devices, demos)
    focus_area = QWidget()
    focus_layout = QVBoxLayout(focus_area)
    focus_layout.setContentsMargins(4, 4, 4, 4)
    for view, stretch in ((window.selector, 0), (window.focus, 1), (window.compare_view, 1)):
        focus_layout.addWidget(view, stretch)
    window.grids = QTabWidget()
    # In a narrow panel both tabs stay in view, their titles shortened ("Heads of th…"), not behind arrows.
    window.grids.setUsesScrollButtons(False)
    window.grids.setElideMode(Qt.TextElideMode.ElideRight)
    for view, title in ((window.head_grid, "Heads of this layer"), (window.model_view, "All layers × heads")):
        window.grids.setTabToolTip(window.grids.addTab(view, title), title)
    splitter = QSplitter(Qt.Orientation.Horizontal)
    splitter.addWidget(focus_area)
    splitter.addWidget(window.grids)
    splitter.setSizes([700, 420])
    central = QWidget()
    layout = QVBoxLayout(central)
    layout.setContentsMargins(0, 0, 0, 0)
    for bar in (window.input_bar, window.ablation_bar, window.snapshot_bar, window.compare_bar):
        layout.addWidget(bar)
    layout.addWidget(splitter, 1)
    window.setCentralWidget(central)
    _setup_docks(window)


def _setup_docks(window: QMainWindow) -> None:
    window.docks = DockArea(window)
    window.model_dock = window.docks.add("Model", window.model_panel, Qt.DockWidgetArea.LeftDockWidgetArea)
    window.docks.model_dock = window.model_dock
    window.decoding_dock = window.docks.add("Decoding", window.decoding, Qt.DockWidgetArea.BottomDockWidgetArea)
    window.decoding_dock.dockLocationChanged.connect(
        lambda area: window.decoding.set_stacked(area in (Qt.DockWidgetArea.LeftDockWidgetArea,
                                                          Qt.DockWidgetArea.RightDockWidgetArea)))
    default_docks(window)
