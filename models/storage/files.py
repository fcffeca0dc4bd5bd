"""Writing files so that a good one is never lost, and reading safetensors files whole.

Every writer in attnviz (checkpoints, training states, exports, figures, converted models) goes through
``atomic_output``: the new content is written to a temporary file in the same folder, flushed and synced
to the disk, given the permissions the user's umask asks for, and only then renamed over the old file.
A full disk, a read-only folder or a crash in the middle leaves the old file as it was and no temporary
behind; the failure is one line naming the file (``WriteError``).

Safetensors files are read into memory before their tensors are used, never memory-mapped: a memory-mapped
file that is rewritten while it is read ends the process with SIGBUS, a file read gives a clear error at worst.
Checkpoints are read one tensor at a time (``models.storage.checkpoint.iter_safetensors``), each into its own buffer
that becomes the tensor: loading a model costs one copy of its weights, not the file's bytes plus the tensors.
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
import secrets
import struct
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..errors import AttnvizError, CheckpointError

HEADER_LIMIT = 100 * 1024 * 1024  # a safetensors header (JSON) longer than this is not one
# Tensors in one safetensors file, and '{' in its header (every tensor is an object; strings may hold a few): far
# beyond any model's (a large one has a few thousand tensors), far below what takes seconds to read.
MAX_TENSORS = 1 << 16
HEADER_OBJECTS = 1 << 17


class WriteError(AttnvizError):
    """A file could not be written; the file that was there before is unchanged."""


def _umask_mode() -> int:
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


def check_output_folder(path: str | Path) -> Path:
    """``path``'s folder exists and can be written to (checked before long work: training, conversion)."""
    path = Path(path)
    folder = path.parent
    if path.is_dir():
        raise WriteError(f"{path}: is a folder, not a file name")
    if not folder.is_dir():
        raise WriteError(f"{path}: the folder {folder} does not exist")
    try:  # permissions say little for root or a read-only file system: try it
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as error:
        raise WriteError(f"{path}: cannot write in {folder} ({error.strerror or error})") from None
    return path


@contextlib.contextmanager
def atomic_output(path: str | Path) -> Iterator[Path]:
    """Yield a temporary path to write ``path``'s new content to; on success it replaces ``path``."""
    path = Path(path)
    check_output_folder(path)
    temporary = _temporary_name(path)
    try:  # created inside the ``try``: an interrupt (Ctrl+C, SIGTERM) at any line leaves no temporary behind
        while True:
            try:
                os.close(os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
                break
            except FileExistsError:  # another writer's name (48 random bits): draw again
                temporary = _temporary_name(path)
        yield temporary
        if not temporary.is_file() or temporary.stat().st_size == 0:
            raise WriteError(f"{path}: nothing was written; the file there before is unchanged")
        with open(temporary, "rb+") as written:
            os.fsync(written.fileno())
        os.chmod(temporary, _umask_mode())
        os.replace(temporary, path)
        _sync_folder(path.parent)
    except OSError as error:
        raise WriteError(f"{path}: could not write it ({error.strerror or error}); the file there before is "
                         "unchanged") from None
    finally:
        temporary.unlink(missing_ok=True)


def _temporary_name(path: Path) -> Path:
    return path.parent / f".{path.name}.{secrets.token_hex(6)}.partial"


def remove_stale_partials(path: str | Path) -> list[Path]:
    """Delete the temporary files a writer of ``path`` killed outright (SIGKILL, power loss) left beside it;
    called by the one process that owns ``path`` (a training run) before it writes there again."""
    path = Path(path)
    stale = sorted(path.parent.glob(f".{glob.escape(path.name)}.*.partial"))
    for found in stale:
        found.unlink(missing_ok=True)
    return stale


def _sync_folder(folder: Path) -> None:
    with contextlib.suppress(OSError):  # not every file system syncs folders
        handle = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(handle)
        finally:
            os.close(handle)


def write_bytes(path: str | Path, data: bytes) -> Path:
    with atomic_output(path) as temporary:
        with open(temporary, "wb") as handle:
            handle.write(data)
    return Path(path)


def write_text(path: str | Path, text: str) -> Path:
    return write_bytes(path, text.encode("utf-8"))


_REQUIRED = object()


def read_json(path: str | Path, *, missing: Any = _REQUIRED, what: str = "JSON") -> Any:
    """The JSON value in ``path``; a file that cannot be read or parsed is a :class:`CheckpointError` naming it
    ("cannot be read as JSON (…)", ``what`` naming the kind of file). Given ``missing``, a file that does not exist
    reads as it."""
    path = Path(path)
    if missing is not _REQUIRED and not path.is_file():
        return missing
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise CheckpointError(path, f"cannot be read as {what} ({error})") from None


def peek_json(path: str | Path) -> Any:
    """The JSON value in ``path``, or None where there is no such file or it does not parse: what an importer
    looks at to decide whether a folder is its format, where a bad file is not yet an error."""
    try:
        return read_json(path, missing=None)
    except CheckpointError:
        return None


def existing_file(path: str | Path) -> Path:
    """``path`` if it is a file with something in it, else a one-line ``CheckpointError``."""
    path = Path(path)
    if not path.exists():
        raise CheckpointError(path, "no such file")
    if path.is_dir():
        raise CheckpointError(path, "a folder, not a checkpoint file")
    if path.stat().st_size == 0:
        raise CheckpointError(path, "the file is empty")
    return path


def read_safetensors_bytes(path: str | Path) -> bytes:
    """The whole file, or a one-line ``CheckpointError`` (missing, a folder, unreadable, empty)."""
    path = existing_file(path)
    try:
        data = path.read_bytes()
    except OSError as error:
        raise CheckpointError(path, f"cannot be read ({error.strerror or error})") from None
    if not data:
        raise CheckpointError(path, "the file is empty")
    return data


def safetensors_header(path: str | Path, data: bytes) -> dict[str, Any]:
    """The JSON header of safetensors ``data`` (every tensor's dtype, shape and offsets, and ``__metadata__``)."""
    if len(data) < 8:
        raise CheckpointError(path, "not a readable safetensors file (shorter than its header)")
    (size,) = struct.unpack("<Q", data[:8])
    if size > HEADER_LIMIT or size > len(data) - 8:
        raise CheckpointError(path, "not a readable safetensors file (its header length is wrong)")
    objects = data.count(b"{", 8, 8 + size)  # counted in C: parsing a million small objects takes seconds
    if objects > HEADER_OBJECTS:
        raise CheckpointError(path, f"not a readable safetensors file (its header holds {objects:,} objects; at "
                                    f"most {HEADER_OBJECTS:,})")
    # Each tensor has one "data_offsets" key (a name holding those words has its quotes escaped): counted in C
    # too, as parsing 100,000 tensors takes a third of a second, and a command reads a header more than once.
    listed = data.count(b'"data_offsets"', 8, 8 + size)
    if listed > MAX_TENSORS:
        raise CheckpointError(path, f"not a readable safetensors file (its header lists {listed:,} tensors; at most "
                                    f"{MAX_TENSORS:,})")
    try:
        header = json.loads(data[8:8 + size])
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as error:
        raise CheckpointError(path, f"not a readable safetensors file (its header is not JSON: {error})") from None
    if not isinstance(header, dict):
        raise CheckpointError(path, "not a readable safetensors file (its header is not a JSON object)")
    if len(header) > MAX_TENSORS + 1:
        raise CheckpointError(path, f"not a readable safetensors file (its header lists {len(header) - 1:,} tensors; "
                                    f"at most {MAX_TENSORS:,})")
    return header


def read_header(path: str | Path) -> dict[str, Any]:
    """Only the header of a safetensors file (names, dtypes, shapes, metadata), without reading the weights."""
    path = existing_file(path)
    try:
        with open(path, "rb") as handle:
            start = handle.read(8)
            if not start:
                raise CheckpointError(path, "the file is empty")
            size = struct.unpack("<Q", start)[0] if len(start) == 8 else 0
            data = start + handle.read(min(size, HEADER_LIMIT))
    except OSError as error:
        raise CheckpointError(path, f"cannot be read ({error.strerror or error})") from None
    return safetensors_header(path, data)


def read_safetensors(path: str | Path) -> tuple[dict, dict[str, str]]:
    """Every tensor (torch) of a safetensors file and its metadata, read whole into memory first."""
    from safetensors import SafetensorError
    from safetensors.torch import load

    data = read_safetensors_bytes(path)
    header = safetensors_header(path, data)
    metadata = header.get("__metadata__") or {}
    try:
        tensors = load(data)
    except (SafetensorError, ValueError, OverflowError) as error:
        text = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise CheckpointError(path, f"not a readable safetensors file ({text})") from None
    return tensors, metadata if isinstance(metadata, dict) else {}
