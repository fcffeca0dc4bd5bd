"""Where a foreign checkpoint converted for ``-c`` is kept (models/importers/cached.py converts it), found without
torch: a cache hit opens as fast as any attnviz checkpoint.

``CACHE/FINGERPRINT/NAME.safetensors``: the fingerprint follows the foreign files (their names, sizes and
modification times), the name is the original's (figure titles and ``info`` name the model, not a hash).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from .metadata import FORMAT_VERSION, SUFFIX

MAX_FINGERPRINT_FILES = 10_000  # files past this many (sorted by name) are not looked at


def cached_path(path: str | Path, cache: str | Path, *, name: str | None = None) -> Path:
    """The file the checkpoint converted from ``path`` has (or will have) in ``cache``, called ``name`` (a Hugging
    Face model id's last part: its folder in the Hugging Face cache is named by a commit) or by ``path``'s name."""
    path = Path(path)
    return Path(cache) / fingerprint(path) / f"{_safe_name(name or path.name)}{SUFFIX}"


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


def _safe_name(text: str) -> str:
    """``text`` kept to letters, digits, ``-``, ``_`` and ``.`` (a cache file's readable part)."""
    name = "".join(char if char.isascii() and (char.isalnum() or char in "-_.") else "_" for char in text)
    return (name or "model")[:60].lstrip(".") or "model"

