"""A foreign checkpoint (a Hugging Face folder, a toolkit's file) given where an attnviz checkpoint is asked for:
converted once with what the file itself says (as the window opens a dropped folder), written into a cache folder,
and read from there the next time, until the foreign files change.

A file that needs answers (hyper-parameters it lacks, vocabularies, trust) is one line saying what to give to
``attnviz convert``, which writes a checkpoint of the user's choosing.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from ..storage.checkpoint import save_checkpoint
from ..storage.metadata import FORMAT_VERSION, SUFFIX
from ..errors import CheckpointError
from .common import MissingSettingsError

CONVERT_HINT = "convert it once with: attnviz convert {path} -o MODEL.safetensors"
MAX_FINGERPRINT_FILES = 10_000  # a folder with more files than this is not a model folder: fingerprinted by its name


def converted_file(path: str | Path, cache: str | Path) -> Path:
    """The attnviz checkpoint made from the foreign checkpoint ``path``: from ``cache`` when it was converted
    before and its files have not changed since, else converted now (``convert`` without settings) and kept
    there. A file that lacks settings or vocabularies is a one-line ``CheckpointError`` naming
    ``attnviz convert``; one that needs trust, the importers' ``TrustRequiredError``."""
    from . import convert

    path = Path(path)
    cached = Path(cache) / fingerprint(path) / f"{_safe_name(path)}{SUFFIX}"  # named as the original (figure titles)
    if cached.is_file():
        return cached
    try:
        checkpoint = convert(path)
    except MissingSettingsError as failure:
        raise CheckpointError(failure.path, f"{failure.reason}; {CONVERT_HINT.format(path=path)} and those "
                                            "options") from None
    cached.parent.mkdir(parents=True, exist_ok=True)
    provenance = {**checkpoint.provenance, "converted_from": str(path.resolve())}
    return save_checkpoint(cached, checkpoint.model, source_tokenizer=checkpoint.source_tokenizer,
                           target_tokenizer=checkpoint.target_tokenizer, provenance=provenance)


def fingerprint(path: Path) -> str:
    """What identifies ``path``'s content cheaply: its absolute name; the name, size and modification time of each
    file the importers may read with it (under a folder; beside a file: a toolkit's vocabularies, its
    sentencepiece model, a Hugging Face weights file's config), so that a changed one converts again; and the
    checkpoint format's version."""
    digest = hashlib.sha256(f"{path.resolve()}\0{FORMAT_VERSION}".encode("utf-8", "surrogateescape"))
    if path.is_file():
        root, files = path.parent, sorted(item for item in path.parent.iterdir() if item.is_file())
    else:
        root, files = path, sorted(item for item in path.rglob("*") if item.is_file())
    for item in files[:MAX_FINGERPRINT_FILES]:
        status = item.stat()
        digest.update(f"\0{item.relative_to(root)}\0{status.st_size}\0{status.st_mtime_ns}"
                      .encode("utf-8", "surrogateescape"))
    return digest.hexdigest()[:16]


def _safe_name(path: Path) -> str:
    """``path``'s last name, kept to letters, digits, ``-``, ``_`` and ``.`` (a cache file's readable part)."""
    name = "".join(char if char.isascii() and (char.isalnum() or char in "-_.") else "_" for char in path.name)
    return (name or "model")[:60].lstrip(".") or "model"

