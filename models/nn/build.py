"""A model from its config: the one place that maps a config to its family's module."""

from __future__ import annotations

from .base import Seq2Seq
from .config import ModelConfig, TransformerConfig


def build_model(config: ModelConfig) -> Seq2Seq:
    """A freshly initialised model for ``config`` (validated first: one line naming what is wrong)."""
    from .rnn import RNNSeq2Seq
    from .transformer import TransformerSeq2Seq

    config.validate()
    if isinstance(config, TransformerConfig):
        return TransformerSeq2Seq(config)
    return RNNSeq2Seq(config)
