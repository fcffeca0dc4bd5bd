"""The job board and a long job's units (attnviz/jobs.py), without Qt: which job of each kind is current, why
an overtaken one stopped, and a callback-driven function stepped one unit at a time."""

from __future__ import annotations

import subprocess
import sys
import threading
import time

import pytest

from attnviz.jobs import NEWER, WINDOW_CLOSED, JobBoard, Stopped, UnitSteps


def test_the_newest_job_of_each_kind_wins():
    board = JobBoard()
    board.post("run", 3)
    board.post("importance", 4)
    assert board.is_current("run", 3) and board.is_current("importance", 4)
    board.post("run", 5)
    assert board.overtaken("run", 3) == Stopped(NEWER["run"], by=5)
    assert board.is_current("run", 5) and board.is_current("importance", 4)  # kinds do not overtake each other
    board.post("importance", 6)
    assert board.overtaken("importance", 4) == Stopped("a newer head importance job was asked for", by=6)


def test_a_newer_model_job_overtakes_corpus_jobs_but_not_runs_or_older_ones():
    board = JobBoard()
    board.post("model", 1)
    board.post("stats", 2)
    board.post("importance", 3)
    board.post("run", 4)
    board.post("model", 5, because="the model moved to cpu")
    assert board.overtaken("stats", 2) == board.overtaken("importance", 3) == Stopped("the model moved to cpu", by=5)
    assert board.is_current("run", 4) and board.is_current("model", 5)
    board.post("importance", 6)  # asked for after the move: it scores the model where it is now
    assert board.is_current("importance", 6)
    board.post("model", 7)
    assert board.overtaken("importance", 6) == Stopped("another model was opened", by=7)
    assert board.overtaken("model", 5).line == "Stopped: another model was opened."


def test_closing_is_a_state_of_its_own_that_stops_every_job():
    board = JobBoard()
    for kind, job in (("run", 1), ("model", 2), ("partner", 3), ("stats", 4)):
        board.post(kind, job)
    board.close()
    assert board.closing
    assert {board.overtaken(kind, job) for kind, job in (("run", 1), ("model", 2), ("partner", 3), ("stats", 4))} \
        == {Stopped(WINDOW_CLOSED)}
    assert Stopped(WINDOW_CLOSED).by == 0


def counting(units: int, calls: list):
    """A work in ``units`` units, the way models/importance.py calls its progress: stop when it says False."""
    def work(progress):
        for done in range(1, units + 1):
            calls.append(done)
            if progress(done, units) is False:
                return None
        return f"all {units}"
    return work


def test_a_work_runs_one_unit_per_step_and_never_while_its_caller_runs():
    calls: list[int] = []
    steps = UnitSteps(counting(3, calls))
    assert calls == []  # nothing runs before the first step
    assert steps.step().value == (1, 3) and calls == [1]
    time.sleep(0.05)
    assert calls == [1]  # between steps the work waits
    assert [steps.step().value for _ in range(2)] == [(2, 3), (3, 3)]
    last = steps.step()
    assert last.done and last.value == "all 3" and steps.finished
    with pytest.raises(RuntimeError):
        steps.step()


def test_stopping_between_units_ends_the_work_and_its_thread():
    calls: list[int] = []
    steps = UnitSteps(counting(5, calls), name="attnviz-test-job")
    steps.step()
    steps.step()
    steps.stop()
    assert calls == [1, 2] and steps.finished
    assert not any(thread.name == "attnviz-test-job" for thread in threading.enumerate())
    UnitSteps(counting(5, calls)).stop()  # never started: nothing to end
    assert calls == [1, 2]


def test_what_the_work_raises_reaches_the_caller():
    def failing(progress):
        progress(1, 2)
        raise ValueError("no such pair")

    steps = UnitSteps(failing)
    steps.step()
    with pytest.raises(ValueError, match="no such pair"):
        steps.step()
    assert steps.finished


def test_the_board_loads_neither_qt_nor_torch():
    probe = ("import sys, attnviz.jobs; "
             "print(sorted({m.split('.')[0] for m in sys.modules} & {'torch', 'PySide6', 'pyqtgraph', 'shiboken6'}))")
    output = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True)
    assert output.stdout.strip() == "[]"
