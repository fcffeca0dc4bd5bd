"""A run's first rows are drawn as its steps stream in, while no run is on screen yet (the window's first
heatmap after the first steps, not the last): the view-model's streamed trace is the finished trace's rows so
far, and the window shows it and replaces it with the finished run."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PySide6.QtCore import QObject, Slot

from attnviz.gui.work import run_labels
from attnviz.state import viewmodel
from attnviz.state.session import Selection, ViewOptions
from models.inference.translator import Translator
from models.storage.checkpoint import load_checkpoint
from models.inference.modes import Mode
from tests.helpers import plot_layout, settled
from tests.test_gui import WAIT, run_text

DEMO = Path(__file__).resolve().parents[1] / "resources" / "checkpoints" / "en-es-transformer.safetensors"


def decoded(mode: str = "greedy", **options):
    """A real run of the en-es demo: its labels as the worker sends them, every step, and the results."""
    translator = Translator(load_checkpoint(DEMO), "cpu")
    source = translator.source("The Lord is my shepherd; I shall not want.")
    steps, generator = [], translator.decode(source, mode=mode, **options)
    while True:
        try:
            steps.append(next(generator))
        except StopIteration as stop:
            return run_labels(translator, source), steps, stop.value


@pytest.fixture(scope="module")
def greedy_run():
    return decoded()


@pytest.mark.parametrize("kind", ["dec_self", "cross"])
def test_the_streamed_trace_is_the_finished_trace_so_far(greedy_run, kind):
    labels, steps, results = greedy_run
    final = results[0].trace
    for count in (1, 3, len(steps)):
        streamed = viewmodel.streamed_trace(labels, steps[:count], kind)
        assert streamed.kinds == [kind]
        assert streamed.src_tokens == final.src_tokens and streamed.tgt_tokens == final.tgt_tokens[:count]
        keys = count if kind == "dec_self" else len(final.src_tokens)
        for layer in range(final.layers(kind)):
            np.testing.assert_array_equal(streamed.attention[kind][layer],
                                          final.attention[kind][layer][:, :count, :keys])
        np.testing.assert_array_equal(streamed.masks[kind], final.masks[kind][:count, :keys])


def test_a_streamed_heatmap_has_only_the_rows_decoded_so_far(greedy_run):
    labels, steps, results = greedy_run
    selection = Selection(kind="cross", layer=1, head=2)
    state = viewmodel.streamed_heatmap(labels, steps[:3], selection, options=ViewOptions())
    assert state.matrix.shape == (3, len(labels.source)) and state.step_row == 2
    assert state.query_labels == results[0].trace.tgt_tokens[:3] and "decoding… 3 steps so far" in state.title
    first = viewmodel.streamed_heatmap(labels, steps[:1], selection)
    assert first.matrix.shape == (1, len(labels.source)) and first.title.endswith("decoding… 1 step so far")
    whole = viewmodel.heatmap(results[0].trace, selection)
    np.testing.assert_array_equal(state.matrix, whole.matrix[:3])


def test_what_cannot_be_drawn_before_the_run_ends_waits_for_it(greedy_run):
    labels, steps, _ = greedy_run
    assert viewmodel.streamed_heatmap(None, steps, Selection()) is None  # the labels have not arrived
    assert viewmodel.streamed_heatmap(labels, [], Selection()) is None
    assert viewmodel.streamed_heatmap(labels, steps, Selection(kind="enc_self")) is None  # comes with the result
    assert viewmodel.streamed_heatmap(labels, steps, Selection(head="mean")) is None  # an aggregate
    assert viewmodel.streamed_heatmap(labels, steps, Selection(layer=99)) is None
    many = steps + [steps[-1]] * viewmodel.STREAMED_ROWS
    assert viewmodel.streamed_trace(labels, many, "cross") is None
    beam_labels, beam_steps, _ = decoded("beam", beam=3)
    assert viewmodel.streamed_trace(beam_labels, beam_steps, "cross") is None  # rows follow their parents


def focus_rows(window) -> tuple[int, str]:
    return window.views.focus.matrix.shape[0], window.views.focus.title.text()


class FocusAtSteps(QObject):
    """Each steps batch's count and what the focus view shows once the window has handled it (a QObject on
    the GUI thread: the signal crosses from the worker's)."""

    def __init__(self, window):
        super().__init__()
        self.window, self.seen = window, []
        window.worker.steps.connect(self.note)

    @Slot(int, object)
    def note(self, *_) -> None:
        self.seen.append((len(self.window.session.steps), *focus_rows(self.window)))


def test_the_first_run_draws_its_rows_as_they_arrive(window, qtbot):
    """The model just opened: the focus heatmap appears with the first steps batch, as many rows as steps so
    far, said to be decoding; the finished run then replaces it whole."""
    recorder = FocusAtSteps(window)
    run_text(qtbot, window, "abcabc", max_len=12)
    assert recorder.seen and window.views.focus.image.image is not None
    steps, rows, title = recorder.seen[0]
    assert rows == steps and "decoding…" in title
    assert focus_rows(window)[0] == len(window.session.trace.tgt_tokens)
    assert "decoding…" not in focus_rows(window)[1]


def test_a_run_replacing_one_on_screen_keeps_the_finished_run_until_it_ends(window, qtbot):
    run_text(qtbot, window, "abc", max_len=4)
    shown = focus_rows(window)
    recorder = FocusAtSteps(window)
    run_text(qtbot, window, "hgfedcbahgfedcba", max_len=12)
    assert recorder.seen and all(tuple(seen[1:]) == shown for seen in recorder.seen)


class BeamOnFirstSteps(QObject):
    """At the first steps batch of a run (once the window has drawn it), a beam run of another sentence is
    started; what the focus showed just before and just after."""

    def __init__(self, window):
        super().__init__()
        self.window, self.titles = window, []
        window.worker.steps.connect(self.replace)

    @Slot(int, object)
    def replace(self, *_) -> None:
        if self.titles:
            return
        bar = self.window.views.input_bar
        self.titles.append(focus_rows(self.window)[1])
        bar.mode.setCurrentIndex(bar.mode.findData(Mode.BEAM))
        bar.text.setText("abc")
        self.window.run()
        self.titles.append(focus_rows(self.window)[1])


def test_a_run_replacing_a_streaming_one_does_not_keep_its_rows(window, qtbot):
    """A beam run (which draws when it ends) started while the first run still streams: the focus no longer
    shows the first run's rows, which belong to another sentence."""
    replacing = BeamOnFirstSteps(window)
    bar = window.views.input_bar
    bar.max_len.setValue(12)
    bar.debounce.stop()
    bar.text.setText("hgfedcbahgfedcba")
    window.run()
    qtbot.waitUntil(lambda: len(replacing.titles) == 2, timeout=WAIT)
    assert "decoding…" in replacing.titles[0] and "decoding…" not in replacing.titles[1]
    request = window.session.request
    qtbot.waitUntil(lambda: bool(window.session.results) and window.session.request is request, timeout=WAIT)
    assert window.session.request.settings.mode == Mode.BEAM
    assert focus_rows(window)[0] == len(window.session.trace.tgt_tokens)


def test_a_one_row_map_names_its_axes_without_a_scale(qtbot):
    """A run's first streamed step is a one-row map: its axes hold token positions, never an SI-prefixed scale."""
    from attnviz.gui.views.heatmap import HeatmapView

    view = HeatmapView()
    qtbot.addWidget(view)
    view.resize(600, 400)
    view.show()
    view.show_matrix(np.full((1, 5), 0.2, np.float32), None, ["<s>"], list("abcde"), axis_names=("queries", "keys"))
    settled(qtbot, lambda: plot_layout(view.plot))  # the axes' names as the plot's range and sizes left them
    names = [view.plot.getAxis(side).labelString() for side in ("left", "bottom")]
    assert "queries" in names[0] and "keys" in names[1] and not any("(x" in name for name in names)
