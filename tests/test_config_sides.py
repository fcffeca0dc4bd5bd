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
