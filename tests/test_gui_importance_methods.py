"""The Head importance panel's methods, on a real demo and the real worker thread: the NLL of the references
with each head off (the default), its gradient estimate, and chrF / exact match from decoding again each give
the table the core's own function gives on the same pairs; choosing a method in the panel scores the corpus
again; the NLL job reports each pass as it finishes and still stops, saying why, when the device changes."""

from __future__ import annotations

import time

import numpy as np
import pytest
from PySide6.QtWidgets import QApplication

from attnviz.state import stats_view
from attnviz.state.demos import demo_path, demo_reference_pairs
from attnviz.gui.features.importance import PAIRS_LIMITS
from attnviz.gui.work import IMPORTANCE_PASS_TOKENS
from models.storage.checkpoint import load_checkpoint
from models.analysis.importance import ablation_importance, gradient_importance, head_importance
from models.inference.translator import Translator
from tests.test_gui_compare import open_demo

DEMO = "piglatin-gru-transformer-decoder"  # 6 heads; its 16 examples take two NLL passes in the window
JOB_SECONDS = 60


@pytest.fixture(scope="module")
def translator() -> Translator:
    return Translator(load_checkpoint(demo_path(DEMO)), "cpu")


def wait_for(condition) -> None:
    """Sleeping lets the worker thread have the GIL (QTest.qWait keeps it, see docs/ARCHITECTURE.md)."""
    deadline = time.monotonic() + JOB_SECONDS
    while not condition():
        assert time.monotonic() < deadline, "the job gave no answer in time"
        time.sleep(0.01)
        QApplication.processEvents()


def scored(window, method: str | None = None):
    """Ask for the demo's head importance (by ``method``, chosen in the panel after it opens) and wait for it."""
    window.importance.open(demo_reference_pairs(DEMO))
    panel = window.importance_panel
    if method is not None:
        panel.view.run.setCurrentIndex(panel.view.run.findData(method))  # the user picks it in the Method combo
    wait_for(lambda: panel.importance is not None)
    return panel


def test_the_default_is_the_nll_with_each_head_off_reported_pass_by_pass(qtbot, window, translator):
    open_demo(qtbot, window, DEMO)
    progress: list[tuple[int, int]] = []
    window.worker_thread.worker.importance_progress.connect(lambda _job, done, total: progress.append((done, total)))
    panel = scored(window)
    pairs = demo_reference_pairs(DEMO)[:PAIRS_LIMITS["nll"]]
    expected = ablation_importance(translator, pairs, tokens_per_pass=IMPORTANCE_PASS_TOKENS)
    importance = panel.importance
    assert (importance.metric, importance.method, importance.examples) == ("nll", "ablation", len(pairs))
    assert importance.baseline == pytest.approx(expected.baseline, rel=1e-6)
    for kind, table in expected.drops.items():
        np.testing.assert_allclose(importance.drops[kind], table, rtol=1e-5, atol=1e-7)
    assert len(progress) > 1 and progress[-1] == (6, 6)  # one report per pass, as each finished
    assert [done for done, _ in progress] == sorted(done for done, _ in progress)
    view = panel.view
    assert view.run_label.text() == "Method:" and view.run.currentData() == "nll"
    assert view.run.currentText() == "NLL, each head off"
    assert view.summary.text().startswith(f"NLL, each head off: {len(pairs)} sentences; NLL (nats/token)")
    np.testing.assert_array_equal(view.plots[0][1].image, importance.drops[view.kind.currentData()].astype(np.float32))


def test_choosing_the_gradient_scores_again_and_shows_michels_table(qtbot, window, translator):
    open_demo(qtbot, window, DEMO)
    panel = scored(window, "gradient")
    expected = gradient_importance(translator, demo_reference_pairs(DEMO)[:PAIRS_LIMITS["gradient"]])
    importance = panel.importance
    assert importance.method == "gradient"
    for kind in expected.scores:
        np.testing.assert_allclose(importance.drops[kind], expected.drops[kind], rtol=1e-5, atol=1e-7)
        np.testing.assert_allclose(importance.magnitudes[kind], expected.magnitudes[kind], rtol=1e-5, atol=1e-7)
    kind = panel.view.kind.currentData()
    state = stats_view.importance_state(importance, kind)
    assert [panel_.name for panel_ in state.panels] == ["est. drop", "|∂L/∂ξ|"]
    np.testing.assert_array_equal(panel.view.plots[1][1].image, importance.magnitudes[kind].astype(np.float32))
    assert panel.view.summary.text().startswith("NLL, gradient estimate:")


def test_the_decoding_method_still_scores_exact_match(qtbot, window, translator):
    open_demo(qtbot, window, DEMO)
    panel = scored(window, "decode")
    pairs = demo_reference_pairs(DEMO)[:PAIRS_LIMITS["decode"]]
    expected = head_importance(translator, pairs)
    assert (panel.importance.metric, panel.importance.examples) == ("exact", len(pairs))
    for kind, table in expected.scores.items():
        np.testing.assert_array_equal(panel.importance.scores[kind], table)
    assert panel.view.summary.text().startswith("chrF / exact match, decoding again:")
    left = panel.view.plots[1][1]
    assert tuple(left.getLevels()) == (0.0, 100.0)


def test_a_device_switch_during_an_nll_job_stops_it_and_says_why(qtbot, window):
    open_demo(qtbot, window, DEMO)
    progress: list[int] = []
    window.worker_thread.worker.importance_progress.connect(lambda _job, done, _total: progress.append(done))
    window.importance.open(demo_reference_pairs(DEMO))
    panel = window.importance_panel
    wait_for(lambda: bool(progress))  # the first pass has finished, the second is under way
    window.views.model_panel.device_chosen.emit("cpu")
    wait_for(lambda: "Stopped" in panel.view.summary.text())
    assert panel.view.summary.text() == ("Stopped: the model moved to cpu. "
                                         "View → Head importance… scores a corpus again.")
    assert panel.importance is None and not window.worker_thread.worker.long_jobs
