"""The Lens pane's state (attnviz/state/lens_view.py), plain numpy: the rank colours on their log scale, the rows with
the output layer on top, the hover lines, and the selected step outlined only where the output has it."""

from __future__ import annotations

import numpy as np

from attnviz.state.lens_view import LensReadings, lens_state, rank_colours


def test_the_state_outlines_only_a_step_of_the_output():
    readings = LensReadings(tokens=("a", "b"), probs=np.array([[0.1, 0.2], [0.9, 0.8]], np.float32),
                            ranks=np.array([[3, 99], [0, 0]]), top_tokens=((("x",), ("y",)), (("a",), ("b",))),
                            top_probs=np.array([[[0.5], [0.4]], [[0.9], [0.8]]], np.float32), vocab_size=100)
    assert lens_state(readings, step=1).selected == 1 and lens_state(readings, step=2).selected is None
    colours = rank_colours(np.array([0, 9, 99]), 100)
    assert tuple(colours[0]) == (253, 231, 37) and tuple(colours[2]) == (68, 1, 84)  # rank 1 bright, the last dark
    assert lens_state(readings).tips[1][0] == "step 1 ‘a’ at embeddings: p = 0.100, rank 4; top: ‘x’ 0.500"


def test_the_rows_run_from_the_output_layer_down_to_the_embeddings():
    readings = LensReadings(tokens=("a",), probs=np.array([[0.1], [0.5], [0.9]], np.float32),
                            ranks=np.array([[40], [2], [0]]), top_tokens=((("x",),), (("y",),), (("a",),)),
                            top_probs=np.array([[[0.5]], [[0.6]], [[0.9]]], np.float32), vocab_size=50)
    state = lens_state(readings, step=0)
    assert state.row_labels == ("layer 2 (output)", "layer 1", "embeddings") and state.shape == (3, 1)
    assert np.array_equal(state.rgb[:, 0], rank_colours(np.array([0, 2, 40]), 50))
    assert state.tips[0][0].startswith("step 1 ‘a’ at layer 2 (output): p = 0.900, rank 1")
    assert "rank 50" in state.legend and state.encoder == () and state.encoder_note == ""
