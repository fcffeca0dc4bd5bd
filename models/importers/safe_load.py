"""Read foreign ``.pt``/``.bin``/``.pkl`` files without running code from them
(docs/checkpoint-formats.md#reading-files-safely).

A pickle can call any importable function while it is read. So:

- By default a file is read with ``torch.load(weights_only=True)``, which only rebuilds tensors and plain
  containers; ``argparse.Namespace`` is allowed too (jadore's ``settings``). Plain pickles (not written by
  ``torch.save``) go through :class:`RestrictedUnpickler`, which allows the same kind of names only.
- Configuration objects (omegaconf's, as fairseq pickled its config before 0.12: :data:`INERT_MODULES`) are
  read without trust as inert stubs that hold their data and run nothing (:class:`InertUnpickler`).
- A file that needs more (a whole pickled model, a torchtext vocabulary, a tutorial's ``Lang``) is refused
  with a one-line :class:`CheckpointError` saying why; ``trust=True`` (``--trust``, the GUI's "trusted"
  checkbox) opens it with :class:`StubUnpickler`: every class outside a small allow-list becomes an inert
  stub (an empty ``nn.Module`` subclass that only stores what the pickle hands it), so no code from the
  file runs and ``.state_dict()`` or ``__dict__`` data can still be read.
- Names from modules that only serve to act on the system (``os``, ``subprocess``, ``builtins.open``,
  ``eval``...) are refused in both modes: no checkpoint needs them, and a stub would hide the attack. Two
  guards find them: a scan of the pickle's opcodes before anything is unpickled (:func:`pickle_globals`),
  and every unpickler's ``find_class``.
"""

from __future__ import annotations

import _compat_pickle
import argparse
import builtins
import collections
import copyreg
import io
import pickle
import pickletools
import re
import struct
import sys
import types
import zipfile
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ..errors import CheckpointError
from ..storage.checkpoint import check_memory_for_bytes
from .pickle_bounds import check_pickle_size, size_budget


class TrustRequiredError(CheckpointError):
    """The file opens only with arbitrary unpickling, which the user must allow (``trust=True``)."""


TRUST_HINT = "open it only if you trust where it came from: attnviz convert --trust (CLI) or tick 'trusted' (GUI)"

# Modules whose names a checkpoint never needs: they only serve to act on the machine (files, processes,
# the network, nested unpickling, code loading).
HOSTILE_MODULES = frozenset({
    "os", "posix", "nt", "subprocess", "sys", "shutil", "socket", "importlib", "runpy", "pickle", "_pickle",
    "marshal", "ctypes", "code", "codeop", "pty", "webbrowser", "asyncio", "multiprocessing", "io", "_io",
    "tempfile", "glob", "signal", "threading", "_thread", "platform", "urllib", "http", "ftplib",
    "smtplib", "pydoc", "timeit", "pdb", "bdb", "gc", "site", "zipimport", "pkgutil", "sysconfig", "setuptools",
    "pip", "torch.hub", "torch.jit", "torch.package", "torch.utils.cpp_extension",
})
# The only builtins a pickle may name: value types.
SAFE_BUILTINS = frozenset({"object", "set", "frozenset", "dict", "list", "tuple", "int", "float", "str", "bytes",
                           "bytearray", "bool", "complex", "slice", "range"})
_LEGACY_TORCH_MAGIC = b"\x80\x02\x8a\x0al\xfc\x9cF\xf9 j\xa8P\x19"  # torch.save's old (non-zip) format


def _allowed_globals() -> dict[str, Any]:
    """Names both unpicklers resolve to the real object: torch's own weights-only allow-list (tensor and
    storage rebuild helpers, dtypes, ``collections.OrderedDict``...) plus plain value types."""
    try:
        from torch._weights_only_unpickler import _get_allowed_globals

        allowed = dict(_get_allowed_globals())
    except ImportError:  # a torch without it: the essentials by hand
        import torch._utils

        names = ("_rebuild_tensor", "_rebuild_tensor_v2", "_rebuild_parameter")
        allowed = {f"torch._utils.{name}": getattr(torch._utils, name) for name in names if hasattr(torch._utils, name)}
        allowed["collections.OrderedDict"] = collections.OrderedDict
    allowed.update({f"builtins.{name}": getattr(builtins, name) for name in SAFE_BUILTINS})
    allowed.update({"argparse.Namespace": argparse.Namespace, "collections.OrderedDict": collections.OrderedDict,
                    "collections.Counter": collections.Counter, "collections.defaultdict": collections.defaultdict,
                    "copyreg._reconstructor": copyreg._reconstructor,
                    "torch.nn.parameter.Parameter": nn.Parameter,
                    # plain pickle.dump of a tensor stores its storage with torch.save bytes
                    "torch.storage._load_from_bytes": _storage_from_bytes})
    return allowed


def _storage_from_bytes(data: bytes) -> Any:
    """``torch.storage._load_from_bytes`` reads nested bytes with an unrestricted torch.load; this one
    does not."""
    return torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)


def python3_name(module: str, name: str) -> tuple[str, str]:
    """Protocol 0-2 pickles name Python 2 modules (``__builtin__``, ``copy_reg``); ``pickle`` maps them only
    in its own ``find_class``, so an overriding one must do it too."""
    if (module, name) in _compat_pickle.NAME_MAPPING:
        return _compat_pickle.NAME_MAPPING[(module, name)]
    return _compat_pickle.IMPORT_MAPPING.get(module, module), name


def is_hostile(module: str, name: str) -> bool:
    module, name = python3_name(module, name)
    if module == "builtins":
        return name not in SAFE_BUILTINS
    return any(module == bad or module.startswith(bad + ".") for bad in HOSTILE_MODULES)


_STRING_PUSHES = {"SHORT_BINUNICODE", "BINUNICODE", "BINUNICODE8", "UNICODE", "SHORT_BINSTRING", "BINSTRING", "STRING"}


def pickle_globals(data: bytes, pickles: int = 8) -> list[tuple[str, str]]:
    """The ``(module, name)`` pairs the pickles at the start of ``data`` would look up, read from the
    opcodes without running anything (``STACK_GLOBAL`` names are followed through the memo). Stops
    quietly at the first malformed opcode: loading will report the damage."""
    found, stream = [], io.BytesIO(data)
    for _ in range(pickles):  # torch's legacy format is several pickles in a row
        pushed: list[str | None] = []
        memo: dict[int, str | None] = {}
        try:
            for opcode, arg, _position in pickletools.genops(stream):
                name = opcode.name
                if name in ("GLOBAL", "INST"):
                    found.append(tuple(arg.split(" ", 1)))
                elif name == "STACK_GLOBAL" and len(pushed) >= 2 and None not in pushed[-2:]:
                    found.append((pushed[-2], pushed[-1]))
                elif name in _STRING_PUSHES:
                    pushed.append(arg if isinstance(arg, str) else arg.decode("latin-1"))
                elif name in ("BINGET", "LONG_BINGET", "GET"):
                    pushed.append(memo.get(int(arg)))
                elif name in ("BINPUT", "LONG_BINPUT", "PUT"):
                    memo[int(arg)] = pushed[-1] if pushed else None
                elif name == "MEMOIZE":
                    memo[len(memo)] = pushed[-1] if pushed else None
                else:
                    pushed.append(None)
        except Exception:  # noqa: BLE001 - not (or no more) pickle data
            break
        if stream.tell() >= len(data):
            break
    return found


def refuse_hostile(path: Path, data: bytes) -> None:
    """Raise before anything is unpickled if the pickle names a hostile global anywhere."""
    for module, name in pickle_globals(data):
        if is_hostile(module, name):
            raise hostile_error(path, *python3_name(module, name))


def hostile_error(path: Path, module: str, name: str) -> CheckpointError:
    return CheckpointError(path, f"refused: unpickling it would call {module}.{name}, which no checkpoint needs "
                                 f"(the file may be malicious); nothing from it was run")


def allowed_class(path: Path, allowed: dict[str, Any], module: str, name: str) -> Any | None:
    """The allow-listed object for ``module.name``; a hostile name is refused; anything else is None.

    Both unpicklers ask this first, so the list of what may and what may never load is in one place.
    """
    full = f"{module}.{name}"
    if full in allowed:
        return allowed[full]
    if is_hostile(module, name):
        raise hostile_error(path, module, name)
    return None


class RestrictedUnpickler(pickle.Unpickler):
    """A plain-pickle reader that resolves allow-listed names only; anything else is refused."""

    def __init__(self, file, path: Path, **kwargs):
        super().__init__(file, **kwargs)
        self.path, self.allowed = path, _allowed_globals()

    def find_class(self, module: str, name: str) -> Any:
        module, name = python3_name(module, name)
        found = allowed_class(self.path, self.allowed, module=module, name=name)
        if found is not None:
            return found
        raise TrustRequiredError(self.path, f"needs arbitrary unpickling (it contains {module}.{name}); {TRUST_HINT}")


class Stub(nn.Module):
    """Stands in for a class the reader does not allow. It runs nothing: calling it, building it, or
    restoring its state only stores what the pickle gave (``__dict__``, items, list entries)."""

    stub_of = "?"

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__()
        self.__dict__["stub_args"] = args
        self.__dict__["stub_kwargs"] = kwargs

    def __setstate__(self, state: Any) -> None:
        if isinstance(state, tuple) and len(state) == 2 and isinstance(state[1], dict):  # (state, slotstate)
            state = {**(state[0] or {}), **state[1]}
        if isinstance(state, dict):
            nn.Module.__setstate__(self, state)
        else:
            self.__dict__["stub_state"] = state
        for name, default in (("_parameters", {}), ("_buffers", {}), ("_modules", {}),
                              ("_non_persistent_buffers_set", set()), ("training", False)):
            self.__dict__.setdefault(name, default)  # a non-module object still answers state_dict()

    def __setitem__(self, key: Any, value: Any) -> None:
        self.__dict__.setdefault("stub_items", {})[key] = value

    def __getitem__(self, key: Any) -> Any:
        return self.__dict__.get("stub_items", {})[key]

    def append(self, value: Any) -> None:
        self.__dict__.setdefault("stub_list", []).append(value)

    def extend(self, values: Any) -> None:
        self.__dict__.setdefault("stub_list", []).extend(values)

    def __repr__(self) -> str:
        return f"<stub of {self.stub_of}>"


# Configuration objects some toolkits pickle beside their weights (fairseq before 0.12 saved its config as
# omegaconf objects, and its training meters): read without trust as inert stubs holding their data, since
# nothing from them is ever called. A module named here and every module under it.
INERT_MODULES = ("omegaconf", "fairseq.dataclass", "fairseq.logging.meters")
INERT_NAMES = frozenset({("typing", "Any"), ("enum", "Enum")})


def is_inert(module: str, name: str) -> bool:
    return (module, name) in INERT_NAMES or any(module == inert or module.startswith(inert + ".")
                                                for inert in INERT_MODULES)


class StubUnpickler(pickle.Unpickler):
    """The trusted reader: allow-listed names are real, ``torch.nn.modules`` classes already imported are
    real (their ``__setstate__`` is torch's), hostile names are refused, everything else is a :class:`Stub`."""

    path = Path("?")

    def __init__(self, file, *args, **kwargs):
        super().__init__(file, *args, **kwargs)
        self.allowed = _allowed_globals()
        self.stubs: dict[str, type] = {}

    def find_class(self, module: str, name: str) -> Any:
        module, name = python3_name(module, name)
        found = allowed_class(self.path, self.allowed, module=module, name=name)
        if found is not None:
            return found
        full = f"{module}.{name}"
        if module.startswith("torch.nn.modules.") and module in sys.modules:  # never import anything new
            found = getattr(sys.modules[module], name, None)
            if isinstance(found, type) and issubclass(found, nn.Module):
                return found
        if full not in self.stubs:
            self.stubs[full] = type(name, (Stub,), {"stub_of": full, "__module__": "attnviz.stubs"})
        return self.stubs[full]


class InertUnpickler(StubUnpickler):
    """The untrusted reader for files whose only names beyond the allow-list are inert configuration classes
    (:data:`INERT_MODULES`): those become stubs, anything else needs trust."""

    def find_class(self, module: str, name: str) -> Any:
        module, name = python3_name(module, name)
        found = allowed_class(self.path, self.allowed, module=module, name=name)
        if found is not None:
            return found
        if not is_inert(module, name):
            raise TrustRequiredError(self.path, f"needs arbitrary unpickling (it contains {module}.{name}); "
                                                f"{TRUST_HINT}")
        return super().find_class(module, name)


def _stub_pickle_module(path: Path, reader: type = StubUnpickler) -> types.ModuleType:
    """A ``pickle_module`` for ``torch.load`` whose Unpickler is ``reader`` (reporting ``path``)."""
    unpickler = type("PathStubUnpickler", (reader,), {"path": path})
    module = types.ModuleType("attnviz_stub_pickle")
    module.Unpickler = unpickler
    module.load = lambda file, **kwargs: unpickler(file, **kwargs).load()
    module.UnpicklingError = pickle.UnpicklingError
    return module


def load(path: str | Path, *, trust: bool = False) -> Any:
    """The object stored in ``path`` (a ``torch.save`` file or a plain pickle), tensors on the CPU."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(path, "no such file" if not path.exists() else "not a file")
    with open(path, "rb") as handle:
        head = handle.read(64)
    if not head:
        raise CheckpointError(path, "the file is empty")
    budget = size_budget(path.stat().st_size)
    if head.startswith(b"PK\x03\x04"):
        if not zipfile.is_zipfile(path):
            raise CheckpointError(path, "truncated or damaged: a torch.save zip archive without its directory "
                                        "(was the download or copy cut short?)")
        with zipfile.ZipFile(path) as archive:
            # what torch.load unpacks: its storages at their unpacked size (a compressed one may claim gigabytes)
            check_memory_for_bytes(path, sum(member.file_size for member in archive.infolist()))
            for member in archive.infolist():
                if member.filename.endswith(".pkl"):
                    data = _read_member(path, archive, member)
                    refuse_hostile(path, data)
                    check_pickle_size(path, data, budget)
        return _checked_tensors(path, _torch_load(path, trust))
    if head.startswith(_LEGACY_TORCH_MAGIC) or head[:1] == b"\x80":
        check_memory_for_bytes(path, path.stat().st_size)
        data = path.read_bytes()
        refuse_hostile(path, data)
        check_pickle_size(path, data, budget)
        payload = _torch_load(path, trust) if head.startswith(_LEGACY_TORCH_MAGIC) else _plain_load(path, trust)
        return _checked_tensors(path, payload)
    raise CheckpointError(path, "not a PyTorch or pickle file (it does not start like one)")


def _read_member(path: Path, archive: zipfile.ZipFile, member: zipfile.ZipInfo) -> bytes:
    """A pickle inside a zip, refused if it claims to unpack to more than the budget (a zip bomb)."""
    if member.file_size > size_budget(path.stat().st_size):
        raise CheckpointError(path, f"refused: {member.filename} would unpack to {member.file_size:,} bytes")
    try:
        return archive.read(member)
    except (zipfile.BadZipFile, OSError, ValueError, EOFError) as error:
        raise _damaged(path, error) from None


MAX_WALK = 1 << 20  # objects looked at when checking what a file unpickled into


def _checked_tensors(path: Path, payload: Any) -> Any:
    """Refuse a tensor that claims more elements than its storage holds (a view with zero strides would
    turn a few bytes into gigabytes as soon as it is copied), and take from every tensor the attributes a pickle
    gave it in place of torch's own (a parameter's saved state may set ``detach`` or ``float`` to anything),
    so that reading a tensor only ever runs torch. Walks at most :data:`MAX_WALK` objects."""
    pending, seen = [payload], set()
    while pending and len(seen) < MAX_WALK:
        item = pending.pop()
        if id(item) in seen:
            continue
        seen.add(id(item))
        if isinstance(item, torch.Tensor):
            _drop_shadowing(item)
            stored = torch.Tensor.untyped_storage(item).nbytes()
            if torch.Tensor.numel(item) * torch.Tensor.element_size(item) > stored:
                raise CheckpointError(path, f"refused: a tensor of shape {tuple(item.shape)} made from "
                                            f"{stored:,} bytes of data")
        elif isinstance(item, dict):
            pending.extend(item.values())
        elif isinstance(item, (list, tuple)):
            pending.extend(item)
        elif isinstance(getattr(item, "__dict__", None), dict):
            pending.extend(item.__dict__.values())
    return payload


def _drop_shadowing(tensor: torch.Tensor) -> None:
    """Remove the instance attributes of ``tensor`` that hide an attribute of its class (its methods)."""
    attributes = object.__getattribute__(tensor, "__dict__")
    for name in [name for name in attributes if not isinstance(name, str) or hasattr(type(tensor), name)]:
        del attributes[name]


def _torch_load(path: Path, trust: bool) -> Any:
    try:
        with torch.serialization.safe_globals([argparse.Namespace]):
            return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as error:
        needed = _unsupported_global(str(error))
        if needed and is_hostile(*needed):
            raise hostile_error(path, *needed) from None
        if not trust and needed and is_inert(*needed):
            return _inert_load(path)
        if not trust:
            what = f"it contains {'.'.join(needed)}" if needed else "it uses pickle features the safe reader refuses"
            raise TrustRequiredError(path, f"needs arbitrary unpickling ({what}); {TRUST_HINT}") from None
    except (RuntimeError, EOFError, OSError, ValueError, KeyError, struct.error, IndexError) as error:
        raise _damaged(path, error) from None
    try:
        return torch.load(path, map_location="cpu", weights_only=False, pickle_module=_stub_pickle_module(path))
    except CheckpointError:
        raise
    except Exception as error:  # noqa: BLE001 - a stub-built object can fail in many ways; report, never crash
        raise _damaged(path, error) from None


def _inert_load(path: Path) -> Any:
    try:
        return torch.load(path, map_location="cpu", weights_only=False,
                          pickle_module=_stub_pickle_module(path, InertUnpickler))
    except CheckpointError:
        raise
    except Exception as error:  # noqa: BLE001 - a stub-built object can fail in many ways; report, never crash
        raise _damaged(path, error) from None


def _plain_load(path: Path, trust: bool) -> Any:
    data = path.read_bytes()
    try:
        if trust:
            unpickler = _stub_pickle_module(path).Unpickler(io.BytesIO(data))
        else:
            unpickler = RestrictedUnpickler(io.BytesIO(data), path)
        return unpickler.load()
    except CheckpointError:
        raise
    except Exception as error:  # noqa: BLE001 - truncated or malformed pickle data
        raise _damaged(path, error) from None


def _unsupported_global(message: str) -> tuple[str, str] | None:
    """The ``(module, name)`` torch's weights-only error names (builtins appear without a module)."""
    found = re.search(r"GLOBAL ([\w.]+)", message)
    if not found:
        return None
    module, _, name = found.group(1).rpartition(".")
    return module or "builtins", name


def _damaged(path: Path, error: Exception) -> CheckpointError:
    text = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    return CheckpointError(path, f"cannot be read: truncated or damaged ({type(error).__name__}: {text[:160]})")
