"""Presentation mode: full screen, every font larger, the model panel, grids and corpus panels hidden, the decoding
steps beside the heatmap; the arrow keys walk the decoding steps (← →) and the layers (↑ ↓), Esc or F11 ends it."""

from __future__ import annotations

from typing import TYPE_CHECKING

from PySide6.QtCore import QByteArray, QEvent, QObject, Qt, QTimer, Signal
from PySide6.QtGui import QFont
from PySide6.QtWidgets import QApplication, QMainWindow

from ...state.layout import DockPlace
from ...state.session import Session
from ..layout import Views
from ..saved_layout import dock_places, place_docks, size_docks

if TYPE_CHECKING:
    from .viewing import Viewing

PRESENTATION_FONT_SCALE = 1.6  # presentation mode: text readable from the back of a classroom
# ... or as large as still fits the screen's width, the largest first (and never less than the last)
PRESENTATION_FONT_SCALES = (PRESENTATION_FONT_SCALE, 1.45, 1.3, 1.15)
RESIZES_FOLLOWED = 16  # after presenting, how often the window's geometry may be set again
PRESENTING_HINT = "Presenting: ← → steps, ↑ ↓ layers, Esc ends"


class Presenting(QObject):
    presenting_changed = Signal(bool)  # View → Present's check mark, and the keys that act only while presenting

    def __init__(self, session: Session, views: Views, *, viewing: Viewing, window: QMainWindow):
        """``window``: the main window as the QMainWindow it lays out (full screen, its geometry, its docks)."""
        super().__init__(window)
        self.session, self.views, self.viewing, self.window = session, views, viewing, window
        self.before: dict | None = None  # while presenting: what to restore (geometry, docks, window state, fonts)
        self.restoring = None  # once presenting ended: (the geometry it found, how often it may still be set)
        self.docks_to_size: list[DockPlace] | None = None  # once presenting ended: the docks' places, sized again
        self.scale = 1.0  # while presenting: how much larger its fonts are

    @property
    def on(self) -> bool:
        return self.before is not None

    def toggle(self) -> None:
        self.set_presenting(not self.on)

    def set_presenting(self, on: bool) -> None:
        if on == self.on:
            return
        if on:
            self._start()
        else:
            self._end()
        self.presenting_changed.emit(on)
        self.viewing.refresh(rebuild=True)

    def _start(self) -> None:
        window, views, app = self.window, self.views, QApplication.instance()
        self.before = {"docks": dock_places(views.docks), "geometry": window.saveGeometry(),
                       "rect": window.geometry(), "window_state": window.windowState(), "font": app.font()}
        # The Decoding dock stays: its steps and next-token chart are what a class follows step by step.
        for dock in (views.model_dock, *views.docks.panel_docks):
            dock.hide()
        views.grids.hide()
        # Beside the heatmap, where the grids were: under it, the dock would take the heatmap's height.
        window.addDockWidget(Qt.DockWidgetArea.RightDockWidgetArea, views.decoding_dock)
        self.scale = self._fitting_scale(self.before["font"])
        views.focus.set_tick_font(app.font())
        window.showFullScreen()
        window.resizeDocks([views.decoding_dock], [window.width() * 2 // 5], Qt.Orientation.Horizontal)
        views.decoding.set_text_scale(self.scale)
        views.focus.setFocus()
        views.status_bar.showMessage(PRESENTING_HINT, 8000)

    def _fitting_scale(self, font: QFont) -> float:
        """The largest of ``PRESENTATION_FONT_SCALES`` at which the window, its fonts that much larger, still fits
        its screen's width, else the smallest (at 1000 pixels, 1.6× made it 1,192 wide: the Decoding dock ran off
        the screen); the application's font is left at that scale."""
        app, screen = QApplication.instance(), self.window.screen()
        available = screen.availableGeometry().width() if screen is not None else None
        for scale in PRESENTATION_FONT_SCALES:
            larger = QFont(font)
            larger.setPointSizeF(font.pointSizeF() * scale)
            app.setFont(larger)
            QApplication.sendPostedEvents()  # the widgets' font changes, and the layouts' requests they make
            self.window.layout().activate()
            if available is None or self.window.minimumSizeHint().width() <= available:
                break
        if available is not None and self.window.width() > available:  # grown to a larger scale's minimum
            self.window.resize(max(available, self.window.minimumSizeHint().width()), self.window.height())
        return scale

    def layout_to_save(self) -> tuple[QByteArray, list[DockPlace]]:
        """The window's geometry and its docks' places as the user laid them out: while presenting, as they were
        before it began."""
        if self.before is not None:
            return self.before["geometry"], self.before["docks"]
        return self.window.saveGeometry(), dock_places(self.views.docks)

    def _end(self) -> None:
        """The window exactly as presenting found it: its state (normal, maximised, full screen), its geometry
        and its docks."""
        window, views, saved, self.before = self.window, self.views, self.before, None
        if views.status_bar.currentMessage() == PRESENTING_HINT:  # it spoke of presenting
            views.status_bar.clearMessage()
        QApplication.instance().setFont(saved["font"])
        views.focus.set_tick_font(None)
        views.decoding.set_text_scale(1.0)
        views.grids.setVisible(not self.session.comparing)  # the comparison keeps the grids aside
        window.setWindowState(saved["window_state"])
        place_docks(views.docks, saved["docks"])
        self.docks_to_size = saved["docks"]  # again once laid out at the size the window comes back to
        QTimer.singleShot(0, self, self._size_docks)
        if not saved["window_state"] & (Qt.WindowState.WindowFullScreen | Qt.WindowState.WindowMaximized):
            # restoreGeometry would move a window without a frame by a frame's size; and until the smaller fonts'
            # minimum sizes apply and the platform has left full screen, the window may come back larger: its
            # geometry is set again at its next resizes and layout requests, until the event loop finds it right
            self.restoring = (saved["rect"], RESIZES_FOLLOWED)
            window.installEventFilter(self)  # its layout requests: a minimum size shrinks without a resize
            self.window_resized()
            QTimer.singleShot(0, self, self._check_restored)

    def _size_docks(self) -> None:
        if self.docks_to_size is not None and not self.on:
            size_docks(self.views.docks, self.docks_to_size)
        self.docks_to_size = None

    def eventFilter(self, watched, event) -> bool:  # noqa: N802 (Qt's name)
        if event.type() == QEvent.Type.LayoutRequest:
            self.window_resized()
        return False

    def window_closing(self) -> None:
        """The window closes: the application's font as it was (the window itself is not laid out again)."""
        if self.before is not None:
            QApplication.instance().setFont(self.before["font"])
            self.before = None
        self.stop_following()

    def stop_following(self) -> None:
        """The window's geometry is no longer set again (it is back, or the window closes)."""
        self.restoring = self.docks_to_size = None
        self.window.removeEventFilter(self)

    def window_resized(self) -> None:
        """The window's geometry (or layout) changed: where presenting just ended, set the one it found again."""
        if self.restoring is None or self.on:
            return
        rect, tries = self.restoring
        if self.window.geometry() != rect and tries > 0:
            self.restoring = (rect, tries - 1)
            self.window.setGeometry(rect)

    def _check_restored(self) -> None:
        """The event loop is idle: the geometry is the one presenting found (or cannot be), or is set once more."""
        if self.restoring is None:
            return
        rect, tries = self.restoring
        if self.on or self.window.geometry() == rect or tries == 0:
            self.stop_following()
            return
        self.window_resized()
        QTimer.singleShot(0, self, self._check_restored)
