"""What decoding accepts, defined once for the CLI, the window and session files: its modes and beam widths.

Imports no torch: the app's plain-data modules (attnviz/state) read these too.
"""

from __future__ import annotations

from enum import Enum

from ..errors import InputError

MIN_BEAM = 1  # a beam of one hypothesis is greedy decoding
MIN_BEAM_SEARCH = MIN_BEAM + 1  # the narrowest beam that searches: where a choice of "Beam" beside "Greedy" starts
MAX_BEAM = 64  # wider beams cost memory and time in proportion and change no result worth seeing


class Mode(str, Enum):
    """A decoding mode; each member equals its name as a string ("greedy"), which files and settings store."""

    GREEDY = "greedy"
    BEAM = "beam"
    FORCED = "forced"

    __str__ = str.__str__  # "beam", not "Mode.BEAM", wherever a mode is written out
    __format__ = str.__format__

    @property
    def label(self) -> str:
        """The name a person reads: "Greedy", "Beam", "Forced"."""
        return self.value.capitalize()


MODE_NAMES = tuple(mode.value for mode in Mode)


def decoding_mode(beam: int, forced: bool = False) -> Mode:
    """The one rule every caller uses: forced when there is a target, beam above width 1, else greedy."""
    if forced:
        return Mode.FORCED
    return Mode.BEAM if beam >= MIN_BEAM_SEARCH else Mode.GREEDY


def check_beam(beam: int) -> int:
    """``beam`` if decoding accepts it (:data:`MIN_BEAM` to :data:`MAX_BEAM`), else one line saying so."""
    if not MIN_BEAM <= beam <= MAX_BEAM:
        raise InputError(f"the beam width must be between {MIN_BEAM} and {MAX_BEAM}; got {beam}")
    return beam
