"""A foreign checkpoint (a Hugging Face folder, a toolkit's file) given where an attnviz checkpoint is asked for:
converted once with what the file itself says (as the window opens a dropped folder), written into a cache folder,
and read from there the next time, until the foreign files change.

A file that needs answers (hyper-parameters it lacks, vocabularies, trust) is one line saying what to give to
``attnviz convert``, which writes a checkpoint of the user's choosing.
"""

from __future__ import annotations

from pathlib import Path

from typing import Any

from ..storage.checkpoint import save_checkpoint
from ..storage.converted import cached_path
from ..errors import ChatTemplateError, CheckpointError
from ..text.chat import load_chat_template
from .common import MissingSettingsError

CONVERT_HINT = "convert it once with: attnviz convert {path} -o MODEL.safetensors"


def converted_file(path: str | Path, cache: str | Path, *, name: str | None = None,
                   origin: dict[str, str] | None = None) -> Path:
    """The attnviz checkpoint made from the foreign checkpoint ``path``: from ``cache`` when it was converted
    before and its files have not changed since, else converted now (``convert`` without settings) and kept
    there (as ``name``, ``cached_path``; ``origin``: what else the provenance says of where it came from, e.g. a
    Hugging Face model id). A file that lacks settings or vocabularies is a one-line ``CheckpointError`` naming
    ``attnviz convert``; one that needs trust, the importers' ``TrustRequiredError``."""
    from . import convert

    path = Path(path)
    cached = cached_path(path, cache, name=name)
    if cached.is_file():
        return cached
    try:
        checkpoint = convert(path)
    except MissingSettingsError as failure:
        raise CheckpointError(failure.path, f"{failure.reason}; {CONVERT_HINT.format(path=path)} and those "
                                            "options") from None
    cached.parent.mkdir(parents=True, exist_ok=True)
    provenance = {**checkpoint.provenance, **(origin or {}), "converted_from": str(path.resolve())}
    return save_checkpoint(cached, checkpoint.model, source_tokenizer=checkpoint.source_tokenizer,
                           target_tokenizer=checkpoint.target_tokenizer, provenance=provenance,
                           chat_template=chat_template_entry(path))


def chat_template_entry(path: str | Path) -> dict[str, Any] | None:
    """The chat template of the foreign model folder ``path`` with its special tokens, as a converted checkpoint
    keeps it (models/text/chat.py); None for a file, a folder without one, or one whose template files cannot be
    read (the model converts all the same: only a chat prompt needs the template)."""
    if not Path(path).is_dir():
        return None
    try:
        template = load_chat_template(path)
    except ChatTemplateError:
        return None
    return template.to_dict() if template is not None else None
