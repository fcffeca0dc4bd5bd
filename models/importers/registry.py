"""The importers as one registry: every format of the catalogue (formats.py) with its module, the order detection
asks them in (each module's ``DETECTION``), and detection, inspection and conversion of a foreign checkpoint by
format (models/importers/__init__.py exports these, loading this module on first use)."""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from ..storage.checkpoint import Checkpoint
from ..errors import CheckpointError
from . import opennmt, sockeye
from .contract import Converted, Importer, checkpoint_from
from .formats import FORMAT_CATALOGUE
from .common import Inspection, MissingSettingsError, Settings, Source, find_state_dict
from .hf_common import hf_model_type
from .safe_load import TrustRequiredError

# Every format of the catalogue, in its order (the order `--help` lists them): its name (``--format``) → its module.
# The detection orders below come from each module's ``DETECTION``.
FORMATS = {entry.name: importlib.import_module(f"{__package__}.{entry.module}") for entry in FORMAT_CATALOGUE}


def _detection_order(kind: str) -> tuple[str, ...]:
    ranked = [(getattr(module.DETECTION, kind), name) for name, module in FORMATS.items()]
    return tuple(name for rank, name in sorted(item for item in ranked if item[0] is not None))


# Detection order, as each format declares it (``Detection``): the most specific layouts first.
FILE_ORDER = _detection_order("file")
FOLDER_ORDER = _detection_order("folder")
# Hugging Face folders: a weights file inside one stands for the folder, and their model types name what is imported.
HF_FOLDERS = tuple(name for name, module in FORMATS.items() if module.DETECTION.hf_folder)

__all__ = ["FORMATS", "Converted", "Importer", "Inspection", "MissingSettingsError", "TrustRequiredError", "convert",
           "detect_format", "inspect"]


def detect_format(path: str | Path, *, trust: bool = False) -> str:
    """The format of a file or folder; a :class:`CheckpointError` says why when none fits."""
    return _detect(_source(path, trust))


def inspect(path: str | Path, format: str | None = None, settings: Mapping[str, Any] | None = None, *,
            trust: bool = False) -> Inspection:
    """What the file says (``inferred``) and what it lacks (``missing``, ``vocabularies``): the GUI's
    one dialog is filled from this."""
    source = _source(path, trust)
    module = _module(format or _detect(source))
    return replace(module.inspect(source, Settings(settings, module.ACCEPTED, module.NAME)), found=None)


def convert(path: str | Path, format: str | None = None, settings: Mapping[str, Any] | None = None, *,
            src_vocab: str | Path | None = None, tgt_vocab: str | Path | None = None,
            trust: bool = False) -> Checkpoint:
    """A loaded :class:`Checkpoint` (model in eval mode, tokenizers, provenance) made from a foreign one.

    Save it with ``models.storage.checkpoint.save_checkpoint(out, ckpt.model, ckpt.source_tokenizer,
    ckpt.target_tokenizer, ckpt.provenance)``.
    """
    source = _source(path, trust)
    module = _module(format or _detect(source))
    settings_ = Settings(settings, module.ACCEPTED, module.NAME)
    converted = module.convert(source, settings_, src_vocab=_optional(src_vocab), tgt_vocab=_optional(tgt_vocab))
    checkpoint = checkpoint_from(converted, format_name=module.NAME, settings=settings_)
    from .cached import chat_template_entry  # (cached.py converts through this module)

    checkpoint.chat_template = chat_template_entry(source.path)
    return checkpoint


def _optional(path: str | Path | None) -> str | None:
    return None if path in (None, "") else str(path)


def _module(name: str):
    if name not in FORMATS:
        raise CheckpointError(f"--format {name}", f"unknown format; known: {', '.join(FORMATS)}")
    return FORMATS[name]


def _source(path: str | Path, trust: bool) -> Source:
    path = Path(path)
    if not path.exists():
        raise CheckpointError(path, "no such file or folder")
    # A Hugging Face weights file stands for the folder holding its config and vocabularies.
    weights_file = path.is_file() and path.name in ("model.safetensors", "pytorch_model.bin")
    if weights_file and any(FORMATS[name].claims(Source(path.parent)) for name in HF_FOLDERS):
        path = path.parent
    # Sockeye's params.best (or params.NNNNN) stands for the model folder holding its config and vocabularies.
    if path.is_file() and path.name.startswith("params.") and sockeye.claims(Source(path)):
        path = path.parent
    # OpenNMT-py's -save_format safetensors: the weights stand for the .pt beside them, which holds the rest.
    if path.is_file() and path.suffix == ".safetensors" and path.with_suffix(".pt").is_file() \
            and opennmt.claims(Source(path.with_suffix(".pt"), trust)):
        path = path.with_suffix(".pt")
    return Source(path, trust)


def _detect(source: Source) -> str:
    path = source.path
    if path.is_dir():
        for name in FOLDER_ORDER:
            if FORMATS[name].claims(source):
                return name
        found = hf_model_type(path)
        if found is not None:
            types = (model_type for name in HF_FOLDERS for model_type in FORMATS[name].MODEL_TYPES)
            raise source.error(f"a Hugging Face {found} model; this version imports model types {', '.join(types)}")
        raise source.error("a folder, but not a Hugging Face Marian, BART, mBART, M2M100/NLLB, Pegasus, "
                           "BlenderbotSmall, FSMT, T5 or mT5 model (config.json with its model_type), nor a JoeyNMT "
                           "model folder (config.yaml and a .ckpt), nor the PyTorch seq2seq tutorial's encoder and "
                           "decoder files")
    if path.stat().st_size == 0:
        raise source.error("the file is empty")
    if path.suffix == ".safetensors":
        _refuse_attnviz(path)
    for name in FILE_ORDER:
        if FORMATS[name].claims(source):
            return name
    raise source.error(_unrecognised(source))


def _refuse_attnviz(path: Path) -> None:
    from ..storage.metadata import FORMAT, read_metadata

    try:
        read_metadata(path)
    except CheckpointError:
        return
    raise CheckpointError(path, f"already an {FORMAT} checkpoint: open it directly, there is nothing to convert")


def _unrecognised(source: Source) -> str:
    state = find_state_dict(source.payload)
    kind = "safetensors file" if source.path.suffix == ".safetensors" else "file"
    if state is None:
        found = type(source.payload).__name__
        if isinstance(source.payload, Mapping):
            found = "a dict with keys " + ", ".join(map(str, list(source.payload)[:6]))
        return f"a {kind} holding {found}: no state dict of a format this version imports ({', '.join(FORMATS)})"
    if any(key.endswith("encoder.layers.0.self_attn.q_proj.weight") for key in state):
        return ("looks like the weights of a Hugging Face model (Marian?): convert the folder that holds them "
                "with config.json, vocab.json, source.spm and target.spm")
    keys = ", ".join(sorted(state)[:3])
    return (f"a {kind} whose weights ({keys}, ...) match no format this version imports "
            f"({', '.join(FORMATS)}); pass --format if you know it")
