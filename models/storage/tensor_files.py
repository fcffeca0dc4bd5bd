"""Writing tensors to a safetensors file without a second copy of them (safetensors' own ``save_file`` first
builds every tensor's bytes). Apart from models/storage/files.py, which the app's torch-free session code
imports: this module needs torch."""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import torch

from .files import atomic_output
from .metadata import SAFETENSORS_TYPES


# The element types of safetensors' header by torch's names (models/storage/metadata.py gives their sizes).
SAFETENSORS_DTYPES = {code: name for code, (name, _) in SAFETENSORS_TYPES.items()}
_DTYPE_CODES = {name: code for code, name in SAFETENSORS_DTYPES.items()}


def write_safetensors(path: str | Path, tensors: dict, metadata: dict[str, str]) -> Path:
    """A safetensors file of ``tensors`` (torch) with string ``metadata``, written atomically, each tensor's
    bytes straight from its own memory: a converted model of gigabytes never has a second copy made for the
    file (safetensors' ``save_file`` builds every tensor's bytes first)."""
    with atomic_output(path) as temporary:
        _write_safetensors_file(temporary, tensors, metadata)
    return Path(path)


def _write_safetensors_file(path: Path, tensors: dict, metadata: dict[str, str]) -> None:
    ordered = sorted(tensors.items(), key=lambda item: (-item[1].element_size(), item[0]))  # each one aligned
    with open(path, "wb") as handle:
        handle.write(_safetensors_header_bytes(ordered, metadata))
        for _, tensor in ordered:
            handle.write(_tensor_bytes(tensor))


def _safetensors_header_bytes(ordered: list[tuple[str, Any]], metadata: dict[str, str]) -> bytes:
    """The length prefix and JSON header describing ``ordered``'s tensors laid out one after another."""
    entries: dict[str, Any] = {"__metadata__": dict(metadata)} if metadata else {}
    offset = 0
    for name, tensor in ordered:
        code = _DTYPE_CODES.get(str(tensor.dtype).removeprefix("torch."))
        if code is None:
            raise ValueError(f"tensor {name!r}: safetensors files here hold {', '.join(_DTYPE_CODES)}; "
                             f"got {tensor.dtype}")
        size = tensor.numel() * tensor.element_size()
        entries[name] = {"dtype": code, "shape": list(tensor.shape), "data_offsets": [offset, offset + size]}
        offset += size
    text = json.dumps(entries, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)  # the data starts aligned, as safetensors' own writer pads it
    return struct.pack("<Q", len(text)) + text


def _tensor_bytes(tensor: Any) -> memoryview:
    """The bytes of one tensor as it lies in memory (a copy only of a tensor that is not contiguous)."""
    flat = tensor.detach().to("cpu").contiguous().reshape(-1)
    return memoryview(flat.view(torch.uint8).numpy()) if flat.numel() else memoryview(b"")
