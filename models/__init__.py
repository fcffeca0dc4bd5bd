"""attnviz's PyTorch core: models, attention traces, decoding, tokenizers, checkpoints, training.

Imports no Qt (tests/test_no_qt.py proves it), so everything here works headless.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .errors import AttnvizError, CheckpointError, ConfigError, InputError
from .nn.config import ARCHS, DecoderOnlyConfig, ModelConfig, RNNConfig, TransformerConfig, make_config
from .nn.encoder_config import EncoderOnlyConfig

if TYPE_CHECKING:
    from .inference.decoding import run
    from .inference.translator import Translator
    from .nn.ablation import Ablation
    from .nn.base import Seq2Seq
    from .nn.build import build_model
    from .storage.checkpoint import load_checkpoint, save_checkpoint


# What a script needs, by the module that defines it: torch loads on first use, so the app's plain-data modules
# (which import models.trace) start fast.
_LAZY = {"Seq2Seq": "nn.base", "build_model": "nn.build", "Ablation": "nn.ablation",
         "load_checkpoint": "storage.checkpoint", "save_checkpoint": "storage.checkpoint",
         "Translator": "inference.translator", "run": "inference.decoding"}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module 'models' has no attribute {name!r}")


__all__ = ["ARCHS", "Ablation", "AttnvizError", "CheckpointError", "ConfigError", "DecoderOnlyConfig",
           "EncoderOnlyConfig", "InputError",
           "ModelConfig",
           "RNNConfig", "Seq2Seq", "TransformerConfig", "Translator", "build_model", "load_checkpoint", "make_config",
           "run", "save_checkpoint"]
