"""An attnviz checkpoint's header read without torch: the metadata document, the tensors' shapes, and the
description ``attnviz info`` prints (``describe_file``), so that describing a file costs no torch import.

The checkpoint file itself (weights, loading, saving) is models/storage/checkpoint.py, which builds on this.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import struct
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import AttnvizError, CheckpointError, ForeignCheckpointError
from ..nn.config import attention_shape, config_from_dict
from ..nn.validation import check_against_weights
from .files import existing_file, read_header

if TYPE_CHECKING:
    from ..text.tokenizers import Tokenizer

FORMAT = "attnviz"
FORMAT_VERSION = 1
SUFFIX = ".safetensors"
MAX_JSON_DEPTH = 64  # far deeper than any config, tokenizer or provenance attnviz writes


def read_metadata(path: str | Path) -> dict[str, Any]:
    """The decoded metadata document of an attnviz checkpoint (weights are not read)."""
    path = existing_file(path)
    raw = read_header(path).get("__metadata__") or {}
    if not isinstance(raw, dict) or not all(isinstance(value, str) for value in raw.values()):
        raise CheckpointError(path, "not a readable safetensors file (its metadata is not a map of strings)")
    if raw.get("format") != FORMAT:
        raise ForeignCheckpointError(path, "a safetensors file, but not an attnviz checkpoint (no 'format: attnviz' "
                                    "metadata); foreign checkpoints are imported with 'attnviz convert'")
    version = raw.get("format_version", "")
    if not (version.isascii() and version.isdigit()) or len(version) > 6 or int(version) > FORMAT_VERSION:
        shown = version if len(version) <= 20 else version[:20] + "..."
        raise CheckpointError(path, f"checkpoint format version {shown!r} is not supported "
                                    f"(this attnviz reads up to {FORMAT_VERSION})")
    document: dict[str, Any] = {"format_version": int(version)}
    for key, kind in (("config", dict), ("tokenizers", dict), ("provenance", dict)):
        if key not in raw:
            raise CheckpointError(path, f"the metadata has no '{key}' entry")
        document[key] = _json_entry(path, key, raw[key])
        if not isinstance(document[key], kind):
            raise CheckpointError(path, f"the metadata entry '{key}' must be a JSON object; got "
                                        f"{type(document[key]).__name__}")
    if "chat_template" in raw:  # a chat-tuned model's template (models/text/chat.py ChatTemplate.to_dict)
        document["chat_template"] = _json_entry(path, "chat_template", raw["chat_template"])
    return document


def is_native(path: str | Path) -> bool:
    """An attnviz checkpoint (other files and folders are foreign: the importers convert them); a damaged
    ``.safetensors`` file counts as one, and loading it says what is wrong."""
    path = Path(path)
    if not (path.suffix == SUFFIX and path.is_file()):
        return False
    try:
        read_metadata(path)
    except ForeignCheckpointError:
        return False
    except CheckpointError:
        return True
    return True


def _json_entry(path: Path, key: str, text: str) -> Any:
    """One metadata entry decoded; too deep a nesting, too long a number or bad JSON is one line."""
    # No deeper than it has brackets (counted in C): the character-by-character scan only for a text that could be.
    depth = _json_depth(text) if text.count("[") + text.count("{") > MAX_JSON_DEPTH else 0
    if depth > MAX_JSON_DEPTH:
        raise CheckpointError(path, f"the metadata entry '{key}' is nested {depth} levels deep "
                                    f"(at most {MAX_JSON_DEPTH})")
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as error:  # JSONDecodeError, or an integer with too many digits
        raise CheckpointError(path, f"the metadata entry '{key}' is not valid JSON ({first_line(error)})") from None


def _json_depth(text: str) -> int:
    """The deepest nesting of brackets outside strings, found without parsing (no recursion)."""
    depth = deepest = 0
    in_string = escaped = False
    for char in text:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "]}":
            depth -= 1
    return deepest


def header_parts(path: Path, document: dict[str, Any]) -> tuple[Any, Tokenizer, Tokenizer, dict[str, tuple[int, ...]]]:
    """The config and the two tokenizers a checkpoint's metadata describes, and its tensors' shapes, each checked
    against the others as far as the header tells (the vocabularies against the config, the config's least size
    against the stored numbers); whether every weight has the shape the config implies is checked when the model
    is built (models/storage/checkpoint.py)."""
    from ..text.tokenizers import Tokenizer  # sentencepiece and the tokenizers library: only when a file is read

    try:
        config = config_from_dict(document["config"])
        tokenizers = document["tokenizers"]
        source = Tokenizer.from_dict(tokenizers["source"])
        target = Tokenizer.from_dict(tokenizers["target"])
    except AttnvizError as error:
        raise CheckpointError(path, f"bad metadata: {error}") from None
    except (KeyError, TypeError, AttributeError, ValueError) as error:
        raise CheckpointError(path, f"bad metadata: missing tokenizer entry or a malformed one "
                                    f"({type(error).__name__}: {first_line(error)[:120]})") from None
    if source.vocab_size != config.src_vocab_size or target.vocab_size != config.tgt_vocab_size:
        raise CheckpointError(path, f"the tokenizers' vocabularies ({source.vocab_size}, {target.vocab_size}) do not "
                                    f"match the model's ({config.src_vocab_size}, {config.tgt_vocab_size})")
    shapes = stored_shapes(path)
    check_against_weights(path, config, shapes)
    return config, source, target, shapes


FLOATING = ("F64", "F32", "F16", "BF16")


# safetensors' element types (little-endian on disk, as on every platform torch runs on here): torch's name for
# each, and its bytes
SAFETENSORS_TYPES = {"F64": ("float64", 8), "F32": ("float32", 4), "F16": ("float16", 2), "BF16": ("bfloat16", 2),
                     "I64": ("int64", 8), "I32": ("int32", 4), "I16": ("int16", 2), "I8": ("int8", 1),
                     "U8": ("uint8", 1), "BOOL": ("bool", 1)}


def stored_shapes(path: Path) -> dict[str, tuple[int, ...]]:
    """Name and shape of every tensor in the file, from its header only (no weights are read), each checked to be
    of a known type and to describe bytes the file holds (``tensor_place``), and to be floating: every tensor an
    attnviz checkpoint stores is a model's floating weight (the models keep no other state), so integers,
    booleans or complex numbers in its place are one line naming the tensor."""
    header, data_size = read_header(path), data_bytes(path)
    shapes = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        dtype = tensor_place(path, name, entry, data_size=data_size)[2]
        if entry["dtype"] not in FLOATING:
            raise CheckpointError(path, f"weight {name} is stored as {dtype}; the model needs floating-point "
                                        f"numbers there")
        shapes[name] = tuple(entry["shape"])
    return shapes


def data_bytes(path: Path) -> int:
    """Bytes of a safetensors file after its header (the tensors' data)."""
    try:
        with open(path, "rb") as handle:
            length = handle.read(8)
            file_size = handle.seek(0, os.SEEK_END)
    except OSError as error:
        raise CheckpointError(path, f"cannot be read ({error.strerror or error})") from None
    if len(length) < 8:
        raise CheckpointError(path, "the file ends early (cut short while copying, or rewritten while read)")
    return file_size - 8 - struct.unpack("<Q", length)[0]


def tensor_place(path: Path, name: str, entry: Any, *, data_size: int) -> tuple[int, int, str, int]:
    """(first byte, end, torch's dtype name, element count) of one tensor of the header, checked to have a valid
    shape and place and a known dtype whose bytes fill exactly that place, inside the file: a header cannot make
    a model be built (or memory be asked for) that its file does not have."""
    shape = entry.get("shape") if isinstance(entry, dict) else None
    if not isinstance(shape, list) or not all(isinstance(size, int) and not isinstance(size, bool) and size >= 0
                                              for size in shape):
        raise CheckpointError(path, f"the weights cannot be read (tensor {name[:60]!r} has no valid shape)")
    offsets = entry.get("data_offsets")
    if (not isinstance(offsets, list) or len(offsets) != 2
            or not all(isinstance(value, int) and not isinstance(value, bool) for value in offsets)
            or not 0 <= offsets[0] <= offsets[1]):
        raise CheckpointError(path, f"the weights cannot be read (tensor {name[:60]!r} has no valid place in the file)")
    known = SAFETENSORS_TYPES.get(entry.get("dtype"))
    if known is None:
        raise CheckpointError(path, f"tensor {name[:60]!r} has an unknown dtype {str(entry.get('dtype'))[:20]!r}")
    begin, end = offsets
    count = math.prod(shape)
    if end > data_size or end - begin != count * known[1]:
        raise CheckpointError(path, f"the weights cannot be read (tensor {name[:60]!r} does not fit "
                                    f"its place in the file: cut short?)")
    return begin, end, known[0], count


def describe_file(path: str | Path) -> dict[str, Any]:
    """What ``attnviz info`` prints, from the file's header alone (no torch, no weight read): config, tokenizers
    and provenance from the metadata, the parameter count from the stored shapes (a checkpoint stores each
    parameter once, tied ones under one name, and nothing else). The same document as ``describe_checkpoint`` of
    the loaded model (tests/test_cli_startup.py compares them)."""
    path = existing_file(path)
    document = read_metadata(path)
    config, source, target, shapes = header_parts(path, document)
    parameters = sum(math.prod(shape) for shape in shapes.values())
    return description(path, config, (source, target), parameters=parameters, provenance=document["provenance"])


def description(path: Path | None, config: Any, tokenizers: tuple[Tokenizer, Tokenizer], *, parameters: int,
                provenance: dict[str, Any]) -> dict[str, Any]:
    """What ``attnviz info`` prints and the window's model panel shows: architecture, sizes, attention kinds,
    tokenizers (a character vocabulary with its characters), the steps it was trained for, provenance."""
    source, target = tokenizers
    return {
        "file": str(path),
        "arch": config.arch,
        "parameters": parameters,
        "attention_kinds": list(attention_shape(config)),
        "config": dataclasses.asdict(config),
        "source_tokenizer": _tokenizer_summary(source),
        "target_tokenizer": _tokenizer_summary(target),
        "steps": provenance.get("steps"),
        "provenance": provenance,
    }


def _tokenizer_summary(side: Tokenizer) -> dict[str, Any]:
    described: dict[str, Any] = {"kind": side.kind, "vocab_size": side.vocab_size}
    if hasattr(side, "characters"):
        described["characters"] = "".join(side.characters)
    if side.languages:
        described.update(language=side.language, languages=sorted(side.languages))
    return described


def first_line(error: Exception) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__
