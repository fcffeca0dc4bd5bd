"""The attnviz checkpoint: one ``.safetensors`` file, weights plus a JSON document in its metadata.

Metadata keys (all strings, as safetensors requires): ``format`` = ``"attnviz"``, ``format_version``,
``config`` (the architecture config), ``tokenizers`` (``{"source": ..., "target": ...}``, each the
tokenizer's ``to_dict``), ``provenance`` (corpus, steps, metrics, command...). Loading reads only this
file, never unpickles, and reports every problem as a one-line ``CheckpointError`` naming the file.
Weights shared between modules (tied embeddings) are stored once.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from .base import Seq2Seq
from .config import config_from_dict, config_to_dict
from .errors import AttnvizError, CheckpointError, ForeignCheckpointError
from .files import read_header, read_safetensors, write_safetensors
from .tokenizers import Tokenizer

FORMAT = "attnviz"
FORMAT_VERSION = 1
SUFFIX = ".safetensors"


@dataclass
class Checkpoint:
    """A loaded checkpoint: the model (in eval mode) and what it needs to read and write text."""

    model: Seq2Seq
    source_tokenizer: Tokenizer
    target_tokenizer: Tokenizer
    provenance: dict[str, Any] = field(default_factory=dict)
    path: Path | None = None

    @property
    def config(self):
        return self.model.config


def save_checkpoint(path: str | Path, model: Seq2Seq, source_tokenizer: Tokenizer, target_tokenizer: Tokenizer,
                    provenance: dict[str, Any] | None = None, *, dtype: torch.dtype = torch.float32) -> Path:
    """Write ``path`` atomically (models/files.py: a crash or a full disk never leaves half a file)."""
    path = Path(path)
    tensors = unique_tensors(model, dtype)
    metadata = {
        "format": FORMAT,
        "format_version": str(FORMAT_VERSION),
        "config": json.dumps(config_to_dict(model.config)),
        "tokenizers": json.dumps({"source": source_tokenizer.to_dict(), "target": target_tokenizer.to_dict()}),
        "provenance": json.dumps(provenance or {}),
    }
    return write_safetensors(path, tensors, metadata)


def unique_tensors(model: Seq2Seq, dtype: torch.dtype = torch.float32) -> dict[str, torch.Tensor]:
    """The state dict on the CPU with each shared tensor (tied embeddings) once under its first name, floats
    as ``dtype`` (safetensors refuses aliases)."""
    tensors, seen = {}, set()
    for name, tensor in model.state_dict().items():
        key = (tensor.data_ptr(), tuple(tensor.shape))
        if key in seen:
            continue
        seen.add(key)
        value = tensor.detach().to("cpu")
        tensors[name] = value.to(dtype) if value.is_floating_point() else value
    return {name: tensor.contiguous() for name, tensor in tensors.items()}


def read_metadata(path: str | Path) -> dict[str, Any]:
    """The decoded metadata document of an attnviz checkpoint (weights are not read)."""
    path = _existing_file(path)
    raw = read_header(path).get("__metadata__") or {}
    if not isinstance(raw, dict) or not all(isinstance(value, str) for value in raw.values()):
        raise CheckpointError(path, "not a readable safetensors file (its metadata is not a map of strings)")
    if raw.get("format") != FORMAT:
        raise ForeignCheckpointError(path, "a safetensors file, but not an attnviz checkpoint (no 'format: attnviz' "
                                    "metadata); foreign checkpoints are imported with 'attnviz convert'")
    version = raw.get("format_version", "")
    if not version.isdigit() or int(version) > FORMAT_VERSION:
        raise CheckpointError(path, f"checkpoint format version {version!r} is not supported "
                                    f"(this attnviz reads up to {FORMAT_VERSION})")
    document: dict[str, Any] = {"format_version": int(version)}
    for key in ("config", "tokenizers", "provenance"):
        if key not in raw:
            raise CheckpointError(path, f"the metadata has no '{key}' entry")
        try:
            document[key] = json.loads(raw[key])
        except json.JSONDecodeError as error:
            raise CheckpointError(path, f"the metadata entry '{key}' is not valid JSON ({error})") from None
    return document


def load_checkpoint(path: str | Path, device: str | torch.device = "cpu") -> Checkpoint:
    """Build the model the file describes and load its weights; the model comes back in eval mode."""
    from . import build_model  # the package imports this module's users, not the other way round

    path = _existing_file(path)
    document = read_metadata(path)
    try:
        config = config_from_dict(document["config"])
        tokenizers = document["tokenizers"]
        source = Tokenizer.from_dict(tokenizers["source"])
        target = Tokenizer.from_dict(tokenizers["target"])
    except AttnvizError as error:
        raise CheckpointError(path, f"bad metadata: {error}") from None
    except (KeyError, TypeError) as error:
        raise CheckpointError(path, f"bad metadata: missing tokenizer entry {error}") from None
    _check_vocabularies(path, config, source, target)
    model = build_model(config)
    _load_weights(path, model)
    provenance = document["provenance"] if isinstance(document["provenance"], dict) else {}
    return Checkpoint(model.to(device).eval(), source, target, provenance, path)


def _check_vocabularies(path: Path, config, source: Tokenizer, target: Tokenizer) -> None:
    if source.vocab_size != config.src_vocab_size or target.vocab_size != config.tgt_vocab_size:
        raise CheckpointError(path, f"the tokenizers' vocabularies ({source.vocab_size}, {target.vocab_size}) do not "
                                    f"match the model's ({config.src_vocab_size}, {config.tgt_vocab_size})")


def _load_weights(path: Path, model: Seq2Seq) -> None:
    expected = model.state_dict()
    try:
        stored, _ = read_safetensors(path)  # read whole: a file rewritten meanwhile cannot crash the process
    except CheckpointError as error:
        raise CheckpointError(path, f"the weights cannot be read ({error.reason})") from None
    aliases = _aliases(model)
    missing = sorted(name for name in expected if name not in stored and name not in aliases)
    unexpected = sorted(name for name in stored if name not in expected)
    if missing or unexpected:
        parts = [f"missing weights: {', '.join(missing[:5])}" if missing else "",
                 f"unexpected weights: {', '.join(unexpected[:5])}" if unexpected else ""]
        raise CheckpointError(path, "; ".join(part for part in parts if part))
    for name, tensor in stored.items():
        if tuple(tensor.shape) != tuple(expected[name].shape):
            raise CheckpointError(path, f"weight {name} has shape {tuple(tensor.shape)}, the config implies "
                                        f"{tuple(expected[name].shape)}")
    with torch.no_grad():
        model.load_state_dict({name: tensor.float() if tensor.is_floating_point() else tensor
                               for name, tensor in stored.items()}, strict=False)


def _aliases(model: Seq2Seq) -> set[str]:
    """Names in the state dict that share storage with an earlier name (saved only once)."""
    seen, aliases = set(), set()
    for name, tensor in model.state_dict().items():
        key = (tensor.data_ptr(), tuple(tensor.shape))
        if key in seen:
            aliases.add(name)
        seen.add(key)
    return aliases


def _existing_file(path: str | Path) -> Path:
    path = Path(path)
    if not path.exists():
        raise CheckpointError(path, "no such file")
    if path.is_dir():
        raise CheckpointError(path, "a folder, not a checkpoint file")
    if path.stat().st_size == 0:
        raise CheckpointError(path, "the file is empty")
    return path
