"""An encoder-only model in the window: a run fills its masks (models/inference/fill_mask.py), the input bar shows
the filled sentence, the decoding panel's chart each masked position's top-k, the views its ``enc_self``
attention; heads switched off show both fills. A real window on the bundled english-encoder-only demo."""

from __future__ import annotations

import numpy as np
import pytest

from attnviz.state.demos import demo_path
from models.inference.fill_mask import fill_masks
from models.storage.checkpoint import load_checkpoint
from models.inference.translator import Translator
from tests.test_gui import WAIT, run_text

DEMO = "english-encoder-only"


@pytest.fixture(scope="module")
def translator():
    return Translator(load_checkpoint(demo_path(DEMO)), "cpu")


def open_demo(qtbot, window) -> None:
    window.open_path(str(demo_path(DEMO)))
    qtbot.waitUntil(lambda: window.session.model is not None and window.session.model.path.stem == DEMO,
                    timeout=WAIT)


def test_a_run_shows_the_filled_sentence_and_each_masks_top_k(qtbot, window, translator):
    open_demo(qtbot, window)
    expected = fill_masks(translator, translator.source("sh_pherd"))
    run_text(qtbot, window, "sh_pherd")
    session = window.session
    assert session.result.text == expected.text
    assert expected.text in window.views.input_bar.result_text()
    (prediction,) = expected.predictions
    chart = window.views.decoding.top_k.state
    assert list(chart.labels) == prediction.top_tokens
    np.testing.assert_allclose(chart.values, prediction.top_probs, rtol=1e-6)
    assert session.trace.kinds == ["enc_self"] and session.selection.kind == "enc_self"
    for mine, theirs in zip(session.trace.attention["enc_self"], expected.trace.attention["enc_self"], strict=True):
        np.testing.assert_array_equal(mine, theirs)
    bar = window.views.input_bar
    assert not bar.mode.isEnabled() and "does not decode" in bar.mode.toolTip()
