"""A soak of the real window (offscreen) on the bundled demos: seeded random user actions — typing sentences and
Enter, greedy / beam / forced, the Show methods, layer / head / step / hypothesis navigation, opening other demos,
comparing and stopping, switching heads off, exports — some at once, some after the window settled.

It fails on any exception (in a slot, ``sys.excepthook``, ``threading.excepthook``, or a traceback the worker
printed while saying an internal error), any Qt warning, the GUI thread held over ``HANG_SECONDS``, a view still
"Computing…", "model B is running…" or busy once the worker is idle, and a stale result: a shown output that differs
from the model's own ``Translator`` answer for the shown input (model B's too, while comparing).

Bounded for the suite (``ATTNVIZ_SOAK_SECONDS``, default 45 s of actions; ``ATTNVIZ_SOAK_SEED``, default 0): a
longer soak is ``ATTNVIZ_SOAK_SECONDS=1200 python -m pytest tests/test_soak.py``. Every failure names the seed and
the actions so far, so it can be replayed.
"""

from __future__ import annotations

import os
import random
import sys
import threading
import time
from pathlib import Path

import pytest
from PySide6.QtCore import Qt, QTimer

from attnviz.state.demos import demo_path
from models.inference.decoding import finish
from models.inference.modes import Mode
from models.inference.translator import Translator
from models.storage.checkpoint import load_checkpoint

SOAK_SECONDS = float(os.environ.get("ATTNVIZ_SOAK_SECONDS", "45"))
SOAK_SEED = int(os.environ.get("ATTNVIZ_SOAK_SEED", "0"))
HANG_SECONDS = 5.0  # the GUI thread never holds longer (a heartbeat timer measures its gaps)
SETTLE_MS = 120_000  # what the worker may take to finish what was asked: well under a second for most of it, but
# integrated gradients of a 58-character sentence on a character GRU (model B) adapt for about 50 s on 2 cores
DEMOS = ("en-es-transformer", "piglatin-gru-transformer-decoder", "piglatin-gru-no-attention",
         "piglatin-gru-additive", "en-es-transformer-postln")
SENTENCES = ("Jesus wept.", "And God said, let there be light.", "team", "string", "hello world", "apple",
             "In the beginning was the word, and the word was with God.", "", "   ", "Ωμέγα ☃ 42",
             "The old man who lives in the small house near the river gave his grandson a red bicycle.")
SHOW = ("weights", "value_norms", "alti", "input_x_gradient", "value_zeroing", "integrated_gradients")
WORKING = ("Computing", "is running…", "Opening ")


class Soak:
    """The window, the seeded choices and what went wrong so far."""

    def __init__(self, qtbot, window, tmp_path: Path, seed: int):
        self.qtbot, self.window, self.tmp = qtbot, window, tmp_path
        self.random = random.Random(seed)
        self.seed = seed
        self.actions: list[str] = []
        self.exceptions: list[str] = []
        self.truth: dict[str, Translator] = {}  # checkpoint path → the model's own translator (this thread)
        self.beats: list[float] = [time.monotonic()]
        self.heart = QTimer()
        self.heart.setInterval(50)
        self.heart.timeout.connect(lambda: self.beats.append(time.monotonic()))

    def where(self) -> str:
        return f"seed {self.seed}, after: {' | '.join(self.actions[-12:])}"

    # --- waiting ----------------------------------------------------------------------------------------
    def worker_idle(self) -> None:
        """Wait until the worker thread has done everything queued so far, and its answers have reached here."""
        worker = self.window.worker
        for _ in range(4):  # answers can ask again (a hypothesis' maps, the original's coverage)
            reached = []
            QTimer.singleShot(0, worker, lambda: reached.append(True))  # runs on the worker thread, after its queue
            self.qtbot.waitUntil(lambda: bool(reached), timeout=SETTLE_MS)
            came = []
            QTimer.singleShot(0, self.window, lambda: came.append(True))  # after the answers queued before it
            self.qtbot.waitUntil(lambda: bool(came), timeout=SETTLE_MS)
            if not self.working():
                return

    def working(self) -> str:
        """What still says it is working ("" when nothing)."""
        window = self.window
        if window.views.input_bar.busy.isVisibleTo(window.views.input_bar):
            return "the input bar is busy"
        if window.session.model is not None and window.contributions.computing():
            return "the contributions feature is computing"
        titles = [window.views.focus.title.text()] if window.views.focus.isVisibleTo(window) else []
        if window.views.compare_view.isVisibleTo(window):
            titles += [pane.title.text() for pane in (window.views.compare_view.a, window.views.compare_view.b)]
        return next((title for title in titles if any(word in title for word in WORKING)), "")

    # --- checks ---------------------------------------------------------------------------------------
    def check(self) -> None:
        self.worker_idle()
        assert not self.exceptions, f"{self.exceptions[0]} ({self.where()})"
        stuck = self.working()
        assert not stuck, f"stuck with the worker idle: {stuck} ({self.where()})"
        gap = max(b - a for a, b in zip(self.beats, self.beats[1:])) if len(self.beats) > 1 else 0.0
        assert gap < HANG_SECONDS, f"the GUI thread held {gap:.1f} s ({self.where()})"
        self.check_results()
        self.beats = [time.monotonic()]  # the check's own decoding (on this thread) is no hang of the window

    def check_results(self) -> None:
        session = self.window.session
        if not session.results or session.request is None or session.model is None:
            return
        run, request = session.request.settings, session.request
        expected = self.own_answer(session.model.path, run, ablation=request.ablation, languages=True)
        assert session.results[0].text == expected, (
            f"stale result: shown {session.results[0].text!r}, the model says {expected!r} for {run.text!r} "
            f"({self.where()})")
        if session.comparing and session.partner_result is not None:
            expected = self.own_answer(session.partner.path, run, ablation=None, languages=False)
            assert session.partner_result.text == expected, (
                f"stale model B result: shown {session.partner_result.text!r}, model B says {expected!r} "
                f"({self.where()})")

    def own_answer(self, path: Path, run, *, ablation, languages: bool) -> str:
        """What ``attnviz translate`` answers: the model's own Translator, decoding the same input."""
        translator = self.truth.get(str(path))
        if translator is None:
            translator = self.truth[str(path)] = Translator(load_checkpoint(path), "cpu")
        if languages:
            translator.set_languages(run.src_lang or None, run.tgt_lang or None)
        target = translator.target(run.target, unknown="replace") if run.mode == Mode.FORCED else None
        options = {"ablation": ablation} if ablation else {}
        results = finish(translator.decode(translator.source(run.text), mode=run.mode, beam=run.beam,
                                           target_ids=target, max_len=run.max_len, **options))
        return results[0].text

    # --- the actions ----------------------------------------------------------------------------------
    def act(self) -> None:
        actions = [(self.type_and_enter, 6), (self.choose_mode, 2), (self.choose_show, 3), (self.navigate, 5),
                   (self.open_demo, 1), (self.compare, 1), (self.stop_comparing, 1), (self.ablate, 2),
                   (self.export, 2), (self.choose_hypothesis, 1)]
        action = self.random.choices([a for a, _ in actions], weights=[w for _, w in actions])[0]
        action()
        if self.random.random() < 0.6:  # else the next action comes at once, racing what this one asked
            self.check()

    def type_and_enter(self) -> None:
        text = self.random.choice(SENTENCES)
        self.actions.append(f"type {text!r} + Enter")
        bar = self.window.views.input_bar
        bar.debounce.stop()
        bar.text.setText(text)
        if bar.mode.currentData() == Mode.FORCED.value:
            bar.target.setText(self.random.choice(("el hombre", "eamtay", "", "ellohay orldway")))
        bar.max_len.setValue(self.random.choice((5, 20, 40)))
        self.qtbot.keyClick(bar.text, Qt.Key.Key_Return)

    def choose_mode(self) -> None:
        bar = self.window.views.input_bar
        mode = self.random.choice([Mode.GREEDY.value, Mode.BEAM.value, Mode.FORCED.value])
        self.actions.append(f"mode {mode}")
        bar.mode.setCurrentIndex(bar.mode.findData(mode))
        if mode == Mode.BEAM.value:
            bar.beam.setValue(self.random.choice((2, 4, 8)))
        bar.debounce.stop()

    def choose_show(self) -> None:
        name = self.random.choice(SHOW)
        self.actions.append(f"show {name}")
        if self.window.session.model is not None:
            self.window.views.selector.set_show_name(name)

    def navigate(self) -> None:
        viewing = self.window.viewing
        field = self.random.choice(("layer", "head", "step", "kind", "first", "last"))
        delta = self.random.choice((-1, 1))
        self.actions.append(f"{field} {delta:+d}")
        if field in ("layer", "head", "step"):
            viewing.step_selection(field, delta)
        elif field == "kind":
            trace = self.window.session.trace
            if trace is not None and trace.kinds:
                viewing.select(kind=self.random.choice(trace.kinds))
        elif field == "first":
            viewing.first_step()
        else:
            viewing.last_step()

    def choose_hypothesis(self) -> None:
        results = self.window.session.results
        if results:
            index = self.random.randrange(len(results))
            self.actions.append(f"hypothesis {index}")
            self.window.viewing.choose_hypothesis(index)

    def open_demo(self) -> None:
        name = self.random.choice(DEMOS)
        self.actions.append(f"open {name}")
        self.window.open_path(str(demo_path(name)))

    def compare(self) -> None:
        name = self.random.choice(DEMOS)
        self.actions.append(f"compare with {name}")
        if self.window.session.model is not None:
            self.window.comparing.compare_with(str(demo_path(name)))

    def stop_comparing(self) -> None:
        self.actions.append("stop comparing")
        if self.window.session.comparing:
            self.window.comparing.stop_comparing()

    def ablate(self) -> None:
        session = self.window.session
        trace = session.trace
        if trace is None or not trace.kinds or session.selection.kind not in trace.kinds:
            return
        if session.ablation and self.random.random() < 0.4:
            self.actions.append("restore heads")
            self.window.ablation.restore_heads()
            return
        layer = self.random.randrange(trace.layers(session.selection.kind))
        head = self.random.randrange(trace.heads(session.selection.kind))
        self.actions.append(f"toggle head {session.selection.kind} {layer} {head}")
        self.window.ablation.toggle_head(layer, head)

    def export(self) -> None:
        exporting = self.window.exporting
        kind = self.random.choice(("png", "svg", "csv", "npz"))
        self.actions.append(f"export {kind}")
        path = str(self.tmp / f"export-{len(self.actions)}.{kind}")
        {"png": exporting.export_focus_image, "svg": exporting.export_focus_image, "csv": exporting.export_csv,
         "npz": exporting.export_npz}[kind](path)


@pytest.mark.qt_log_level_fail("WARNING")
@pytest.mark.qt_log_ignore("propagateSizeHints")  # the offscreen platform's own note, not the app's
def test_random_use_of_the_window(qtbot, qsettings, tmp_path, capfd):
    from attnviz.gui.app import create_window

    window = create_window(str(demo_path("en-es-transformer")), "cpu", qsettings)
    qtbot.addWidget(window)
    window.resize(1366, 768)
    window.show()
    qtbot.waitUntil(lambda: window.session.model is not None and bool(window.session.results), timeout=SETTLE_MS)
    soak = Soak(qtbot, window, tmp_path, SOAK_SEED)
    hooks = sys.excepthook, threading.excepthook
    sys.excepthook = lambda kind, value, tb: soak.exceptions.append(f"{kind.__name__}: {value}")
    threading.excepthook = lambda args: soak.exceptions.append(f"{args.exc_type.__name__}: {args.exc_value}")
    soak.heart.start()
    try:
        ends = time.monotonic() + SOAK_SECONDS
        while time.monotonic() < ends:
            soak.act()
            printed = capfd.readouterr().err
            assert "Traceback" not in printed, f"{printed[printed.index('Traceback'):][:2000]} ({soak.where()})"
        soak.check()
    finally:
        soak.heart.stop()
        sys.excepthook, threading.excepthook = hooks
        window.close()
    assert len(soak.actions) > 20
