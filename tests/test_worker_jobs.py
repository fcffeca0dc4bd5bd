"""Long jobs on the real worker thread, with a real window on a real demo: what is asked for during a head
importance job (a sentence run, a device move, another model, a second job, closing the window) is handled
between two heads, never inside one, and the Head importance panel always ends with an outcome: the scores,
or why the job stopped, never "Scored k of N heads…" for good."""

from __future__ import annotations

import re
import threading
import time
import traceback
from pathlib import Path

from PySide6.QtCore import Qt

from attnviz.state.demos import demo_reference_pairs
from attnviz.state.jobs import Answer, Stopped
from tests.helpers import worker_idle
from tests.test_gui import WAIT
from tests.test_gui_compare import open_demo

ROOT = Path(__file__).resolve().parents[1]
DEMO = "piglatin-gru-transformer-decoder"  # 6 heads, about a third of a second each on one core
OTHER = "piglatin-gru-additive"
JOB_WAIT = 60_000


def start_importance(qtbot, window, pairs=None) -> list[tuple[int, int]]:
    """Open the demo, ask for its head importance, and return once its first head is scored (the progress
    seen so far, appended to as more comes)."""
    open_demo(qtbot, window, DEMO)
    progress: list[tuple[int, int]] = []
    def progressed(job: int, done: int, total: int) -> None:  # the NLL job that choosing a method stops says nothing
        if job == window.importance_panel.job:
            progress.append((done, total))

    window.worker_thread.worker.importance_progress.connect(progressed)
    window.importance.open(pairs or demo_reference_pairs(DEMO))
    window.importance_panel.choose_method("decode")  # one head per unit (the NLL scores these 6 in two passes)
    qtbot.waitUntil(lambda: bool(progress), timeout=JOB_WAIT)  # the stopped job's answer came before this
    return progress


def summary(window) -> str:
    return window.importance_panel.view.summary.text()


def no_job_thread_left() -> bool:
    return not any(thread.name.startswith("attnviz-importance") for thread in threading.enumerate())


def test_nothing_in_the_worker_or_the_core_processes_events():
    """A job that processed the thread's events ran model loads, runs and moves nested inside itself."""
    sources = [ROOT / "attnviz" / "gui" / "worker.py", ROOT / "attnviz" / "state" / "jobs.py",
               *sorted((ROOT / "models").rglob("*.py"))]
    offenders = [str(path.relative_to(ROOT)) for path in sources
                 if re.search(r"processEvents|QEventLoop|sendPostedEvents", path.read_text(encoding="utf-8"))]
    assert not offenders


def test_a_run_asked_for_during_a_job_is_answered_between_two_heads(qtbot, window):
    progress = start_importance(qtbot, window)
    worker = window.worker_thread.worker
    events: list[str] = []
    nested: list[list[str]] = []

    def run_finished(*_):  # on the worker thread, as the run ends: what is it running inside?
        events.append("run")
        nested.append([frame.name for frame in traceback.extract_stack()
                       if frame.name in ("head_importance", "_step_long_job", "head_stats")])

    direct = Qt.ConnectionType.DirectConnection  # in the worker thread's own order
    worker.finished.connect(run_finished, direct)
    worker.importance_progress.connect(lambda *_: events.append("head"), direct)
    worker.importance_ready.connect(lambda *_: events.append("importance"), direct)
    window.views.input_bar.text.setText("green apple")
    window.run()
    qtbot.waitUntil(lambda: window.importance_panel.importance is not None, timeout=JOB_WAIT)
    assert nested == [[]]  # the run was answered from the thread's queue, not from inside a head
    after_the_run = events[events.index("run"):]
    assert "head" in after_the_run and after_the_run[-1] == "importance"  # the job went on after it
    assert progress[-1] == (6, 6) and window.session.request.settings.text == "green apple" and window.session.results
    assert "Scored" not in summary(window) and window.importance_panel.view.plots
    assert no_job_thread_left()


def test_a_device_switch_during_a_job_stops_it_and_the_panel_says_why(qtbot, window):
    start_importance(qtbot, window)
    worker = window.worker_thread.worker
    moved = []
    worker.device_changed.connect(lambda job, info: moved.append(info.device))
    window.views.model_panel.device_chosen.emit("cpu")  # the user picks a device in the Model panel
    qtbot.waitUntil(lambda: "Stopped" in summary(window), timeout=JOB_WAIT)
    assert summary(window) == "Stopped: the model moved to cpu. View → Head importance… scores a corpus again."
    qtbot.waitUntil(lambda: moved == ["cpu"], timeout=WAIT)
    assert window.importance_panel.importance is None and not worker.long_jobs and no_job_thread_left()
    worker_idle(qtbot, window, timeout=WAIT)  # no head is scored any more: nothing overwrites the outcome
    assert summary(window).startswith("Stopped: the model moved to cpu.")

    window.importance.open(demo_reference_pairs(DEMO)[:4])  # asked for again: it scores on the new device
    qtbot.waitUntil(lambda: window.importance_panel.importance is not None, timeout=JOB_WAIT)
    assert window.importance_panel.importance.examples == 4


def test_opening_another_model_during_a_job_stops_it_and_the_panel_says_so(qtbot, window):
    start_importance(qtbot, window)
    answers = []
    window.worker_thread.worker.importance_ready.connect(answers.append)
    open_demo(qtbot, window, OTHER)
    assert [answer.stopped for answer in answers] == [Stopped("another model was opened", by=window.session.model_job)]
    assert summary(window) == "Stopped: another model was opened. View → Head importance… scores a corpus with it."
    assert window.importance_panel.importance is None and no_job_thread_left()


def test_a_second_job_during_a_job_stops_the_first_and_shows_its_own_scores(qtbot, window):
    pairs = demo_reference_pairs(DEMO)
    start_importance(qtbot, window, pairs)
    first = window.importance_panel.job
    answers = []
    window.worker_thread.worker.importance_ready.connect(answers.append)
    window.importance.open(pairs[:3])
    second = window.importance_panel.job
    qtbot.waitUntil(lambda: window.importance_panel.importance is not None, timeout=JOB_WAIT)
    assert answers[0] == Answer(first, stopped=Stopped("a newer head importance job was asked for", by=second))
    assert answers[1].job == second and window.importance_panel.importance.examples == 3
    assert "3 sentences;" in summary(window)


def test_closing_the_window_during_a_job_ends_it_within_a_head(qtbot, window):
    start_importance(qtbot, window)
    started = time.monotonic()
    window.close()
    assert time.monotonic() - started < 5  # one head at most, never the whole job
    assert not window.worker_thread.thread.isRunning() and no_job_thread_left()
