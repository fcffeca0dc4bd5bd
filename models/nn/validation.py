"""Checks that run before anything big is allocated: one place for the types and bounds of every
config field, and for comparing what a config claims with the weights a file actually holds.

A checkpoint is a few kilobytes of JSON next to the weights; the JSON alone must never make the program
allocate gigabytes. So a config is checked in three steps, each cheap:

1. :func:`check_config_fields`: every field has its declared type (a bool is not an int, a float is
   finite) and every size is within :data:`BOUNDS`; a problem is one line naming the field.
2. :func:`check_against_weights`: the least number of weights such a model has is compared with the
   tensors the file holds (shapes from a safetensors header, or a loaded state dict): the config must
   describe these weights, not a bigger model. Only then is the model built.
3. :func:`check_shapes`: every weight of the built model is in the file with the same shape (for an
   attnviz checkpoint, from the header, before any weight is read).

(Building on PyTorch's ``meta`` device would give the shapes without memory, but its first use in a
process costs over a second of imports; the count from the config costs nothing.)
"""

from __future__ import annotations

import dataclasses
import math
import typing
from pathlib import Path
from collections.abc import Mapping
from typing import Any

from ..errors import CheckpointError, ConfigError

# The largest value each size may take. Far beyond any seq2seq model this tool is for, far below what
# would exhaust a desktop's memory.
BOUNDS = {
    "src_vocab_size": 1 << 22, "tgt_vocab_size": 1 << 22,
    "d_model": 1 << 15, "hidden": 1 << 15, "d_head": 1 << 15, "d_ff": 1 << 17, "decoder_d_ff": 1 << 17,
    "heads": 1024, "decoder_heads": 1024,
    "encoder_layers": 256, "decoder_layers": 256, "embedding_size": 1 << 15, "annotation_size": 1 << 15,
    "max_len": 1 << 17, "min_output_len": 1 << 17, "position_offset": 1 << 12,
    "relative_buckets": 1 << 12, "relative_max_distance": 1 << 17,
    "pad_id": 1 << 22, "bos_id": 1 << 22, "eos_id": 1 << 22,
    "vocab_size": 1 << 22, "layers": 256, "kv_heads": 1024, "rope_original_max_len": 1 << 24,
    "sliding_window": 1 << 24,
}
# Numbers a model may rebuild from its config rather than store (position tables): 2**25 floats, 128 MiB.
UNSTORED_ELEMENTS = 1 << 25
# Slack for what least_elements does not count (biases, norms): a model may be this much bigger than
# the weights found before its shapes are compared one by one.
SMALL_MODEL_ELEMENTS = 1 << 16
MAX_FLOAT = 1e6  # logit_scale, layer_norm_eps...
FLOAT_BOUNDS = {"rope_theta": 1e12}  # a rotary base is often 1e6 and beyond (Mistral NeMo: 1e6, others 1e8)


def check_config_fields(config: Any) -> None:
    """Raise :class:`ConfigError` naming the first field whose type or size is wrong."""
    hints = typing.get_type_hints(type(config))
    for field in dataclasses.fields(config):
        value = getattr(config, field.name)
        check_value(field.name, value, hints.get(field.name, object))


def check_value(name: str, value: Any, kind: type) -> None:
    options = typing.get_args(kind)
    if type(None) in options:  # ``X | None``: None, or what X allows
        if value is None:
            return
        kind = next(option for option in options if option is not type(None))
    if kind is bool:
        if not isinstance(value, bool):
            choices = "true, false or null" if options else "true or false"
            raise ConfigError(f"{name} must be {choices}; got {_shown(value)}")
    elif kind is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{name} must be an integer; got {_shown(value)}")
        bound = BOUNDS.get(name)
        if bound is not None and not 0 <= value <= bound:
            raise ConfigError(f"{name} must be between 0 and {bound}; got {_shown(value)}")
    elif kind is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{name} must be a number; got {_shown(value)}")
        bound = FLOAT_BOUNDS.get(name, MAX_FLOAT)
        if not (isinstance(value, int) or math.isfinite(value)) or abs(value) > bound:
            raise ConfigError(f"{name} must be a finite number of at most {bound:g}; got {_shown(value)}")
    elif kind is str and not isinstance(value, str):
        raise ConfigError(f"{name} must be a string; got {_shown(value)}")


def _shown(value: Any) -> str:
    """A value for an error line: never more than a line, never a 300-digit number in full."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10 ** 12:
        return f"a {len(str(abs(value)))}-digit number"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def least_elements(config: Any) -> tuple[int, int]:
    """(weights, buffers): at least how many numbers the model ``config`` describes stores, and how many
    it rebuilds from the config (position tables). Only the big matrices are counted, so a real model
    has a few more; computed from the config alone, nothing is built."""
    if hasattr(config, "key_value_heads"):  # decoder-only
        d, inner, kv = config.d_model, config.heads * config.head_dim, config.key_value_heads * config.head_dim
        feed_forward = (3 if config.gated_ffn else 2) * d * config.d_ff
        positions = config.max_len * d if config.positions == "learned" else 0
        output = 0 if config.tie_output else config.vocab_size * d
        return config.vocab_size * d + output + positions + config.layers * (2 * d * (inner + kv) + feed_forward), 0
    if hasattr(config, "d_model"):
        d = config.d_model
        inner = {side: config.heads_of(side) * config.head_dim_of(side) for side in ("encoder", "decoder")}
        embeddings = config.src_vocab_size * d + (0 if config.share_embeddings else config.tgt_vocab_size * d)
        layers = (config.encoder_layers * (4 * d * inner["encoder"] + 2 * d * config.d_ff_of("encoder"))
                  + config.decoder_layers * (8 * d * inner["decoder"] + 2 * d * config.d_ff_of("decoder")))
        output = 0 if config.tie_output else config.tgt_vocab_size * d
        positions = 0 if config.positions == "none" else 2 * (config.max_len + config.position_offset) * d
        return embeddings + layers + output, positions
    embeddings = (config.src_vocab_size + config.tgt_vocab_size) * (config.embedding_size or config.hidden)
    h = min(config.hidden, config.annotation_width)  # an encoder narrower than the decoder has fewer weights
    decoder_layers = config.decoder_layers * h * h if config.arch == "gru-transformer-decoder" else 0
    positions = config.max_len * h if config.arch == "gru-transformer-decoder" else 0
    return embeddings + 6 * h * h + decoder_layers + config.tgt_vocab_size * h, positions


def check_against_weights(path: str | Path, config: Any, stored: Mapping[str, Any]) -> None:
    """Refuse a config that describes a bigger model than the weights ``stored`` (tensors, or shapes as
    tuples) could fill, before any module is built: the model it builds is then no bigger than the file."""
    try:
        config.validate()  # types and bounds first (check_config_fields), then consistency
    except ConfigError as error:
        raise CheckpointError(path, f"bad config: {error}") from None
    stored_elements = sum(math.prod(_shape(value)) for value in stored.values())
    weights, buffers = least_elements(config)
    if weights > stored_elements + SMALL_MODEL_ELEMENTS:
        raise CheckpointError(path, f"the config describes a model of at least {weights:,} numbers but the file "
                                    f"holds only {stored_elements:,}: the config does not match the weights")
    if buffers > UNSTORED_ELEMENTS:
        raise CheckpointError(path, f"bad config: max_len ({config.max_len}) is too long for a model this wide "
                                    f"(its position tables would hold {buffers:,} numbers; at most "
                                    f"{UNSTORED_ELEMENTS:,})")


def check_shapes(path: str | Path, model: Any, stored: Mapping[str, Any],
                 aliases: set[str] = frozenset()) -> None:
    """Every weight the model has is stored with the shape the config implies, and nothing else is."""
    expected = model.state_dict()
    missing = sorted(name for name in expected if name not in stored and name not in aliases)
    unexpected = sorted(name for name in stored if name not in expected)
    if missing or unexpected:
        parts = [f"missing weights: {', '.join(missing[:5])}" if missing else "",
                 f"unexpected weights: {', '.join(unexpected[:5])}" if unexpected else ""]
        raise CheckpointError(path, "; ".join(part for part in parts if part))
    for name, value in stored.items():
        if _shape(value) != tuple(expected[name].shape):
            raise CheckpointError(path, f"weight {name} has shape {_shape(value)}, the config implies "
                                        f"{tuple(expected[name].shape)}")


def dtype_name(dtype: Any) -> str:
    """``torch.int64`` → ``int64``."""
    return str(dtype).rpartition(".")[2]


def _shape(value: Any) -> tuple[int, ...]:
    return tuple(value.shape) if hasattr(value, "shape") else tuple(value)
