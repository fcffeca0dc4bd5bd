"""Small models and data shared by the tests."""

from __future__ import annotations

from models import make_config

TINY = {
    "transformer-preln": dict(d_model=32, heads=4, d_ff=64, encoder_layers=2, decoder_layers=2, max_len=64),
    "transformer-postln": dict(d_model=32, heads=4, d_ff=64, encoder_layers=2, decoder_layers=2, max_len=64),
}
TINY_RNN = dict(hidden=32, max_len=64)

LETTERS = "abcdefgh "


def tiny_config(arch: str, vocab_size: int = len(LETTERS) + 4, **overrides):
    """A small config of ``arch`` (vocabulary: the 4 specials plus ``LETTERS``)."""
    return make_config(arch, vocab_size, vocab_size, **{**TINY.get(arch, TINY_RNN), **overrides})
