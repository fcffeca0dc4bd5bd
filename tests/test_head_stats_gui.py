"""The Head statistics view: its state computed without Qt, and the dock driven like a user would, with a real
offscreen window, a real checkpoint and a real corpus file (View → Corpus head statistics…)."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from PySide6.QtCore import QPoint, QPointF, Qt

from attnviz.state import stats_view
from models.storage.checkpoint import load_checkpoint
from models.analysis.head_stats import corpus_head_stats
from models.inference.translator import Translator
from tests.test_gui import WAIT
from tests.helpers import write_pairs

PAIRS = [("abc", "ba"), ("a", "hgfedcba"), ("abcdefgh abc", "c"), ("ab", "ab"), ("hh a", "a h"), ("bad", "dab")]


@pytest.fixture
def corpus(tmp_path):
    return write_pairs(tmp_path / "pairs.tsv", PAIRS)


def test_the_state_holds_one_panel_per_statistic(random_checkpoint):
    stats = corpus_head_stats(Translator(load_checkpoint(random_checkpoint), "cpu"), PAIRS, batch_size=4)
    state = stats_view.head_stats_state(stats, "reference", "cross", (1, 2))
    # padding is 0: left out
    assert [panel.name for panel in state.panels] == ["entropy", "confidence", "eos", "diagonal"]
    assert (state.layers, state.heads, state.selected) == (2, 4, (1, 2))
    np.testing.assert_array_equal(state.panels[3].matrix, stats.runs["reference"].mean("cross", "diagonal"))
    assert state.panels[1].levels == (0.0, 1.0)
    assert state.panels[0].levels[1] == pytest.approx(state.panels[0].matrix.max())
    assert stats_view.head_stats_state(stats, "decoded", "nothing").kind == "enc_self"  # falls back to what exists
    typical = stats_view.typical_sentences(stats, "reference", "cross", 1, 2, count=2)
    assert len(typical.most) == len(typical.least) == 2 and "layer 1, head 2" in typical.title
    farthest = typical.least[0]
    assert (farthest.source, farthest.target) == PAIRS[farthest.index]
    entropies = stats.runs["reference"].per_sentence("cross", "entropy")
    assert farthest.value == pytest.approx(entropies[farthest.index, 1, 2])


def test_the_state_module_loads_neither_qt_nor_torch():
    probe = ("import sys, attnviz.state.stats_view; "
             "print(sorted({m.split('.')[0] for m in sys.modules} & {'torch', 'PySide6', 'pyqtgraph', 'shiboken6'}))")
    output = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True)
    assert output.stdout.strip() == "[]"


def cell_position(view, panel: int, layer: int, head: int) -> QPoint:
    plot = view.plots[panel][0]
    return view.panels.mapFromScene(plot.vb.mapViewToScene(QPointF(head + 0.5, layer + 0.5)))


def test_clicking_a_head_lists_its_sentences_and_double_clicking_runs_one(qtbot, window, corpus):  # noqa: F811
    window.stats.open(str(corpus))
    panel = window.head_stats
    qtbot.waitUntil(lambda: panel.stats is not None, timeout=WAIT)
    view = panel.view
    assert window.head_stats.dock.isVisible()
    titles = [plot.titleLabel.text.split(" ")[0] for plot, _, _ in view.plots]
    assert titles == ["entropy", "confidence", "eos", "diagonal"]
    np.testing.assert_allclose(view.plots[3][1].image, panel.stats.runs["reference"].mean("cross", "diagonal"),
                               atol=1e-6)
    assert "6 sentences" in view.summary.text()

    qtbot.waitExposed(view.panels)
    qtbot.mouseClick(view.panels.viewport(), Qt.MouseButton.LeftButton, pos=cell_position(view, 2, 1, 2))
    qtbot.waitUntil(lambda: panel.head == (1, 2), timeout=WAIT)
    assert "layer 1, head 2" in view.head_title.text()
    texts = [view.sentences.item(row).text() for row in range(view.sentences.count())]
    assert texts[0] == "Most typical" and "Least typical" in texts
    assert len(texts) == 2 + 2 * 5
    assert all(outline.isVisible() and outline.rect().topLeft().toTuple() == (2.0, 1.0) for _, _, outline in view.plots)

    item = view.sentences.item(texts.index("Least typical") + 1)
    source = item.data(Qt.ItemDataRole.UserRole)
    assert item.text().startswith("#") and source in [s for s, _ in PAIRS]
    view.sentences.itemDoubleClicked.emit(item)
    qtbot.waitUntil(lambda: window.session.request is not None and window.session.request.settings.text == source
                    and bool(window.session.results), timeout=WAIT)
    assert window.views.input_bar.text_value() == source

    view.kind.setCurrentIndex(view.kind.findData("dec_self"))
    assert [plot.titleLabel.text.split(" ")[0] for plot, _, _ in view.plots] == \
        ["entropy", "confidence", "bos", "same", "previous"]
    assert panel.head is None and view.sentences.count() == 0


def test_a_bad_corpus_is_said_in_the_view(qtbot, window, tmp_path):  # noqa: F811
    path = tmp_path / "empty.tsv"
    path.write_text("\n", encoding="utf-8")
    window.stats.open(str(path))
    view = window.head_stats.view
    qtbot.waitUntil(lambda: "No head statistics" in view.summary.text(), timeout=WAIT)
    assert "no sentence pairs" in view.summary.text() and window.head_stats.stats is None


def test_the_worker_answers_only_the_newest_job_of_the_open_model(qtbot, random_checkpoint, corpus):
    from attnviz.state.jobs import Answer, Stopped
    from attnviz.gui.worker import ModelWorker

    worker = ModelWorker()  # lives on this thread: its units are queued on this thread's event loop
    worker.translator = Translator(load_checkpoint(random_checkpoint), "cpu")
    answers = []
    worker.head_stats_ready.connect(answers.append)
    worker.jobs.post("model", 1)
    worker.jobs.post("stats", 2)
    worker.head_stats(2, str(corpus))
    qtbot.waitUntil(lambda: len(answers) == 1, timeout=WAIT)
    assert answers[0].job == 2 and answers[0].value.pairs == PAIRS
    worker.jobs.post("stats", 3)
    worker.head_stats(2, str(corpus))  # a newer statistics job was asked for
    worker.jobs.post("model", 4, because="the model moved to cpu")
    worker.head_stats(3, str(corpus))  # a newer model job was asked for
    assert answers[1:] == [Answer(2, stopped=Stopped("newer head statistics were asked for", by=3)),
                           Answer(3, stopped=Stopped("the model moved to cpu", by=4))]
    worker.jobs.post("stats", 5)
    worker.head_stats(5, str(corpus.parent / "missing.tsv"))
    qtbot.waitUntil(lambda: len(answers) == 4, timeout=WAIT)
    assert answers[3].job == 5 and "no such file" in answers[3].error and answers[3].value is None
