"""Per-side sizes of a Transformer config: what old checkpoints mean, what ``heads``/``d_ff`` set, what the
model builds and reports."""

from __future__ import annotations

import pytest

from models.nn.config import config_from_dict, config_to_dict, make_config
from models.errors import ConfigError
from models.nn.transformer import TransformerSeq2Seq


def test_a_config_without_decoder_sizes_means_both_sides_equal():
    saved = config_to_dict(make_config("transformer-preln", 20, 20, heads=8, d_model=32, d_ff=64))
    assert "decoder_heads" not in saved and "decoder_d_ff" not in saved  # older versions read it as before
    config = config_from_dict(saved)
    assert (config.heads_of("encoder"), config.heads_of("decoder")) == (8, 8)
    assert (config.d_ff_of("encoder"), config.d_ff_of("decoder")) == (64, 64)


def test_decoder_sizes_are_saved_and_built():
    config = make_config("transformer-postln", 20, 20, d_model=24, heads=4, d_ff=48, decoder_heads=6,
                         decoder_d_ff=36, encoder_layers=2, decoder_layers=1)
    assert config_from_dict(config_to_dict(config)) == config
    model = TransformerSeq2Seq(config)
    assert model.attention_shape() == {"enc_self": (2, 4), "dec_self": (1, 6), "cross": (1, 6)}
    layer = model.decoder_layers[0]
    assert layer.cross_attention.attention.head_dim == 4 and layer.feed_forward.linear_in.out_features == 36
    assert model.encoder_layers[0].feed_forward.linear_in.out_features == 48


def test_decoder_heads_must_divide_the_model_width():
    with pytest.raises(ConfigError, match=r"d_model \(24\) must be divisible by decoder_heads \(5\)"):
        make_config("transformer-preln", 20, 20, d_model=24, heads=4, decoder_heads=5)


def test_a_decoder_norm_placement_of_its_own_keeps_the_final_norm_after_pre_ln_stacks_only():
    config = make_config("transformer-preln", 20, 20, decoder_norm_position="post")
    assert config_from_dict(config_to_dict(config)) == config
    assert "decoder_norm_position" not in config_to_dict(make_config("transformer-preln", 20, 20))
    model = TransformerSeq2Seq(config)
    assert model.encoder_norm is not None and model.decoder_norm is None
    assert model.encoder_layers[0].feed_forward.pre_norm and not model.decoder_layers[0].feed_forward.pre_norm


@pytest.mark.parametrize("placements", [("pre", "post"), ("pre", "pre"), ("post", "pre"), ("post", "post")])
@pytest.mark.parametrize("finals", [(False, False), (False, True), (True, False), (True, True)])
def test_a_decoder_final_norm_of_its_own_makes_each_stack_say_its_own(placements, finals):
    config = make_config("transformer-preln", 20, 20, norm_position=placements[0],
                         decoder_norm_position=placements[1], final_norm=finals[0], decoder_final_norm=finals[1])
    saved = config_to_dict(config)
    assert saved["decoder_final_norm"] is finals[1] and config_from_dict(saved) == config
    assert (config.final_norm_of("encoder"), config.final_norm_of("decoder")) == finals
    model = TransformerSeq2Seq(config)
    assert (model.encoder_norm is not None, model.decoder_norm is not None) == finals
    assert (model.encoder_layers[0].feed_forward.pre_norm, model.decoder_layers[0].feed_forward.pre_norm) == tuple(
        placement == "pre" for placement in placements)


@pytest.mark.parametrize("fields, finals", [
    ({"norm_position": "pre", "final_norm": True}, (True, True)),
    ({"norm_position": "post", "final_norm": False}, (False, False)),
    ({"norm_position": "pre", "decoder_norm_position": "post", "final_norm": True}, (True, False)),
    ({"norm_position": "post", "decoder_norm_position": "pre", "final_norm": True}, (False, True)),
    ({"norm_position": "pre", "decoder_norm_position": "post", "final_norm": False}, (False, False)),
])
def test_a_saved_config_without_a_decoder_final_norm_means_what_it_meant(fields, finals):
    saved = {"arch": "transformer-preln", "src_vocab_size": 20, "tgt_vocab_size": 20, **fields}
    config = config_from_dict(saved)
    assert config.decoder_final_norm is None and "decoder_final_norm" not in config_to_dict(config)
    assert (config.final_norm_of("encoder"), config.final_norm_of("decoder")) == finals


@pytest.mark.parametrize("value", [1, "yes", 0.0])
def test_a_decoder_final_norm_that_is_not_true_false_or_null_is_one_line(value):
    saved = config_to_dict(make_config("transformer-preln", 20, 20))
    with pytest.raises(ConfigError, match=rf"^decoder_final_norm must be true, false or null; got {value!r}$"):
        config_from_dict({**saved, "decoder_final_norm": value})
