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
