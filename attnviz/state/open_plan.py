"""A multi-step opening as plain data (no Qt, no torch): a saved session opens its model A, then its model B, then
selects the saved head, step and hypothesis once the first run of model A arrives; a demo pair opens A, then B.

The window opens model A and tells the plan what happens; each event says what the plan asks for next:

- "another model opened" (any open, the plan's own included): an open of another file ends the plan.
- "model loaded": the plan's model A is in; the window applies the session's settings and opens ``partner``.
  Another model loading instead ends the plan.
- "model failed": the plan ends; the open model stays.
- "run arrived": a run of model A is in; a session's saved selection applies to it, once.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

OPENING = "opening"  # model A is being opened
AWAITING_RUN = "awaiting run"  # model A is in; the saved selection waits for its first run
DONE = "done"
DROPPED = "dropped"  # another model came first, or model A did not open


def same_file(first: str | Path, second: str | Path) -> bool:
    return Path(first).resolve() == Path(second).resolve()


@dataclass
class OpenPlan:
    """``model``: model A; ``partner``: model B, opened once A is in; ``saved``: the SavedSession being reopened
    (its run settings, switched-off heads, snapshot and selection), or None for a demo pair."""

    model: Path
    partner: Path | None = None
    saved: Any = None
    stage: str = OPENING

    @classmethod
    def for_session(cls, saved) -> OpenPlan:
        return cls(Path(saved.checkpoint), partner=saved.compare, saved=saved)

    @classmethod
    def for_pair(cls, a: str | Path, b: str | Path) -> OpenPlan:
        return cls(Path(a), partner=Path(b))

    @property
    def active(self) -> bool:
        return self.stage in (OPENING, AWAITING_RUN)

    def another_model_opened(self, path: str | Path) -> None:
        """An open was asked for: the plan's own open keeps it; any other ends it (once model A is in, any)."""
        if self.stage == AWAITING_RUN or (self.stage == OPENING and not same_file(path, self.model)):
            self.stage = DROPPED

    def model_loaded(self, path: str | Path) -> bool:
        """A model loaded: True when it is this plan's model A (its settings apply and ``partner`` opens now)."""
        if self.stage != OPENING or not same_file(path, self.model):
            self.stage = DROPPED
            return False
        self.stage = AWAITING_RUN if self.saved is not None else DONE
        return True

    def model_failed(self) -> None:
        self.stage = DROPPED

    def run_arrived(self):
        """A run of the open model arrived: the saved selection to apply to it (once), or None."""
        if self.stage != AWAITING_RUN:
            return None
        self.stage = DONE
        return self.saved.selection
