"""Import checkpoints trained with other people's code: one module per format, each converting the foreign
weights, hyper-parameters and vocabularies into an attnviz config, model and tokenizers, exactly
(docs/checkpoint-formats.md says what each format maps). Each module keeps the ``Importer`` contract and
describes its conversion; one pipeline turns every description into a checkpoint (contract.py).

    detect_format(path)                      -> a name in FORMATS ("marian", "hf-bart", ...)
    inspect(path, ...)                       -> Inspection: what the file says and what it lacks
    convert(path, format=None, settings=..., src_vocab=..., tgt_vocab=..., trust=False) -> Checkpoint

What a file does not hold (``nhead`` of an nn.Transformer, the LayerNorm placement of an old jadore
checkpoint, vocabularies) is given as ``settings`` (``--set KEY=VALUE``, keys named as in the source
code's constructor) and vocabulary files; :class:`MissingSettingsError` lists what to give with the values
that were read, and the answers are kept in the converted checkpoint's provenance (``imported_from``).
Files are read without running code from them (see safe_load); ``trust=True`` opens whole pickled models
with inert stubs in place of their classes.
"""

from __future__ import annotations

import importlib

from .formats import FORMAT_NAMES

# The registry (registry.py) loads every importer, and torch with them, on first use of one of its names: the
# formats' names (formats.py) are read without it (``attnviz convert --help``).
_REGISTRY = ("FORMATS", "FILE_ORDER", "FOLDER_ORDER", "HF_FOLDERS", "Converted", "Importer", "Inspection",
             "MissingSettingsError", "TrustRequiredError", "convert", "detect_format", "inspect")


def __getattr__(name: str):
    if name in _REGISTRY:
        return getattr(importlib.import_module(".registry", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["FORMATS", "FORMAT_NAMES", "Converted", "Importer", "Inspection", "MissingSettingsError",
           "TrustRequiredError", "convert", "detect_format", "inspect"]
