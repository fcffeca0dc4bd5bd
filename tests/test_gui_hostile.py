"""Hostile files in the desktop app: the same checks as the CLI, the message in the window, the open
model kept; NaN attention painted distinctly."""

from __future__ import annotations

import json

import numpy as np

from attnviz.gui.views.heatmap import NOT_A_NUMBER_RGBA
from tests.test_checkpoint import rewrite_metadata
from tests.test_gui import WAIT, run_text


def test_a_config_that_claims_a_huge_model_gets_a_message_and_keeps_the_model(qtbot, window, tmp_path,  # noqa: F811
                                                                              random_checkpoint):
    config = {"arch": "transformer-preln", "src_vocab_size": 13, "tgt_vocab_size": 13, "d_model": 10 ** 8}
    bad = rewrite_metadata(random_checkpoint, tmp_path / "huge.safetensors", config=json.dumps(config))
    window.open_path(str(bad))
    qtbot.waitUntil(lambda: "Cannot open it" in window.input_bar.result_text(), timeout=WAIT)
    assert str(bad) in window.input_bar.result_text() and "d_model" in window.input_bar.result_text()
    assert window.session.model.path == random_checkpoint
    run_text(qtbot, window, "abc", max_len=3)  # still usable


def test_nan_cells_are_painted_and_named(window):  # noqa: F811
    matrix = np.full((2, 3), 0.25, dtype=np.float32)
    matrix[1, 2] = np.nan
    window.focus.show_matrix(matrix, None, list("ab"), list("abc"))
    painted = window.focus.not_a_number.image
    assert tuple(painted[1, 2]) == NOT_A_NUMBER_RGBA and painted[..., 3].sum() == 255
    assert "not a number" in window.focus.describe_cell(1, 2)
    assert "not a number" not in window.focus.describe_cell(0, 0)
    window.focus.show_matrix(np.full((2, 3), 0.25, dtype=np.float32), None, list("ab"), list("abc"))
    assert window.focus.not_a_number.image is None
