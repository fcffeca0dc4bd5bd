"""The Head importance panel's pruning curve, on a real demo and the real worker thread: once heads are scored,
"Pruning curve" runs the curves as a job of its own whose plotted values are the core's ``prune_curves`` on the
same pairs; a newer curve stops an older one, a device switch stops it with a line the panel keeps, and Export…
writes the CLI's figure."""

from __future__ import annotations

import numpy as np
import pytest

from attnviz.gui.features.importance import PRUNE_SEED
from attnviz.gui.work import IMPORTANCE_PASS_TOKENS
from attnviz.state.demos import demo_reference_pairs
from attnviz.state.jobs import Answer, Stopped
from models.analysis.pruning import prune_curves, prune_orders
from tests.test_gui_compare import open_demo
from tests.test_gui_importance_methods import DEMO, scored, translator, wait_for  # noqa: F401 (a fixture)


def test_the_curve_plots_the_cores_curves_of_the_scored_ranking(qtbot, window, translator, tmp_path):  # noqa: F811
    open_demo(qtbot, window, DEMO)
    panel = scored(window)
    view = panel.curve_view
    assert view.button.isEnabled() and not view.export.isEnabled() and not view.plot.isVisible()
    progress: list[tuple[int, int]] = []
    window.worker_thread.worker.prune_progress.connect(lambda _job, done, total: progress.append((done, total)))
    view.button.click()
    wait_for(lambda: panel.curves is not None)
    pairs = demo_reference_pairs(DEMO)[:panel.importance.examples]
    expected = prune_curves(translator, pairs, panel.importance, seed=PRUNE_SEED,
                            tokens_per_pass=IMPORTANCE_PASS_TOKENS)
    assert panel.curves.orders == expected.orders
    for order, curve in expected.curves.items():
        xs, ys = view.curves[order].getData()
        np.testing.assert_array_equal(xs, np.arange(7))  # 6 heads: none off … all off
        np.testing.assert_allclose(ys, curve, rtol=1e-6)
    assert len(progress) > 3 and progress[-1] == (21, 21)  # one report per pass, three orders of 7 points
    assert view.plot.isVisible() and view.export.isEnabled()
    assert view.plot.getAxis("left").labelText == "NLL (nats/token)"
    assert view.plot.getAxis("bottom").labelText == "heads switched off"
    assert "random order (seed 0)" in view.readout.text() and "#d62728" in view.readout.text()
    view._on_move(view.plot.plotItem.vb.mapViewToScene(view.plot.plotItem.vb.viewRect().center()))
    assert "3 of 6 heads off" in view.readout.text()
    assert f"{expected.curves['decreasing'][3]:.4g}" in view.readout.text()
    window.importance.export_curve(str(tmp_path / "curve.svg"))
    svg = (tmp_path / "curve.svg").read_text(encoding="utf-8")
    assert svg.count("<polyline") == 3 and f"{DEMO} (random order: seed 0)" in svg
    window.importance.export_curve(str(tmp_path / "curve.png"))
    assert (tmp_path / "curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_newer_curve_stops_the_older_and_a_device_switch_stops_it_visibly(qtbot, window):
    open_demo(qtbot, window, DEMO)
    panel = scored(window)
    worker = window.worker_thread.worker
    answers, progress = [], []
    worker.prune_ready.connect(answers.append)
    worker.prune_progress.connect(lambda job, _done, _total: progress.append(job))
    panel.curve_view.button.click()
    first = panel.curve_job
    wait_for(lambda: first in progress)  # its first pass has finished, the next is queued
    panel.curve_view.seed.setValue(5)
    panel.curve_view.button.click()
    second = panel.curve_job
    wait_for(lambda: panel.curves is not None)
    assert Answer(first, stopped=Stopped("a newer pruning curve was asked for", by=second)) in answers
    assert panel.curves.seed == 5 and panel.curves.orders == prune_orders(panel.importance, seed=5)
    assert "random order (seed 5)" in panel.curve_view.readout.text()
    assert [answer.job for answer in answers if answer.stopped is None] == [second]
    panel.curve_view.button.click()
    third = panel.curve_job
    wait_for(lambda: third in progress)
    window.views.model_panel.device_chosen.emit("cpu")
    wait_for(lambda: "Stopped" in panel.curve_view.message.text())
    assert panel.curve_view.message.text() == "Stopped: the model moved to cpu. Pruning curve asks again."
    assert panel.curves is None and not panel.curve_view.plot.isVisible() and "prune" not in worker.long_jobs
    assert panel.curve_view.button.isEnabled()  # the ranking is still shown: the curve can be asked for again


@pytest.mark.parametrize("method", ["decode"])
def test_asking_for_importance_again_stops_the_curve_and_waits_for_the_new_ranking(qtbot, window, method):
    open_demo(qtbot, window, DEMO)
    panel = scored(window)
    answers, progress = [], []
    window.worker_thread.worker.prune_ready.connect(answers.append)
    window.worker_thread.worker.prune_progress.connect(lambda job, _done, _total: progress.append(job))
    panel.curve_view.button.click()
    wait_for(lambda: bool(progress))
    panel.view.run.setCurrentIndex(panel.view.run.findData(method))  # scores the corpus again
    wait_for(lambda: bool(answers))
    assert answers[0].stopped.reason == "a newer head importance job was asked for"
    assert not panel.curve_view.button.isEnabled()  # no curve of a ranking being replaced
    wait_for(lambda: panel.importance is not None and panel.importance.metric == "exact")
    assert panel.curve_view.button.isEnabled() and panel.curves is None
