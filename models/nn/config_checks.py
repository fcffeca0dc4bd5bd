"""The checks every architecture config shares: one line naming the field that is wrong (a ``ConfigError``)."""

from __future__ import annotations

from typing import Any

from ..errors import ConfigError

ACTIVATIONS = ("relu", "gelu", "gelu_tanh", "swish", "gelu_clipped", "quick_gelu", "relu2", "relu6", "leaky_relu",
               "mish", "hardswish", "tanh", "sigmoid", "linear", "sqrt_softplus", "laplace")


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise ConfigError(message)


def _check_choice(name: str, value: str, choices: tuple[str, ...]) -> None:
    _require(value in choices, f"{name} must be one of {', '.join(choices)}; got {value!r}")


def _check_special_ids(config: Any) -> None:
    for name in ("pad_id", "bos_id", "eos_id"):
        value = getattr(config, name)
        _require(isinstance(value, int) and 0 <= value < config.tgt_vocab_size,
                 f"{name} must be a token id below the target vocabulary size ({config.tgt_vocab_size}); got {value!r}")


def _check_min_output_len(config: Any) -> None:
    _require(config.min_output_len >= 0, f"min_output_len must be 0 or more; got {config.min_output_len!r}")


def _check_positive(config: Any, *names: str) -> None:
    for name in names:
        value = getattr(config, name)
        _require(isinstance(value, int) and value > 0, f"{name} must be a positive integer; got {value!r}")
