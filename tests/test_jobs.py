"""The job board and a long job's units (attnviz/state/jobs.py), without Qt: which job of each kind is current, why
an overtaken one stopped, and a long job's generator stepped one unit at a time."""

from __future__ import annotations

import subprocess
import sys

import pytest

from attnviz.state.jobs import NEWER, WINDOW_CLOSED, JobBoard, Stopped, UnitSteps


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


def test_a_pruning_curve_is_overtaken_by_a_newer_curve_a_newer_importance_or_a_model_job():
    """The curve follows the ranking of the importance it started from: scoring heads again makes it stale."""
    board = JobBoard()
    board.post("importance", 1)
    board.post("prune", 2)
    assert board.is_current("prune", 2) and board.is_current("importance", 1)  # the curve leaves its ranking be
    board.post("prune", 3)
    assert board.overtaken("prune", 2) == Stopped("a newer pruning curve was asked for", by=3)
    board.post("importance", 4)
    assert board.overtaken("prune", 3) == Stopped("a newer head importance job was asked for", by=4)
    board.post("prune", 5)
    board.post("model", 6, because="the model moved to cpu")
    assert board.overtaken("prune", 5) == Stopped("the model moved to cpu", by=6)


def test_closing_is_a_state_of_its_own_that_stops_every_job():
    board = JobBoard()
    for kind, job in (("run", 1), ("model", 2), ("partner", 3), ("stats", 4)):
        board.post(kind, job)
    board.close()
    assert board.closing
    assert {board.overtaken(kind, job) for kind, job in (("run", 1), ("model", 2), ("partner", 3), ("stats", 4))} \
        == {Stopped(WINDOW_CLOSED)}
    assert Stopped(WINDOW_CLOSED).by == 0


def counting(units: int, calls: list, closed: list | None = None):
    """A job of ``units`` units, as models/analysis/steps.py writes them: a generator yielding its progress."""
    def steps():
        try:
            for done in range(1, units + 1):
                calls.append(done)
                yield done, units
        except GeneratorExit:
            if closed is not None:
                closed.append(len(calls))
            raise
        return f"all {units}"
    return steps


def test_a_job_runs_one_unit_per_step_on_the_callers_thread_and_nothing_between():
    calls: list[int] = []
    steps = UnitSteps(counting(3, calls))
    assert calls == []  # nothing runs before the first step
    assert steps.step().value == (1, 3) and calls == [1]
    assert calls == [1]  # between steps nothing runs the job
    assert [steps.step().value for _ in range(2)] == [(2, 3), (3, 3)]
    last = steps.step()
    assert last.done and last.value == "all 3" and steps.finished
    with pytest.raises(RuntimeError):
        steps.step()


def test_stopping_between_units_closes_the_job():
    calls: list[int] = []
    closed: list[int] = []
    steps = UnitSteps(counting(5, calls, closed))
    steps.step()
    steps.step()
    steps.stop()
    assert calls == [1, 2] and closed == [2] and steps.finished
    UnitSteps(counting(5, calls)).stop()  # never started: nothing to end
    assert calls == [1, 2]


def test_what_the_job_raises_reaches_the_caller_even_while_it_is_made():
    def failing():
        yield 1, 2
        raise ValueError("no such pair")

    steps = UnitSteps(failing)
    steps.step()
    with pytest.raises(ValueError, match="no such pair"):
        steps.step()
    assert steps.finished

    def unreadable():
        raise FileNotFoundError("pairs.tsv")

    steps = UnitSteps(unreadable)
    with pytest.raises(FileNotFoundError):
        steps.step()
    assert steps.finished


def test_the_board_loads_neither_qt_nor_torch():
    probe = ("import sys, attnviz.state.jobs; "
             "print(sorted({m.split('.')[0] for m in sys.modules} & {'torch', 'PySide6', 'pyqtgraph', 'shiboken6'}))")
    output = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True)
    assert output.stdout.strip() == "[]"


def test_a_job_asked_of_a_model_the_worker_no_longer_holds_is_stale_whatever_the_ids_order():
    """A run finished after another model's open was asked for: its contributions job has the newer id, yet it
    explains the old model's results; once the worker holds the new model it is stale. A model job that fails
    (the old model stays held) leaves a later job of the old model current."""
    board = JobBoard()
    board.hold("model", board.new("model"))  # model 1 opened
    run = board.new("run")
    board.new("model")  # model 3 asked for: the run is still decoding on model 1
    late = board.new("contributions", of={"model": 1})  # the finished run's job: a newer id than the open's
    assert board.is_current("contributions", late)  # the worker still holds model 1
    board.hold("model", 3)
    assert board.overtaken("contributions", late) == Stopped("another model was opened", by=3)
    board.hold("model", 1)  # say model 3 had failed to open: model 1 stays
    assert board.is_current("contributions", late) and board.is_current("run", run)
    board.hold("partner", board.new("partner"))
    for_b = board.new("partner_contributions", of={"model": 1, "partner": 5})
    assert board.is_current("partner_contributions", for_b)
    board.hold("partner", 0)  # stopped comparing: model B let go
    assert board.overtaken("partner_contributions", for_b).reason == "another model B was asked for"


def test_the_session_owns_the_board_the_worker_reads():
    from attnviz.state.session import RunSettings, Session

    session = Session()
    request = session.new_request(RunSettings(text="a"))
    assert session.jobs.newest("run") == request.id
    stats = session.new_job("stats")
    model = session.new_model_job("the model moved to cpu")
    assert session.jobs.overtaken("stats", stats).reason == "the model moved to cpu"
    assert session.new_job("stats") > model == session.model_job == session.jobs.newest("model")
