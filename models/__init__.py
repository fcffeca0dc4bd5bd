"""attnviz's PyTorch core: models, attention traces, decoding, tokenizers, checkpoints, training.

Imports no Qt (tests/test_no_qt.py proves it), so everything here works headless.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .config import ARCHS, ModelConfig, RNNConfig, TransformerConfig, make_config
from .errors import AttnvizError, CheckpointError, ConfigError, InputError

if TYPE_CHECKING:
    from .base import Seq2Seq


def __getattr__(name: str):
    # torch loads on first use, so the app's plain-data modules (which import models.trace) start fast
    if name == "Seq2Seq":
        from .base import Seq2Seq

        return Seq2Seq
    raise AttributeError(f"module 'models' has no attribute {name!r}")


def build_model(config: ModelConfig) -> "Seq2Seq":
    """A freshly initialised model for ``config``."""
    from .rnn import RNNSeq2Seq
    from .transformer import TransformerSeq2Seq

    config.validate()
    if isinstance(config, TransformerConfig):
        return TransformerSeq2Seq(config)
    return RNNSeq2Seq(config)


__all__ = ["ARCHS", "AttnvizError", "CheckpointError", "ConfigError", "InputError", "ModelConfig",
           "RNNConfig", "Seq2Seq", "TransformerConfig", "build_model", "make_config"]
