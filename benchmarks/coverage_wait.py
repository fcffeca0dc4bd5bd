"""How long the window's source coverage (ALTI+ of a traced float32 pass, computed by the worker after a run's views
are drawn) takes on long prompts, and how long a second run asked for meanwhile waits for its result.

The model is benchmarks/decoder_only.py's long-prompt one (6 layers, 8 query / 2 key-value heads, d_model 64,
characters, random weights); each prompt is continued greedily by 16 tokens. Per prompt length, in one window:

- ``coverage``: views drawn → the output line's source contribution;
- ``second run, asked at views drawn``: a 4-token prompt asked for as soon as a long run's views are drawn (its
  coverage job queued or starting) → its result;
- ``second run, asked mid-coverage``: the same, asked once the long run's coverage has its traced pass (ALTI+
  under way) → its result.

    QT_QPA_PLATFORM=offscreen python benchmarks/coverage_wait.py [1024 2048 4000]
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)


def run(application, window, text: str, max_len: int) -> float:
    """Ask for a run of ``text``; the seconds to its result with the views drawn."""
    from benchmarks.windows import wait_for

    bar = window.views.input_bar
    bar.debounce.stop()
    bar.max_len.setValue(max_len)
    bar.text.setText(text)
    bar.debounce.stop()
    start = time.perf_counter()
    window.run()
    request = window.session.request
    wait_for(application, lambda: window.session.is_current(request.id) and bool(window.session.results))
    application.processEvents()
    window.grab()
    return time.perf_counter() - start


def case(tokens: int) -> dict:
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6.QtCore import QSettings
    from PySide6.QtWidgets import QApplication

    from benchmarks.decoder_only import CONTINUED, long_prompt_model
    from benchmarks.long_inputs import text_of
    from benchmarks.windows import wait_for

    application = QApplication.instance() or QApplication(sys.argv[:1])
    from attnviz.gui.app import create_window

    folder = tempfile.mkdtemp()
    settings = QSettings(os.path.join(folder, "bench.ini"), QSettings.Format.IniFormat)
    window = create_window(long_prompt_model(folder, tokens + 2 * CONTINUED), "cpu", settings)
    window.resize(1400, 900)
    window.show()
    wait_for(application, lambda: window.session.model is not None)
    bar = window.views.input_bar
    bar.mode.setCurrentIndex(bar.mode.findData("greedy"))
    found = {"drawn": run(application, window, text_of(tokens), CONTINUED)}
    start = time.perf_counter()
    wait_for(application, lambda: 0 in window.contributions.coverage)
    found["coverage"] = time.perf_counter() - start
    run(application, window, text_of(tokens)[::-1], CONTINUED)
    found["second_at_drawn"] = run(application, window, "team", 4)
    run(application, window, text_of(tokens), CONTINUED)
    long_run = window.session.request.id
    wait_for(application, lambda: any(key[1] == long_run for key in list(window.worker.captured)))
    found["second_mid_coverage"] = run(application, window, "team", 4)
    window.close()
    shutil.rmtree(folder, ignore_errors=True)
    return found


if __name__ == "__main__":
    for length in [int(argument) for argument in sys.argv[1:]] or [1024, 2048, 4000]:
        print(json.dumps({"tokens": length, **{key: round(value, 2) for key, value in case(length).items()}}),
              flush=True)
