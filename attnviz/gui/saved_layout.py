"""The window's layout across launches: its geometry and each dock's place, saved at quit with the layout's version
(attnviz/state/layout.py: the places as data, and when a saved layout may be used again), restored at start-up, and
View → Reset layout's default: the Model dock on the left, the Decoding dock below, the corpus panels hidden. A corpus
panel open at quit is not made again at start-up (its results are not kept): its room is the views'."""

from __future__ import annotations

from PySide6.QtCore import QByteArray, QRect, QSettings, Qt, QTimer
from PySide6.QtWidgets import QDockWidget, QLabel, QMainWindow

from ..state.layout import DOCK_MINIMUM, Box, DockPlace, frame_problem, places_text, read_places, squeeze_problem
from ..state.settings import SettingsReader
from .docks import DockArea, place_on_screen

MODEL_DOCK_WIDTH = 300
DECODING_DOCK_HEIGHT = 280  # at most a third of the window's height: on a 720-pixel screen the heatmap keeps more
Area = Qt.DockWidgetArea
AREA_NAMES = {Area.LeftDockWidgetArea: "left", Area.RightDockWidgetArea: "right", Area.TopDockWidgetArea: "top",
              Area.BottomDockWidgetArea: "bottom"}
AREAS = {name: area for area, name in AREA_NAMES.items()}


def box(rect: QRect) -> Box:
    return Box(left=rect.left(), top=rect.top(), width=rect.width(), height=rect.height())


def restore_geometry(window: QMainWindow, stored: SettingsReader) -> str:
    """The saved window's size and place, where it fits the screen (else the first window's): why not, or ''."""
    geometry = stored.blob("window/geometry")
    problem = ""
    if geometry is not None and window.restoreGeometry(geometry):
        problem = frame_problem(box(window.geometry()), box(window.screen().availableGeometry()))
        if not problem:
            return ""
    place_on_screen(window)
    return problem


def all_docks(area: DockArea) -> list[QDockWidget]:
    return [area.model_dock, area.decoding_dock, *area.panel_docks]


def default_places(area: DockArea) -> list[DockPlace]:
    """The docks as a first launch has them."""
    return [DockPlace(area.model_dock.objectName(), "left", shown=True, size=MODEL_DOCK_WIDTH),
            DockPlace(area.decoding_dock.objectName(), "bottom", shown=True,
                      size=min(DECODING_DOCK_HEIGHT, area.window.height() // 3)),
            *(DockPlace(panel.objectName(), "right", shown=False, size=DOCK_MINIMUM)
              for panel in area.panel_docks)]


def dock_places(area: DockArea) -> list[DockPlace]:
    """Where each dock is now (a floating dock: where it was docked last; it comes back docked)."""
    window, places, docks = area.window, [], all_docks(area)
    for index, dock in enumerate(docks):
        side = AREA_NAMES.get(window.dockWidgetArea(dock), "right")
        size = dock.width() if side in ("left", "right") else dock.height()
        tabs = window.tabifiedDockWidgets(dock)
        first = next((other for other in docks[:index] if other in tabs), None)  # the tab group's first dock
        places.append(DockPlace(dock.objectName(), side, shown=not dock.isHidden(), size=size,
                                tab_of=first.objectName() if first is not None else ""))
    return places


def place_docks(area: DockArea, places: list[DockPlace], *, starting: bool = False) -> None:
    """Put every dock at its place, then give the shown ones their sizes (``starting``: in a window being built,
    once more when it is laid out)."""
    window, docks = area.window, {dock.objectName(): dock for dock in all_docks(area)}
    for place in places:
        dock = docks[place.name]
        dock.setFloating(False)
        window.addDockWidget(AREAS[place.area], dock)
        dock.setVisible(place.shown)
    for place in places:
        if place.tab_of:
            window.tabifyDockWidget(docks[place.tab_of], docks[place.name])
    size_docks(area, places)
    if starting:  # a window built after it was shown (attnviz's launch) has not computed its layout yet, and
        # resizeDocks' sizes were lost in it: once more when the event loop has laid the docks out
        QTimer.singleShot(0, window, lambda: size_docks(area, places))


def size_docks(area: DockArea, places: list[DockPlace]) -> None:
    window, docks = area.window, {dock.objectName(): dock for dock in all_docks(area)}
    for across, orientation in ((True, Qt.Orientation.Horizontal), (False, Qt.Orientation.Vertical)):
        sized = [place for place in places if place.shown and not place.tab_of and place.across == across]
        window.resizeDocks([docks[place.name] for place in sized], [place.size for place in sized], orientation)


def default_docks(area: DockArea) -> None:
    place_docks(area, default_places(area))


def restore_docks(area: DockArea, stored: SettingsReader) -> str:
    """The docks as they were saved, where that layout is of this version and leaves every view its room (else the
    default): why not, or ''."""
    window, names = area.window, {dock.objectName() for dock in all_docks(area)}
    places, problem = read_places(stored.text("window/docks", ""), names)
    problem = problem or squeeze_problem(places, window.width(), window.height(),
                                         model=area.model_dock.objectName())
    place_docks(area, places if places and not problem else default_places(area), starting=True)
    return problem


def save_layout(settings: QSettings, geometry: QByteArray, places: list[DockPlace]) -> None:
    settings.setValue("window/geometry", geometry)
    settings.setValue("window/docks", places_text(places))
    settings.remove("window/state")  # Qt's own state, written by earlier versions


def reset_layout(area: DockArea) -> None:
    """View → Reset layout: the first launch's window and docks (presenting has ended first)."""
    window = area.window
    window.showNormal()
    place_on_screen(window)
    default_docks(area)
    window.statusBar().showMessage("The window's layout is back to the default.", 5000)


LAYOUT_NOTE_MS = 60_000  # how long the status bar says why the saved layout was not used


def show_layout_note(window: QMainWindow, why: str) -> None:
    """Why the saved layout gave way to the default, at the status bar's right end (the messages of opening the
    model, on its left, do not cover it) for a minute."""
    if not why:
        return
    note = QLabel(f"Default window layout: {why}. ")
    note.setObjectName("layoutNote")
    note.setToolTip("View → Reset layout also brings the default back")
    window.statusBar().addPermanentWidget(note)
    QTimer.singleShot(LAYOUT_NOTE_MS, note, note.deleteLater)
