"""Long computations as generators: each ``yield`` ends one unit of work (a head scored, a batch run) with its
progress, and the generator's return value is the result. A caller that must do other things between units
(the window's worker thread answers runs and model loads there) steps it with ``next``; one that does not
drives it to the end with :func:`drive`."""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import Any, TypeVar

Result = TypeVar("Result")
Steps = Generator[tuple, None, Result]


def drive(steps: Steps, progress: Callable[..., Any] | None = None) -> Any:
    """Run ``steps`` to its end, calling ``progress(*unit)`` after each unit; ``progress`` returning False stops
    it between two units (the result is then None)."""
    while True:
        try:
            unit = next(steps)
        except StopIteration as end:
            return end.value
        if progress is not None and progress(*unit) is False:
            steps.close()
            return None


def units_as(steps: Steps, unit: tuple) -> Generator[tuple, None, Any]:
    """``steps`` with each of its units yielded as ``unit`` (an inner computation's units counted as its caller
    counts them); returns its result."""
    while True:
        try:
            next(steps)
        except StopIteration as end:
            return end.value
        yield unit
