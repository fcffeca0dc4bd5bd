"""The summary of "All layers × heads" (state/grid_summary.py): each head's mean over its rows (those that may see two
keys or more) of the row's entropy −Σ a log a divided by log of the keys the row may see."""

from __future__ import annotations

import math

import numpy as np
import pytest

from attnviz.state.grid_summary import spread


def test_one_hot_rows_are_0_even_rows_are_1_and_a_half_split_is_log2_over_log_of_the_keys_seen():
    causal = np.tril(np.ones((3, 3), dtype=bool))
    one_hot = np.eye(3)
    even = causal / causal.sum(axis=-1, keepdims=True)
    split = np.array([[1.0, 0, 0], [0.5, 0.5, 0], [0.5, 0.5, 0]])
    values = spread(np.stack([one_hot, even, split]), causal)
    # row 0 sees one key and does not count; rows 1 and 2 see 2 and 3 keys
    assert values == pytest.approx([0.0, 1.0, (math.log(2) / math.log(2) + math.log(2) / math.log(3)) / 2])


def test_a_mask_that_lets_no_row_see_two_keys_gives_0():
    assert spread(np.ones((2, 2, 1)), np.ones((2, 1), dtype=bool)).tolist() == [0.0, 0.0]


def test_revealing_step_by_step_the_summary_reads_only_the_rows_generated_so_far(random_checkpoint):
    from attnviz.state.grid_summary import summary_grid
    from attnviz.state.session import Selection
    from models.inference.decoding import finish
    from models.inference.modes import Mode
    from models.inference.translator import Translator
    from models.storage.checkpoint import load_checkpoint

    translator = Translator(load_checkpoint(random_checkpoint, "cpu"), "cpu")
    steps = translator.decode(translator.source("abc"), mode=Mode.FORCED, target_ids=translator.target("dcba"))
    trace = finish(steps)[0].trace  # forced: 5 decoder rows whatever the model says
    selection = Selection(kind="dec_self", layer=1, head=2)
    weights, mask = trace.attention["dec_self"][1], trace.masks["dec_self"]
    at_step_2 = summary_grid(trace, selection, reveal_step=2)  # decoder rows 0, 1 and 2
    assert weights.shape[1] > 3 and (at_step_2.rows, at_step_2.cols) == (2, 4) and at_step_2.selected == (1, 2)
    assert at_step_2.matrices[4 + 2][0, 0] == pytest.approx(spread(weights[2:3, :3], mask[:3])[0])
    whole = summary_grid(trace, selection)
    assert whole.matrices[4 + 2][0, 0] == pytest.approx(spread(weights[2:3], mask)[0])
