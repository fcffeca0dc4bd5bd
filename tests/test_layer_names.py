"""The layer-name tables every importer reads its layers through (models/importers/layer_names.py), on a real
torch RNN's state dict: ``{layer}`` numbered in prefixes and names, declared transforms, zero biases."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from models.errors import CheckpointError
from models.importers.common import Source, WeightMap
from models.importers.layer_names import From, Zeros, both, map_layers, map_names, recurrent


@pytest.fixture()
def lstm_state():
    torch.manual_seed(0)
    lstm = nn.LSTM(4, 3, num_layers=2, bidirectional=True)
    return {f"encoder.lstm.{name}": tensor for name, tensor in lstm.state_dict().items()}


def test_every_layer_and_direction_is_read_under_our_names(lstm_state, tmp_path):
    weights = WeightMap(Source(tmp_path / "model.pt"), lstm_state, "test")
    map_layers(weights, recurrent("gru.{kind}_l{layer}{direction}", "lstm.{kind}_l{layer}{direction}",
                                  directions=("", "_reverse")), ours="encoder.", theirs="encoder.", count=2)
    weights.check_complete()  # every saved tensor taken, none missing
    assert {ours: foreign for ours, (foreign, _) in weights.assigned.items()} == \
        {key.replace(".lstm.", ".gru."): key for key in lstm_state}
    assert all(torch.equal(tensor, lstm_state[foreign]) for foreign, tensor in weights.assigned.values())


def test_declared_transforms_zero_biases_and_a_missing_name(lstm_state, tmp_path):
    weights = WeightMap(Source(tmp_path / "model.pt"), lstm_state, "test")
    table = {"input.weight": From("weight_ih_l{layer}", lambda w: w[:3]), "input.bias": Zeros("bias_ih_l{layer}", 3)}
    map_layers(weights, table, ours="cells.{layer}.", theirs="encoder.lstm.", count=2)
    for layer in range(2):
        _, weight = weights.assigned[f"cells.{layer}.input.weight"]
        assert torch.equal(weight, lstm_state[f"encoder.lstm.weight_ih_l{layer}"][:3])
        named, bias = weights.assigned[f"cells.{layer}.input.bias"]
        assert named == f"encoder.lstm.bias_ih_l{layer}" and torch.equal(bias, torch.zeros(3))
    map_names(weights, both("output", "encoder.output", kinds=("weight",)))
    with pytest.raises(CheckpointError, match="missing weights for the test layout: encoder.output.weight"):
        weights.check_complete()
