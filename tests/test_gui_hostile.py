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
    qtbot.waitUntil(lambda: "Cannot open it" in window.views.input_bar.result_text(), timeout=WAIT)
    assert str(bad) in window.views.input_bar.result_text() and "d_model" in window.views.input_bar.result_text()
    assert window.session.model.path == random_checkpoint
    run_text(qtbot, window, "abc", max_len=3)  # still usable


def test_a_recurrent_model_of_hidden_size_30000_gets_a_message_and_keeps_the_model(qtbot, window, tmp_path,  # noqa: F811
                                                                                   random_checkpoint):
    """Its weights (57 GB) are refused before anything is allocated: the window's process limited to what it uses
    plus 1 GB meanwhile, an allocation of them would fail instead of passing unnoticed in virtual memory."""
    from tests.test_fuzz_models import address_space_limited, huge_checkpoint

    path = tmp_path / "gru-30000.safetensors"
    huge_checkpoint(path, "gru-additive", {"hidden": 30000})
    with address_space_limited():
        window.open_path(str(path))
        qtbot.waitUntil(lambda: "Cannot open it" in window.views.input_bar.result_text(), timeout=WAIT)
    result = window.views.input_bar.result_text()
    assert str(path) in result and "the weights need ~" in result
    assert window.session.model.path == random_checkpoint
    run_text(qtbot, window, "abc", max_len=3)


def test_nan_cells_are_painted_and_named(window):  # noqa: F811
    matrix = np.full((2, 3), 0.25, dtype=np.float32)
    matrix[1, 2] = np.nan
    window.views.focus.show_matrix(matrix, None, list("ab"), list("abc"))
    painted = window.views.focus.not_a_number.image
    assert tuple(painted[1, 2]) == NOT_A_NUMBER_RGBA and painted[..., 3].sum() == 255
    assert "not a number" in window.views.focus.describe_cell(1, 2)
    assert "not a number" not in window.views.focus.describe_cell(0, 0)
    window.views.focus.show_matrix(np.full((2, 3), 0.25, dtype=np.float32), None, list("ab"), list("abc"))
    assert window.views.focus.not_a_number.image is None
