"""The window on its screen and its docks: the first window's size and place, the panels made on first use placed
beside the views (never past the screen's edge), and the window pulled back inside the screen after a view grew."""

from __future__ import annotations

from PySide6.QtCore import QRect, QSize, Qt
from PySide6.QtWidgets import QDockWidget, QMainWindow, QScrollArea, QWidget

PREFERRED_SIZE = QSize(1360, 860)  # the first window's size where the screen has room for it
FRAME_ALLOWANCE = QSize(16, 40)  # a window manager's borders and title bar: unknown until the window is shown


def initial_size(available: QSize) -> QSize:
    """The first window's size: the preferred one, or what the screen's available area (without its panels)
    leaves once the window manager has framed the window."""
    return PREFERRED_SIZE.boundedTo(available - FRAME_ALLOWANCE)


def fit_inside(frame: QRect, bounds: QRect) -> QRect:
    """``frame`` moved, and shrunk where it must be, to lie inside ``bounds``."""
    size = frame.size().boundedTo(bounds.size())
    left = min(max(frame.left(), bounds.left()), bounds.right() + 1 - size.width())
    top = min(max(frame.top(), bounds.top()), bounds.bottom() + 1 - size.height())
    return QRect(left, top, size.width(), size.height())


def place_on_screen(window: QMainWindow) -> None:
    """The first window: as large as the screen's available area allows, centred in it."""
    available = window.screen().availableGeometry()
    size = initial_size(available.size())
    frame = QRect(0, 0, size.width() + FRAME_ALLOWANCE.width(), size.height() + FRAME_ALLOWANCE.height())
    frame.moveCenter(available.center())
    window.resize(size)
    window.move(frame.topLeft())


def screen_room(window: QMainWindow, before: QRect) -> QRect:
    """Where the window may be: the screen's available area (or its own frame ``before``, where it was
    already larger than the screen)."""
    return window.screen().availableGeometry().united(before)


def keep_on_screen(window: QMainWindow, before: QRect) -> None:
    """Undo what a new view's minimum size added past the screen (a window already larger than the
    screen may keep its size, never more)."""
    window.layout().activate()
    frame = window.frameGeometry()
    target = fit_inside(frame, screen_room(window, before))
    if target != frame:
        window.resize(target.size() - (frame.size() - window.size()))
        window.move(target.topLeft())


class DockArea:
    """The window's docks (the Model and Decoding docks, and the panels made on first use): ``add`` makes one,
    ``show`` shows a panel made on first use beside the views."""

    def __init__(self, window: QMainWindow):
        self.window = window
        self.model_dock: QDockWidget | None = None  # the column a panel shares where the screen has no room
        self.decoding_dock: QDockWidget | None = None
        self.panel_docks: list[QDockWidget] = []  # the panels made on first use, in the order they were made

    def add(self, title: str, widget: QWidget, area: Qt.DockWidgetArea, *, scrolls: bool = False) -> QDockWidget:
        """``scrolls``: the widget scrolls inside the dock when the dock is smaller than it, so that its
        minimum size (a corpus panel's choices and lists) never makes the window grow past the screen; the
        panel itself lays out and scrolls its maps within what the dock gives it."""
        dock = QDockWidget(title, self.window)
        dock.setObjectName(f"{title.lower()}Dock")
        if scrolls:
            scroll = QScrollArea()
            scroll.setWidget(widget)
            scroll.setWidgetResizable(True)
            scroll.setFrameShape(QScrollArea.Shape.NoFrame)
            widget = scroll
        dock.setWidget(widget)
        self.window.addDockWidget(area, dock)
        return dock

    def beside_decoding(self, title: str, widget: QWidget) -> QDockWidget:
        """A pane made on first use (Lens, Neuron, Patching): a bottom dock, a tab beside the Decoding dock."""
        dock = self.add(title, widget, Qt.DockWidgetArea.BottomDockWidgetArea)
        self.window.tabifyDockWidget(self.decoding_dock, dock)
        return dock

    def fits(self, before: QRect) -> bool:
        """Whether the window's minimum size, framed, fits its room on the screen."""
        window = self.window
        window.layout().activate()  # the minimum size of what was just shown applies now, not at the next event
        room, frame = screen_room(window, before), window.frameGeometry().size() - window.size()
        needed = window.minimumSizeHint().expandedTo(window.minimumSize()) + frame
        return needed.width() <= room.width() and needed.height() <= room.height()

    def show(self, dock: QDockWidget) -> None:
        """Show a panel made on first use (Head statistics, Head importance) beside the views: it takes its
        room from them, never from past the screen's edge. A second such panel is a tab of the first (stacked,
        each would be a strip of a screen 768 pixels high); where the screen has no room for another column of
        docks, the panel shares the Model dock's, as a tab."""
        window = self.window
        before = window.frameGeometry()
        open_already = [other for other in self.panel_docks
                        if other is not dock and other.toggleViewAction().isChecked()]  # shown, or a tab behind one
        if dock not in self.panel_docks:
            self.panel_docks.append(dock)
        dock.show()
        if open_already and dock not in window.tabifiedDockWidgets(open_already[0]):
            window.tabifyDockWidget(open_already[0], dock)
        elif not self.fits(before) and window.dockWidgetArea(dock) != window.dockWidgetArea(self.model_dock):
            window.tabifyDockWidget(self.model_dock, dock)
        else:  # a column of its own: a third of the window, so its maps and curves are read without scrolling sideways
            window.resizeDocks([dock], [max(dock.minimumSizeHint().width(), window.width() // 3)],
                               Qt.Orientation.Horizontal)
        dock.raise_()
        keep_on_screen(window, before)
