"""Head aggregates and attention rollout on real traces."""

import numpy as np
import pytest
import torch

from models import build_model
from models.trace.aggregate import aggregate, self_rollout
from models.inference.decoding import Capture, finish, greedy
from tests.helpers import tiny_config


@pytest.fixture(scope="module")
def trace():
    torch.manual_seed(0)
    model = build_model(tiny_config("transformer-preln")).eval()
    return finish(greedy(model, [5, 6, 7, 8, 3], Capture(max_len=6)))[0].trace


def test_mean_and_max_over_heads(trace):
    weights = trace.attention["cross"][1]
    np.testing.assert_allclose(aggregate(trace, "cross", 1, "mean"), weights.mean(axis=0), atol=1e-7)
    np.testing.assert_array_equal(aggregate(trace, "cross", 1, "max"), weights.max(axis=0))


def test_rollout_rows_stay_distributions_and_respect_causality(trace):
    for kind in ("enc_self", "dec_self", "cross"):
        rolled = aggregate(trace, kind, 1, "rollout")
        np.testing.assert_allclose(rolled.sum(axis=-1), 1.0, atol=1e-5)
    decoder = aggregate(trace, "dec_self", 1, "rollout")
    assert np.all(np.triu(decoder, k=1) == 0)  # no path to the future through any layer


def test_rollout_of_one_layer_is_the_residual_mixed_mean(trace):
    layer = trace.attention["enc_self"][0]
    expected = 0.5 * layer.mean(axis=0) + 0.5 * np.eye(layer.shape[-1])
    np.testing.assert_allclose(self_rollout(trace.attention["enc_self"], 0), expected, atol=1e-6)
    two = self_rollout(trace.attention["enc_self"], 1)
    assert not np.allclose(two, expected)  # the second layer is really multiplied in


def test_unknown_aggregate(trace):
    with pytest.raises(ValueError, match="unknown aggregate"):
        aggregate(trace, "cross", 0, "median")
