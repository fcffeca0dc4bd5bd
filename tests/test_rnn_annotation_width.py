"""rnn-luong with an encoder wider or narrower than its decoder (``annotation_size``): what old checkpoints mean,
what the model builds, what the config refuses. Its agreement with JoeyNMT and fairseq is tested with their
importers."""

from __future__ import annotations

import pytest
import torch

from models.nn.config import config_from_dict, config_to_dict
from models.inference.decoding import Capture, finish, greedy
from models.errors import ConfigError
from models.nn.rnn import RNNSeq2Seq
from tests.helpers import tiny_config


def test_a_config_without_it_builds_the_model_it_built_before():
    config = tiny_config("rnn-luong", rnn_cell="lstm", bidirectional=True, hidden=16)
    assert "annotation_size" not in config_to_dict(config)  # older versions read it as before
    assert config.annotation_width == 16
    shapes = {name: tuple(value.shape) for name, value in RNNSeq2Seq(config).state_dict().items()}
    assert not any("projection" in name for name in shapes)
    assert shapes["decoder.query.weight"] == (16, 16) and shapes["decoder.combine.weight"] == (16, 32)
    assert shapes["encoder.gru.weight_hh_l0"] == (32, 8)


@pytest.mark.parametrize("init_hidden, cell", [("encoder", "lstm"), ("encoder", "gru"), ("bridge", "gru"),
                                               ("last", "lstm"), ("zero", "gru")])
def test_a_wider_encoder_is_read_through_maps_sized_for_it(init_hidden, cell):
    config = tiny_config("rnn-luong", rnn_cell=cell, bidirectional=True, hidden=12, annotation_size=24,
                         init_hidden=init_hidden, decoder_layers=2)
    assert config_from_dict(config_to_dict(config)) == config
    torch.manual_seed(0)
    model = RNNSeq2Seq(config).eval()
    shapes = {name: tuple(value.shape) for name, value in model.state_dict().items()}
    assert shapes["encoder.gru.weight_hh_l0"][1] == 12  # 12 per direction: 24 together
    assert shapes["decoder.query.weight"] == (24, 12) and shapes["decoder.combine.weight"] == (12, 36)
    assert ("decoder.hidden_projection.weight" in shapes) == (init_hidden == "encoder")
    assert ("decoder.cell_projection.weight" in shapes) == (init_hidden == "encoder" and cell == "lstm")
    src, tgt_in = torch.tensor([[5, 6, 7, 8, config.eos_id]]), torch.tensor([[config.bos_id, 6, 9, 4]])
    with torch.no_grad():
        logits, intermediates = model(src, tgt_in, need_weights=True)
        state, _ = model.start(src)
        steps = [model.step(tgt_in[:, position], state) for position in range(tgt_in.shape[1])]
        assert finish(greedy(model, src[0].tolist(), Capture(max_len=6)))[0].token_ids  # decodes
    # the cached steps and the teacher-forced pass agree; one head over every source token
    assert torch.allclose(torch.stack([step.logits for step in steps], dim=1), logits, atol=1e-6)
    weights = intermediates.attention["cross"][0]
    assert weights.shape == (1, 1, 4, 5) and torch.allclose(weights.sum(-1), torch.ones(1))


@pytest.mark.parametrize("overrides, message", [
    (dict(luong_score="dot"), r"the dot score needs annotations as wide as the decoder \(16\); got annotation_size 24"),
    (dict(init_hidden="last"), r"init_hidden last needs annotations as wide as the decoder \(16\) or twice as wide; "
                               r"got annotation_size 24"),
    (dict(annotation_size=-2), r"annotation_size must be between 0 and 32768; got -2"),
    (dict(bidirectional=True, annotation_size=15), r"a bidirectional encoder needs an even width; got 15"),
])
def test_what_cannot_be_built_is_one_line(overrides, message):
    with pytest.raises(ConfigError, match=message):
        tiny_config("rnn-luong", **{"hidden": 16, "annotation_size": 24, **overrides})


def test_it_applies_to_rnn_luong_only():
    with pytest.raises(ConfigError, match="annotation_size applies to rnn-luong only"):
        tiny_config("gru-additive", annotation_size=24)
