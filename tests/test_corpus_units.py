"""The corpus jobs that decode again (head importance by chrF / exact match, their pruning curves) run one batch
per unit: on the real worker thread of a real window on a demo, a sentence run asked for during such a job is
answered after one batch, not after a whole corpus decode; the units change no score."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from PySide6.QtCore import Qt

from attnviz.gui import work
from attnviz.state.demos import demo_reference_pairs
from models.analysis.importance import head_importance, head_importance_steps
from models.analysis.pruning import prune_curve_steps, prune_curves
from models.inference.batch_sizes import Batching, length_batches
from tests.test_gui_compare import open_demo
from tests.test_importance_batched import PAIRS, tiny_translator
from tests.test_worker_jobs import DEMO, JOB_WAIT

TWO = Batching(size=2)


def stepped(steps) -> tuple[list[tuple], object]:
    units = []
    while True:
        try:
            units.append(next(steps))
        except StopIteration as end:
            return units, end.value


def test_each_batch_of_each_decode_is_a_unit_and_the_scores_are_unchanged():
    translator = tiny_translator("gru-transformer-decoder")
    batches = len(length_batches([len(source) for source, _ in PAIRS], TWO))
    units, stepped_importance = stepped(head_importance_steps(translator, PAIRS, metric="chrf", batching=TWO))
    driven = head_importance(translator, PAIRS, metric="chrf")  # the CLI's path: the default batches, driven
    heads = sum(table.size for table in driven.scores.values())
    assert batches == 3 and len(units) == (heads + 1) * batches + heads  # every batch, then each head's score
    assert units[:batches] == [(0, heads, "every head on")] * batches  # the baseline's batches: no head done yet
    done = [unit[0] for unit in units]
    assert done == sorted(done) and done[-1] == heads and {unit[1] for unit in units} == {heads}
    assert stepped_importance.baseline == driven.baseline
    for kind, table in driven.scores.items():
        np.testing.assert_array_equal(stepped_importance.scores[kind], table)


def test_a_decoded_pruning_curve_steps_one_batch_at_a_time():
    translator = tiny_translator("gru-transformer-decoder")
    importance = head_importance(translator, PAIRS[:4], metric="exact")
    units, curves = stepped(prune_curve_steps(translator, PAIRS[:4], importance, seed=1, batching=TWO))
    points = 3 * (sum(table.size for table in importance.scores.values()) + 1)
    assert len(units) == points * 2 + points  # two batches a point, then the point
    driven = prune_curves(translator, PAIRS[:4], importance, seed=1)
    for order, curve in driven.curves.items():
        np.testing.assert_array_equal(curves.curves[order], curve)


@pytest.fixture
def batches_of_two(monkeypatch):
    monkeypatch.setattr(work, "CORPUS_BATCHING", TWO)  # the window's batches, small: many units per decode


def test_a_run_asked_for_during_a_chrf_importance_job_waits_one_batch(qtbot, window, batches_of_two):
    pairs = demo_reference_pairs(DEMO)[:8]  # four batches of two per decode
    open_demo(qtbot, window, DEMO)
    worker = window.worker_thread.worker
    events: list[object] = []
    first_unit, run_posted = threading.Event(), threading.Event()

    def unit_done(job: int, done: int, total: int) -> None:  # on the worker thread, after each unit
        if job != window.importance_panel.job:
            return  # the NLL job that choosing a method stops
        events.append(done)
        if not first_unit.is_set():
            first_unit.set()
            run_posted.wait(timeout=JOB_WAIT / 1000)  # the run is asked for while this unit ends

    direct = Qt.ConnectionType.DirectConnection  # in the worker thread's own order
    worker.importance_progress.connect(unit_done, direct)
    worker.finished.connect(lambda *_: events.append("run"), direct)
    window.importance.open(pairs)
    window.importance_panel.choose_method("decode")
    qtbot.waitUntil(first_unit.is_set, timeout=JOB_WAIT)
    window.views.input_bar.text.setText("green apple")
    window.run()
    run_posted.set()
    qtbot.waitUntil(lambda: window.importance_panel.importance is not None, timeout=JOB_WAIT)

    before_the_run = events[:events.index("run")]
    assert before_the_run == [0]  # one batch of the baseline's decode, not a head (nor the baseline) scored
    units = [event for event in events if event != "run"]
    assert len(units) == 7 * 4 + 6 and units[-1] == 6  # 6 heads and the baseline, four batches each
    assert window.session.request.settings.text == "green apple" and window.session.results


def test_a_window_of_inputs_refused_before_decoding_keeps_their_places():
    """A window of nothing but refused inputs (None) hands on a None for each, so the later windows' results stay
    beside their own inputs."""
    from models.inference.corpus import corpus_batches, decode_corpus

    translator = tiny_translator("gru-transformer-decoder")
    source = translator.source("abc")
    results = list(decode_corpus(translator, [None, None, source], batching=Batching(window=2)))
    assert [result is None for result in results] == [True, True, False]
    assert results[2][0].token_ids == translator.decode_batch([source], mode="greedy")[0][0].token_ids
    assert list(corpus_batches(translator, [None], batching=TWO)) == [[None]]
