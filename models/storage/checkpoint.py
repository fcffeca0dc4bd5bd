"""The attnviz checkpoint: one ``.safetensors`` file, weights plus a JSON document in its metadata.

Metadata keys (all strings, as safetensors requires): ``format`` = ``"attnviz"``, ``format_version``,
``config`` (the architecture config), ``tokenizers`` (``{"source": ..., "target": ...}``, each the
tokenizer's ``to_dict``), ``provenance`` (corpus, steps, metrics, command...), and for a model converted from a
folder with a chat template, ``chat_template`` (models/text/chat.py ``ChatTemplate.to_dict``). Loading reads only this
file, never unpickles, and reports every problem as a one-line ``CheckpointError`` naming the file.
Weights shared between modules (tied embeddings) are stored once.
"""

from __future__ import annotations

import json
import os
import struct
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

import torch
from torch import nn

from ..nn.base import Seq2Seq
from ..nn.build import build_model, parameters_on_meta
from ..nn.precisions import PRECISIONS
from ..nn.config import config_to_dict
from ..errors import CheckpointError, NumericalWarning
from .files import existing_file, read_header
from .metadata import FORMAT, FORMAT_VERSION, data_bytes, description, header_parts, read_metadata, tensor_place
from .metadata import SUFFIX, describe_file  # noqa: F401 (the checkpoint file's names, read without torch there)
from .tensor_files import write_safetensors
from ..text.tokenizers import Tokenizer
from ..nn.validation import check_shapes



@dataclass
class Checkpoint:
    """A loaded checkpoint: the model (in eval mode) and what it needs to read and write text."""

    model: Seq2Seq
    source_tokenizer: Tokenizer
    target_tokenizer: Tokenizer
    provenance: dict[str, Any] = field(default_factory=dict)
    path: Path | None = None
    chat_template: dict[str, Any] | None = None  # a chat-tuned model's (models/text/chat.py ChatTemplate.to_dict)

    @property
    def config(self):
        return self.model.config


def describe_checkpoint(checkpoint: Checkpoint) -> dict[str, Any]:
    """What ``attnviz info`` prints and the window's model panel shows (``metadata.description``), of a loaded
    checkpoint."""
    return description(checkpoint.path, checkpoint.config, (checkpoint.source_tokenizer, checkpoint.target_tokenizer),
                       parameters=checkpoint.model.parameter_count(), provenance=checkpoint.provenance)


def save_checkpoint(path: str | Path, model: Seq2Seq, source_tokenizer: Tokenizer, target_tokenizer: Tokenizer,
                    provenance: dict[str, Any] | None = None, *, dtype: torch.dtype | None = None,
                    chat_template: dict[str, Any] | None = None) -> Path:
    """Write ``path`` atomically (models/storage/files.py: a crash or a full disk never leaves half a file), the
    floating tensors as ``dtype`` (default: as the model holds them: a model converted from a bfloat16 folder keeps
    its weights in bfloat16, the file's own numbers, at half the size);
    ``chat_template``: the model's chat template with its special tokens (``ChatTemplate.to_dict``), if it has one."""
    path = Path(path)
    tensors = unique_tensors(model, dtype)
    metadata = {
        "format": FORMAT,
        "format_version": str(FORMAT_VERSION),
        "config": json.dumps(config_to_dict(model.config)),
        "tokenizers": json.dumps({"source": source_tokenizer.to_dict(), "target": target_tokenizer.to_dict()}),
        "provenance": json.dumps(provenance or {}),
    }
    if chat_template is not None:
        metadata["chat_template"] = json.dumps(chat_template)
    return write_safetensors(path, tensors, metadata)


def unique_tensors(model: Seq2Seq, dtype: torch.dtype | None = torch.float32) -> dict[str, torch.Tensor]:
    """The state dict on the CPU with each shared tensor (tied embeddings) once under its first name, floats
    as ``dtype`` (None: as they are; safetensors refuses aliases)."""
    tensors, seen = {}, set()
    for name, tensor in model.state_dict().items():
        key = (tensor.data_ptr(), tuple(tensor.shape))
        if key in seen:
            continue
        seen.add(key)
        value = tensor.detach().to("cpu")
        tensors[name] = value.to(dtype) if value.is_floating_point() and dtype is not None else value
    return {name: tensor.contiguous() for name, tensor in tensors.items()}


WEIGHT_DTYPES = {name: getattr(torch, name) for name in PRECISIONS}  # the precisions by name → torch's types


def weights_name(model: torch.nn.Module) -> str:
    """The precision ``model``'s weights are kept in: a name of ``WEIGHT_DTYPES``."""
    dtype = next(model.parameters()).dtype
    return next((name for name, known in WEIGHT_DTYPES.items() if known == dtype), str(dtype))


def load_checkpoint(path: str | Path, device: str | torch.device = "cpu", *, dtype: torch.dtype = torch.float32,
                    progress: Callable[[int, int], object] | None = None) -> Checkpoint:
    """Build the model the file describes and load its weights; the model comes back in eval mode.

    The config is compared with the weights' shapes in the file's header before any module is built, so a
    config that claims more than the file holds costs no memory; every weight's shape is checked before
    any weight is read. The model is built without weights (they would only be overwritten) and each tensor
    read from the file becomes the model's parameter: one copy of the weights at the peak, kept as ``dtype``
    (``WEIGHT_DTYPES``: float16 or bfloat16 halve the memory; the model then computes in that precision, and
    its attention is still traced and exported as float32, its log-probabilities computed in float32).
    ``progress(tensors read, tensors in all)`` is called as the weights are read (a window shows it)."""
    if dtype not in WEIGHT_DTYPES.values():
        raise ValueError(f"weights are kept as {', '.join(WEIGHT_DTYPES)}; got {dtype}")
    path = existing_file(path)
    document = read_metadata(path)
    model, source, target = _model_without_weights(path, document)
    check_memory_for(path, model, dtype=dtype)  # the host's memory, or the peak of a failed move to a device
    _load_weights(path, model, dtype=dtype, device=torch.device(device), progress=progress)
    model = model.to(dtype)  # the buffers computed from the config (position tables) alike
    return Checkpoint(model.to(device).eval(), source, target_tokenizer=target, provenance=document["provenance"],
                      path=path, chat_template=document.get("chat_template"))


def _model_without_weights(path: Path, document: dict[str, Any]) -> tuple[Seq2Seq, Tokenizer, Tokenizer]:
    """The model a checkpoint's metadata describes, with its parameters on the meta device (shapes only: no
    memory, no random initialisation; buffers computed from the config, the position tables, are real),
    checked against the header's shapes; and its two tokenizers."""
    config, source, target, shapes = header_parts(path, document)  # every stored tensor floating, in its place
    with parameters_on_meta():
        model = build_model(config)
    check_shapes(path, model, stored=shapes, aliases=_aliases(model))
    return model, source, target


def check_memory_for(path: Path, model: Seq2Seq, *, dtype: torch.dtype) -> None:
    """Refuse in one line, before anything is read, the weights of ``model`` (built on meta: sizes only) that
    would not fit in the memory the system has left (they would get the process killed): what they need as
    ``dtype`` plus the chunk a converted tensor is read through. Where the system does not say what is available,
    nothing is checked."""
    available = available_memory()
    if available is None:
        return
    count = sum(param.numel() for param in model.parameters())  # a tied weight once
    needed = count * torch.empty((), dtype=dtype).element_size() + CONVERT_CHUNK
    if needed > available:
        hint = "; try --dtype bfloat16 (half the memory)" if dtype == torch.float32 else ""
        raise CheckpointError(path, f"the weights need ~{needed / 2**30:.1f} GB as {str(dtype).split('.')[-1]}, "
                                    f"{available / 2**30:.1f} GB of memory is free{hint}")


def check_memory_for_bytes(path: Path, needed: int) -> None:
    """Refuse in one line, before they are read, ``needed`` bytes of a file's tensors (a foreign checkpoint's, read
    whole) that would not fit in the memory the system has left."""
    available = available_memory()
    if available is not None and needed > available:
        raise CheckpointError(path, f"its tensors need ~{needed / 2**30:.1f} GB of memory, "
                                    f"{available / 2**30:.1f} GB is free")


def stored_bytes(path: Path) -> int:
    """Bytes of all the tensors of a safetensors file, from its header (each checked to fit its place in the file)."""
    data_size = data_bytes(path)
    return sum(end - begin for begin, end, _, _ in (_tensor_place(path, name, entry, data_size=data_size)
                                                   for name, entry in read_header(path).items()
                                                   if name != "__metadata__"))


def available_memory() -> int | None:
    """Bytes of memory the system can still give this process without swapping (Linux: MemAvailable), and no
    more than the process's own limits leave it (``ulimit -v``: its address space, ``ulimit -d``: its data), or
    None where neither can be read."""
    available = _system_available()
    for limit, used in _process_limits():
        left = max(0, limit - used)
        available = left if available is None else min(available, left)
    return available


def _system_available() -> int | None:
    try:
        with open("/proc/meminfo", encoding="ascii") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def _process_limits() -> list[tuple[int, int]]:
    """(limit, bytes in use) of each memory limit set on this process (Linux: from /proc/self/status)."""
    try:
        import resource

        limits = {"VmSize": resource.getrlimit(resource.RLIMIT_AS)[0],
                  "VmData": resource.getrlimit(resource.RLIMIT_DATA)[0]}
        with open("/proc/self/status", encoding="ascii") as status:
            used = {line.split(":")[0]: int(line.split()[1]) * 1024 for line in status
                    if line.split(":")[0] in limits}
    except (ImportError, OSError, ValueError, IndexError):
        return []
    return [(limit, used[name]) for name, limit in limits.items()
            if limit != resource.RLIM_INFINITY and name in used]


def _tensor_place(path: Path, name: str, entry: Any, *, data_size: int) -> tuple[int, int, torch.dtype, int]:
    """:func:`models.storage.metadata.tensor_place` with torch's dtype."""
    begin, end, dtype_name, count = tensor_place(path, name, entry, data_size=data_size)
    return begin, end, getattr(torch, dtype_name), count


def _load_weights(path: Path, model: Seq2Seq, *, dtype: torch.dtype, device: torch.device = torch.device("cpu"),
                  progress: Callable[[int, int], object] | None = None) -> None:
    """Read the weights one tensor at a time (floats as ``dtype``) into the model built on meta, each straight into
    ``device``'s memory (:func:`iter_safetensors`); their names and shapes were checked against the model already.
    Each becomes the parameter of every module that shares it (tied weights are stored once, under their first
    name); persistent buffers are copied in."""
    first_name: dict[int, str] = {}
    sharing: dict[str, list[tuple[nn.Module, str]]] = {}
    for module_name, module in model.named_modules(remove_duplicate=False):
        for name, param in module._parameters.items():
            if param is not None:
                first = first_name.setdefault(id(param), f"{module_name}.{name}" if module_name else name)
                sharing.setdefault(first, []).append((module, name))
    buffers = dict(model.named_buffers())
    broken = []
    total = len(sharing) + len(buffers.keys() & model.state_dict().keys())  # what the file holds
    for done, (name, tensor) in enumerate(iter_safetensors(path, dtype=dtype, device=device), start=1):
        if not _finite(tensor):
            broken.append(name)
        if name in buffers:
            with torch.no_grad():
                buffers[name].copy_(tensor)
        else:
            owners = sharing.pop(name)
            module, attribute = owners[0]
            param = nn.Parameter(tensor, requires_grad=module._parameters[attribute].requires_grad)
            for module, attribute in owners:
                module._parameters[attribute] = param
        if progress is not None:
            progress(done, total)
    if sharing:  # the header was checked against the model: only a file changed since can get here
        raise CheckpointError(path, f"the weights cannot be read (missing {', '.join(sorted(sharing)[:5])})")
    _warn_not_finite(path, broken)


def _finite(tensor: torch.Tensor) -> bool:
    """No NaN or infinity in ``tensor``: its smallest and largest values, in one pass and no temporary the
    tensor's size (NaN propagates through both)."""
    if not tensor.is_floating_point() or tensor.numel() == 0 or tensor.device.type == "meta":
        return True
    low, high = torch.aminmax(tensor)
    return bool(torch.isfinite(low)) and bool(torch.isfinite(high))


def _warn_not_finite(path: Path, broken: list[str]) -> None:
    """A checkpoint may hold NaN or infinite weights (a training run that diverged): it still opens, with
    a warning, and the views show where the numbers broke down."""
    if broken:
        shown = ", ".join(broken[:3]) + (", ..." if len(broken) > 3 else "")
        warnings.warn(f"{path}: {len(broken)} weight tensor(s) hold NaN or infinite values ({shown}); outputs may "
                      f"be meaningless", NumericalWarning, stacklevel=3)


def _aliases(model: Seq2Seq) -> set[str]:
    """Names in the state dict that are the same parameter as an earlier name (tied weights: saved once)."""
    seen, aliases = set(), set()
    named = list(model.named_parameters(remove_duplicate=False)) + list(model.named_buffers(remove_duplicate=False))
    for name, tensor in named:
        if id(tensor) in seen:
            aliases.add(name)
        seen.add(id(tensor))
    return aliases


def iter_safetensors(path: str | Path, *, dtype: Any = None, device: Any = None) -> Iterator[tuple[str, Any]]:
    """Each tensor of a safetensors file as ``(name, tensor)``, in file order, read with ordinary reads into a
    buffer of its own (the tensor's memory: no second copy); floating tensors converted to ``dtype`` when given,
    a chunk at a time into the converted tensor (``CONVERT_CHUNK``: no whole stored copy beside it). On a
    ``device`` other than the CPU (a GPU) every tensor is made there and filled a chunk at a time: the host holds
    one chunk, never a whole tensor. A header that does not describe the file's bytes, or a file cut short, is one
    line."""
    path = existing_file(path)
    header, data_size = read_header(path), data_bytes(path)
    entries = sorted(((name, entry, _tensor_place(path, name, entry, data_size=data_size))
                      for name, entry in header.items() if name != "__metadata__"), key=lambda item: item[2][0])
    elsewhere = device is not None and torch.device(device).type != "cpu"
    scratch = bytearray(CONVERT_CHUNK if dtype is not None or elsewhere else 0)
    try:
        with open(path, "rb") as handle:
            start = 8 + struct.unpack("<Q", _read_exactly(path, handle, at=0, size=8))[0]
            for name, entry, (begin, end, torch_dtype, count) in entries:
                shape = entry["shape"]
                convert = dtype is not None and torch_dtype.is_floating_point and torch_dtype != dtype
                kept = dtype if convert else torch_dtype
                if count == 0:
                    tensor = torch.empty(shape, dtype=kept, device=device if elsewhere else None)
                elif convert or elsewhere:
                    tensor = torch.empty(count, dtype=kept, device=device if elsewhere else None)
                    _read_converting(path, handle, at=start + begin, into=tensor, stored=torch_dtype, scratch=scratch)
                    tensor = tensor.reshape(shape)
                else:
                    buffer = bytearray(end - begin)
                    _read_exactly(path, handle, at=start + begin, size=len(buffer), into=buffer)
                    tensor = torch.frombuffer(buffer, dtype=torch_dtype).reshape(shape)
                    del buffer  # the tensor holds it
                yield name, tensor
    except OSError as error:
        raise CheckpointError(path, f"cannot be read ({error.strerror or error})") from None


# Bytes of a stored tensor read at a time when it is converted: a float32 embedding read whole before its bfloat16
# copy is made would add its full size (an opus-mt-tc-big's, 131 MB) to the peak of a half-precision load.
CONVERT_CHUNK = 4 * 2**20


def _read_converting(path: Path, handle, *, at: int, into: torch.Tensor, stored: torch.dtype,
                     scratch: bytearray) -> None:
    """Fill the flat tensor ``into`` from the file's elements of type ``stored`` starting at byte ``at``, converting
    one ``scratch``-sized chunk at a time."""
    itemsize = torch.empty((), dtype=stored).element_size()
    per_chunk = len(scratch) // itemsize
    for first in range(0, into.numel(), per_chunk):
        count = min(per_chunk, into.numel() - first)
        _read_exactly(path, handle, at=at + first * itemsize, size=count * itemsize, into=scratch)
        into[first:first + count].copy_(torch.frombuffer(scratch, dtype=stored, count=count))


def _read_exactly(path: Path, handle, *, at: int, size: int, into: bytearray | None = None) -> bytes | bytearray:
    handle.seek(at)
    buffer = into if into is not None else bytearray(size)
    view, done = memoryview(buffer)[:size], 0
    while done < size:
        got = handle.readinto(view[done:])
        if not got:
            raise CheckpointError(path, "the file ends early (cut short while copying, or rewritten while read)")
        done += got
    return buffer
