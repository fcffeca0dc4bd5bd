"""The window's layout across launches, as plain data (no Qt): where each dock is (its area, shown or not, its
width or height, the dock it is a tab of), written as versioned JSON, and the rules that say whether a saved layout
may be used again. A layout of another version, one whose window does not fit the screen it opens on, or one that
leaves a view less than its least useful size is dropped for the default layout, and the status bar says why
(gui/saved_layout.py applies it). Qt's own saved state (``QMainWindow.saveState``) was not used: restored before the
window is laid out, its sizes are applied again at the first show and gave a closed panel's room to the Model dock.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import NamedTuple

# 2: every dock saved by name with its place and size (version 1 was Qt's own state of the docks: restored before the
# corpus panels were made, their room went to the Model dock).
LAYOUT_VERSION = 2
AREAS = ("left", "right", "top", "bottom")
CENTRAL_MINIMUM = (480, 330)  # the input bars, heatmap and heads grid at their least useful size (width, height)
MODEL_PANEL_SHARE = 0.4  # the Model panel never takes more of the window's width than this
DOCK_MINIMUM = 120  # a dock shown narrower (or lower) than this is of no use


class Box(NamedTuple):
    """A rectangle in screen pixels (left, top, width, height)."""

    left: int
    top: int
    width: int
    height: int


@dataclass(frozen=True)
class DockPlace:
    name: str  # the dock's object name
    area: str  # one of AREAS
    shown: bool
    size: int  # its width (left, right) or height (top, bottom) in pixels
    tab_of: str = ""  # the dock whose tab it is ('' for none)

    @property
    def across(self) -> bool:
        """Whether its size is a width (a column beside the views)."""
        return self.area in ("left", "right")


def places_text(places: list[DockPlace]) -> str:
    return json.dumps({"version": LAYOUT_VERSION, "docks": [asdict(place) for place in places]})


def read_places(text: str | None, names: set[str]) -> tuple[list[DockPlace], str]:
    """The places saved as ``text`` of the docks named ``names`` (none saved: ([], '')), or ([], why they cannot
    be used). A dock not made yet (a corpus panel is made on first use) keeps no place: it comes when asked for."""
    if not text:
        return [], ""
    try:
        document = json.loads(text)
        version = document.get("version") if isinstance(document, dict) else None
    except ValueError:
        return [], "the saved window layout could not be read"
    if version != LAYOUT_VERSION:
        return [], "the saved window layout is from another version of attnviz"
    try:
        places = [DockPlace(**{key: item[key] for key in ("name", "area", "shown", "size", "tab_of")})
                  for item in document.get("docks", [])]
    except (TypeError, KeyError):
        return [], "the saved window layout could not be read"
    if any(not isinstance(place.name, str) or place.area not in AREAS or not isinstance(place.size, int)
           or not isinstance(place.tab_of, str) for place in places):
        return [], "the saved window layout could not be read"
    return [place for place in places if place.name in names and place.tab_of in names | {""}], ""


def frame_problem(frame: Box, screen: Box) -> str:
    """Why a saved window (its ``frame``) cannot be placed on the screen's available area ``screen``, or ''."""
    inside = (frame.left >= screen.left and frame.top >= screen.top and frame.left + frame.width <= screen.left
              + screen.width and frame.top + frame.height <= screen.top + screen.height)
    return "" if inside else (f"the saved window ({frame.width} × {frame.height}) does not fit this screen "
                              f"({screen.width} × {screen.height})")


def squeeze_problem(places: list[DockPlace], width: int, height: int, *, model: str) -> str:
    """Why the docks shown at ``places`` leave the views of a ``width`` × ``height`` window less than their least
    useful size (or give the Model dock, named ``model``, more than its share), or ''."""
    shown = [place for place in places if place.shown and not place.tab_of]
    columns = sum(place.size for place in shown if place.across)
    rows = sum(place.size for place in shown if not place.across)
    if any(place.name == model and place.size > MODEL_PANEL_SHARE * width for place in shown):
        return "the saved window layout gave the Model panel too much room"
    if width - columns < CENTRAL_MINIMUM[0] or height - rows < CENTRAL_MINIMUM[1]:
        return "the saved window layout left the heatmap and the heads grid too small"
    if any(place.size < DOCK_MINIMUM for place in shown):
        return "the saved window layout left a panel too small"
    return ""
