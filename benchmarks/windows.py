"""What the benchmarks that time a real window share; imports neither Qt nor torch, so a window's own start is
what a benchmark measures."""

from __future__ import annotations

import time


def wait_for(application, condition, limit: float = 600.0) -> None:
    """Process ``application``'s events until ``condition()`` holds (a ``TimeoutError`` after ``limit`` s)."""
    deadline = time.perf_counter() + limit
    while not condition():
        application.processEvents()
        if time.perf_counter() > deadline:
            raise TimeoutError("the window did not finish in time")
        time.sleep(0.001)
