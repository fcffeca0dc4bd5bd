"""What every importer shares: the source being read, what it says (Inspection), settings the user supplies,
and weight mapping with one-line errors (vocabulary files: vocabularies.py).

Every failure is a :class:`CheckpointError` naming the file and what is wrong (a missing or unexpected
weight, a shape, a hyper-parameter the file does not hold), never a traceback.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from ..errors import CheckpointError
from ..nn.base import Seq2Seq
from ..nn.validation import dtype_name
from ..storage.checkpoint import _aliases as tied_names
from ..storage.checkpoint import check_memory_for_bytes, iter_safetensors, stored_bytes
from . import safe_load

HALF_PRECISIONS = (torch.bfloat16, torch.float16)  # stored precisions a converted model may keep
SHOWN = 4  # names listed in one error line before "and N more"


@dataclass
class Inspection:
    """What a foreign checkpoint says about itself, and what it lacks.

    ``inferred``: hyper-parameters read from the file (by their names in the source code).
    ``missing``: settings to supply (``--set KEY=VALUE``; a GUI dialog field each), KEY → what to give.
    ``vocabularies``: ``"src"``/``"tgt"`` → what to give when the file holds no vocabulary.
    ``accepted``: every setting the format takes, KEY → meaning (with the default when there is one).
    ``found``: what the format read on the way (its state dict, its parsed config), handed to its ``convert`` so
    that nothing is read twice; left out of what ``models.importers.inspect`` returns.
    """

    format: str
    path: Path
    inferred: dict[str, Any] = field(default_factory=dict)
    missing: dict[str, str] = field(default_factory=dict)
    vocabularies: dict[str, str] = field(default_factory=dict)
    accepted: dict[str, str] = field(default_factory=dict)
    found: Any = field(default=None, repr=False, compare=False)

    @property
    def complete(self) -> bool:
        return not self.missing and not self.vocabularies

    def require(self, src_vocab: Any = None, tgt_vocab: Any = None) -> None:
        """Raise :class:`MissingSettingsError` unless the given vocabularies fill what the file lacks."""
        for side, given in (("src", src_vocab), ("tgt", tgt_vocab)):
            if given is not None:
                self.vocabularies.pop(side, None)
        if not self.complete:  # the question goes to the user without what was read for the conversion
            raise MissingSettingsError(replace(self, found=None))


class MissingSettingsError(CheckpointError):
    """The file lacks hyper-parameters or vocabularies; ``inspection`` says which, and what was read."""

    def __init__(self, inspection: Inspection):
        self.inspection = inspection
        asks = [f"--set {key}={hint}" for key, hint in inspection.missing.items()]
        asks += [f"--{side}-vocab FILE ({hint})" for side, hint in inspection.vocabularies.items()]
        read = ", ".join(f"{key}={value}" for key, value in inspection.inferred.items())
        super().__init__(inspection.path, f"the {inspection.format} file does not say everything needed; give "
                                          f"{'; '.join(asks)}" + (f" (read from the file: {read})" if read else ""))


class Source:
    """A file or folder being imported; its unpickled content is loaded once, on first use."""

    def __init__(self, path: str | Path, trust: bool = False):
        self.path = Path(path)
        self.trust = trust
        self._payload: Any = None
        self._loaded = False

    @property
    def payload(self) -> Any:
        """The file's content: a safetensors file's tensors, or what a pickle holds (see safe_load)."""
        if not self._loaded:
            if self.path.suffix == ".safetensors":
                self._payload = read_safetensors(self.path)
            else:
                self._payload = safe_load.load(self.path, trust=self.trust)
            self._loaded = True
        return self._payload

    def error(self, reason: str) -> CheckpointError:
        return CheckpointError(self.path, reason)


class Settings:
    """``--set`` values for one format: checked against the keys it accepts, and recorded as used
    (``supplied``: given by the user; ``assumed``: a default the file did not contradict)."""

    def __init__(self, given: Mapping[str, Any] | None, accepted: Mapping[str, str], format_name: str):
        self.given = dict(given or {})
        unknown = sorted(set(self.given) - set(accepted))
        if unknown:
            takes = f"takes {', '.join(accepted)}" if accepted else "takes none"
            raise CheckpointError(f"--format {format_name}", f"no setting named {', '.join(unknown)}; this format "
                                                              f"{takes}")
        self.accepted = dict(accepted)
        self.supplied: dict[str, Any] = {}
        self.assumed: dict[str, Any] = {}
        self.format = format_name

    def has(self, key: str) -> bool:
        return key in self.given

    def value(self, key: str, kind: type, default: Any = None, *, choices: tuple = ()) -> Any:
        """The user's value for ``key`` converted to ``kind`` (or ``default``, recorded as assumed)."""
        if key not in self.given:
            if default is not None:
                self.assumed[key] = default
            return default
        value = _convert(self.given[key], kind, key=key, format_name=self.format)
        if choices and value not in choices:
            raise CheckpointError(f"--set {key}", f"must be one of {', '.join(map(str, choices))}; got {value!r}")
        self.supplied[key] = value
        return value

    def pick(self, key: str, kind: type, inferred: Mapping[str, Any], default: Any = None, *,
             choices: tuple = ()) -> Any:
        """The user's value for ``key``, else the one read from the file, else ``default`` (assumed)."""
        if key in self.given:
            return self.value(key, kind, choices=choices)
        if inferred.get(key) is not None:
            return inferred[key]
        return self.value(key, kind, default, choices=choices)


def _convert(value: Any, kind: type, key: str, format_name: str) -> Any:
    if kind is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "false", "yes", "no", "1", "0"):
            return value.lower() in ("true", "yes", "1")
        if value in (0, 1):
            return bool(value)
    elif kind is int and isinstance(value, int) and not isinstance(value, bool):
        return value
    elif kind is float and isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    elif kind is str:
        return str(value)
    raise CheckpointError(f"--set {key}", f"{format_name} needs {'true or false' if kind is bool else kind.__name__} "
                                          f"here; got {value!r}")


# State dicts

def read_safetensors(path: Path) -> dict[str, Tensor]:
    """Every tensor of a safetensors file (no pickle involved), each read into memory of its own that a converted
    model then takes as its weight (no copy of the file's bytes besides); unreadable files, and tensors that would
    not fit in the free memory, are one-line errors before any is read."""
    check_memory_for_bytes(path, stored_bytes(path))
    return dict(iter_safetensors(path))


def tensor_dict(value: Any) -> dict[str, Tensor] | None:
    """``value`` as a state dict (a mapping of tensors, or the tensors a module holds, named as its
    ``state_dict()`` names them), else None."""
    if isinstance(value, nn.Module):
        value = module_tensors(value)
    if isinstance(value, Mapping) and value and all(isinstance(k, str) for k in value) \
            and all(isinstance(v, Tensor) for v in value.values()):
        state = dict(value)
        if all(key.startswith("module.") for key in state):  # saved from DataParallel/DDP
            state = {key[len("module."):]: tensor for key, tensor in state.items()}
        return state
    return None


MAX_MODULES = 1 << 16  # submodules read from one unpickled module (one shared in many places counts each time)


def module_tensors(module: nn.Module) -> dict[str, Tensor] | None:
    """What ``module.state_dict()`` would hold, read from the dictionaries a pickled module restores (its
    ``_parameters``, persistent ``_buffers`` and ``_modules``) without calling any of its methods: a trusted
    file's module may carry hooks or methods of its own (``state_dict()`` runs its state-dict hooks), and nothing
    from a file is ever run. None when it holds no such dictionaries (a stand-in for a non-module object)."""
    if _module_parts(module) is None:
        return None
    state: dict[str, Tensor] = {}
    for prefix, inner in submodules(module):
        parameters, buffers, _, transient = _module_parts(inner)
        for name, tensor in [*parameters.items(), *((name, tensor) for name, tensor in buffers.items()
                                                     if name not in transient)]:
            if isinstance(name, str) and isinstance(tensor, Tensor):
                state[prefix + name] = Tensor.detach(tensor)
    return state


def submodules(module: nn.Module) -> Iterator[tuple[str, nn.Module]]:
    """``module`` and every module under it, depth first as ``state_dict()`` names them (with the prefix of their
    names: ``""``, ``"encoder."``...), found through the ``_modules`` dictionaries the pickle restored (no method
    of theirs is called); a module inside itself is not followed, and at most :data:`MAX_MODULES` are given."""
    pending: list[tuple[str, Any, tuple[int, ...]]] = [("", module, ())]
    visited = 0
    while pending and visited < MAX_MODULES:
        prefix, current, ancestors = pending.pop()
        parts = _module_parts(current)
        if parts is None:
            continue
        visited += 1
        yield prefix, current
        inside = (*ancestors, id(current))
        pending.extend(reversed([(f"{prefix}{name}.", child, inside) for name, child in parts[2].items()
                                 if isinstance(name, str) and isinstance(child, nn.Module)
                                 and id(child) not in inside]))


def _module_parts(module: Any) -> tuple[dict, dict, dict, Collection] | None:
    """A module's parameters, buffers, submodules and the names of its buffers not saved, as its ``__dict__``
    holds them (read without attribute lookups that a class could redirect), or None."""
    try:
        attributes = object.__getattribute__(module, "__dict__")
    except AttributeError:
        return None
    parts = [attributes.get(name) for name in ("_parameters", "_buffers", "_modules")]
    if not all(isinstance(part, dict) for part in parts):
        return None
    transient = attributes.get("_non_persistent_buffers_set")
    return parts[0], parts[1], parts[2], transient if isinstance(transient, (set, frozenset)) else set()


WRAPPER_KEYS = ("state_dict", "model_state_dict", "model", "net", "module", "weights")


def find_state_dict(payload: Any) -> dict[str, Tensor] | None:
    """The state dict in ``payload``: itself, or under a usual wrapper key (``{'model': sd, ...}``)."""
    found = tensor_dict(payload)
    if found is not None:
        return found
    if isinstance(payload, Mapping):
        for key in WRAPPER_KEYS:
            if key in payload and (found := tensor_dict(payload[key])) is not None:
                return found
    return None


class WeightMap:
    """Foreign weights taken one by one into our names; what was never taken, or asked for but absent,
    is reported in one line by :meth:`load_into`."""

    def __init__(self, source: Source, state: Mapping[str, Tensor], layout: str):
        self.source, self.state, self.layout = source, dict(state), layout
        self.assigned: dict[str, tuple[str, Tensor]] = {}  # our name → (foreign name, tensor)
        self.taken: set[str] = set()
        self.absent: list[str] = []
        self.read: dict[str, Tensor] = {}  # foreign name → its values as float32

    def get(self, key: str) -> Tensor | None:
        """The foreign tensor ``key`` (marked as used), or None (recorded as missing)."""
        if key not in self.state:
            if key not in self.absent:
                self.absent.append(key)
            return None
        self.taken.add(key)
        tensor = self.state[key]
        if not tensor.is_floating_point():  # integers would be taken as numbers, complex ones lose a part
            raise self.source.error(f"weight {key} is stored as {dtype_name(tensor.dtype)}; the {self.layout} "
                                    f"layout needs floating-point numbers there")
        if key not in self.read:  # one float32 copy of a half-precision tensor that several of ours read parts of
            self.read[key] = tensor.detach().float()
        return self.read[key]

    def stored(self, key: str) -> Tensor | None:
        """The foreign tensor ``key`` as the file stores it (no float32 copy of a half-precision one), for a weight
        taken unchanged; checked, marked and recorded as :meth:`get` does."""
        if key in self.state and key not in self.read and self.state[key].dtype in HALF_PRECISIONS:
            self.taken.add(key)
            return self.state[key].detach()
        return self.get(key)

    def has(self, key: str) -> bool:
        return key in self.state

    def ignore(self, *keys: str) -> None:
        """Known keys the conversion does not need (buffers rebuilt from the config, state no forward reads)."""
        self.taken.update(key for key in keys if key in self.state)

    def ignore_copies(self, kept: str, *copies: str) -> None:
        """Keys saved as tied copies of ``kept``: dropped only when equal to it, since a copy that was
        trained apart from ``kept`` is a weight the model computes with."""
        reference = self.state.get(kept)
        for key in copies:
            if key in self.state and key != kept and reference is not None:  # a missing ``kept`` is reported
                if not _same(self.state[key], reference):
                    raise self.source.error(f"weight {key} differs from {kept}, which this {self.layout} conversion "
                                            f"takes in its place")
                self.taken.add(key)

    def token_tables(self, config: Any, source: str, target: str, output: str, output_bias: str | None = None) -> None:
        """The Transformer's token tables and output layer from the foreign ``source``/``target`` embeddings and
        ``output`` projection: one table when ``config.share_embeddings`` (the target's checked equal), the output
        tied to the target table when ``config.tie_output`` (a saved copy checked equal), else each its own."""
        self.copy("src_embedding.tokens.weight", source)
        if config.share_embeddings:
            self.ignore_copies(source, target)
        else:
            self.copy("tgt_embedding.tokens.weight", target)
        if config.tie_output:
            self.ignore_copies(target, output)
        else:
            self.copy("output.weight", output)
        if output_bias is not None:
            self.copy("output.bias", output_bias)

    def put(self, ours: str, foreign: str, tensor: Tensor | None) -> None:
        if tensor is not None:
            self.assigned[ours] = (foreign, tensor)

    def copy(self, ours: str, foreign: str, transform: Callable[[Tensor], Tensor] | None = None) -> None:
        if transform is None:  # taken as stored: a half-precision file's weights stay in its precision
            self.put(ours, foreign, self.stored(foreign))
            return
        tensor = self.get(foreign)
        self.put(ours, foreign, None if tensor is None else transform(tensor))

    def check_complete(self) -> None:
        if self.absent:
            raise self.source.error(f"missing weights for the {self.layout} layout: {_names(self.absent)}")
        refuse_unused(self.source, self.layout, set(self.state) - self.taken)

    def load_into(self, model: Seq2Seq) -> Seq2Seq:
        """Fill ``model`` with the mapped weights. A model built on the meta device (as ``convert`` builds it)
        takes each mapped tensor as its parameter, sharing the foreign tensor's memory: the conversion holds one
        copy of the weights, not the foreign state dict and the model's each whole."""
        self.check_complete()
        expected = model.state_dict(keep_vars=True)
        aliases = tied_names(model)
        unfilled = [name for name in expected if name not in self.assigned and name not in aliases]
        if unfilled:  # a mapping bug, not the user's file: still one line
            raise self.source.error(f"the {self.layout} conversion left weights unset: {_names(unfilled)}")
        for ours, (foreign, tensor) in self.assigned.items():
            if tuple(tensor.shape) != tuple(expected[ours].shape):
                raise self.source.error(f"weight {foreign} has shape {tuple(tensor.shape)}; the hyper-parameters "
                                        f"imply {tuple(expected[ours].shape)}")
        self._check_tied(expected)
        kept = self.kept_precision()
        _take_weights(model, self.assigned, dtype=kept)
        if kept is not None:
            model.to(kept)  # the buffers computed from the config, as a model loaded in that precision holds them
        self.verify(model)
        return model.eval()

    def kept_precision(self) -> torch.dtype | None:
        """The half precision every mapped weight is stored in (bfloat16 or float16), which the converted model then
        keeps (one copy of the weights, bit for bit the file's); None when any is float32 or was transformed into
        it (the model is float32, each weight converted on its own as it is taken)."""
        kinds = {tensor.dtype for _, tensor in self.assigned.values() if tensor.is_floating_point()}
        return next(iter(kinds)) if len(kinds) == 1 and kinds <= set(HALF_PRECISIONS) else None

    def _check_tied(self, expected: Mapping[str, Tensor]) -> None:
        """Names our model ties together must receive equal tensors, else the last copy would silently win."""
        first: dict[int, tuple[str, str, Tensor]] = {}  # one entry per parameter, whatever its names
        for name, tensor in expected.items():
            if name not in self.assigned:
                continue
            foreign, value = self.assigned[name]
            kept = first.setdefault(id(tensor), (name, foreign, value))
            if kept[0] != name and not _same(kept[2], value):
                raise self.source.error(f"weights {kept[1]} and {foreign} differ, but the converted model "
                                        f"ties {kept[0]} and {name} together")

    def verify(self, model: Seq2Seq) -> None:
        """After loading: every mapped tensor (or each part of a transformed one) reads back unchanged, and the
        model holds exactly as many parameters as were mapped into it — a cheap guard against mapping bugs."""
        state = model.state_dict()
        for ours, (foreign, tensor) in self.assigned.items():
            if not _same(state[ours], tensor):
                raise self.source.error(f"after conversion, {ours} does not hold {foreign} (its values differ)")
        aliases = tied_names(model)
        ours_count = sum(tensor.numel() for name, tensor in state.items() if name not in aliases)
        mapped = sum(tensor.numel() for name, (_, tensor) in self.assigned.items() if name not in aliases)
        if ours_count != mapped:
            raise self.source.error(f"the converted model has {ours_count} parameters, {mapped} were mapped into it")


def _take_weights(model: Seq2Seq, assigned: Mapping[str, tuple[str, Tensor]], *,
                  dtype: torch.dtype | None = None) -> None:
    """Put each mapped tensor in ``model``: a parameter still on the meta device becomes the tensor itself (as
    ``dtype``, default the parameter's (float32), contiguous: a copy only where a transform left it strided or its
    precision differs), shared by every module that ties it; any
    other parameter or buffer is copied into. A saved tensor mapped to two untied parameters is copied for the
    second, so that each is its own weight (the checkpoint writer keeps one of tensors sharing memory)."""
    owners: dict[int, list[tuple[nn.Module, str]]] = {}
    for module in model.modules():
        for attribute, param in module._parameters.items():
            if param is not None:
                owners.setdefault(id(param), []).append((module, attribute))
    current = model.state_dict(keep_vars=True)
    placed, memory = set(), set()
    with torch.no_grad():
        for ours, (_, tensor) in assigned.items():
            target = current[ours]
            if target.device.type != "meta":
                target.copy_(tensor)
                continue
            if id(target) in placed:  # a tied name of a parameter already placed (checked equal)
                continue
            value = tensor.detach().to(device="cpu", dtype=dtype or target.dtype).contiguous()
            if (value.data_ptr(), tuple(value.shape)) in memory:
                value = value.clone()
            memory.add((value.data_ptr(), tuple(value.shape)))
            placed.add(id(target))
            param = nn.Parameter(value, requires_grad=target.requires_grad)
            for module, attribute in owners[id(target)]:
                module._parameters[attribute] = param
    for module in model.modules():
        if isinstance(module, nn.RNNBase):  # its fused kernel reads a list of the parameters made when it was built
            module._init_flat_weights()


def refuse_unused(source: Source, layout: str, unused: Collection[str]) -> None:
    """A weight the conversion would not use is a refusal naming it: silently dropping one would show a
    model other than the one that was trained."""
    if unused:
        raise source.error(f"unexpected weights, not part of the {layout} layout: {_names(sorted(unused))}")


def saved_as_one(state: Mapping[str, Tensor], first: str, second: str) -> bool:
    """Whether the file holds both keys with equal values: tied weights are often saved under both names,
    and ours may be tied only when the file's really are one."""
    return first in state and second in state and _same(state[first], state[second])


def _same(first: Tensor, second: Tensor) -> bool:
    """Equal shapes and values; compared in their own precision when they share it (no float32 copy of a
    half-precision embedding, which alone can be a quarter of a language model's weights)."""
    if tuple(first.shape) != tuple(second.shape):
        return False
    first, second = first.detach().cpu(), second.detach().cpu()
    if first.dtype != second.dtype:
        first, second = first.float(), second.float()
    return torch.equal(first, second)


def _names(names: list[str]) -> str:
    shown = ", ".join(names[:SHOWN])
    return shown + (f" and {len(names) - SHOWN} more" if len(names) > SHOWN else "")


def layer_count(state: Mapping[str, Tensor], prefix: str) -> int:
    """How many ``{prefix}N.`` blocks the keys hold (N from 0)."""
    indices = {int(rest.split(".", 1)[0]) for key in state if key.startswith(prefix)
               and (rest := key[len(prefix):]).split(".", 1)[0].isdigit()}
    return max(indices) + 1 if indices else 0


def check_sinusoid(source: Source, stored: Tensor | None, expected: Tensor, what: str) -> None:
    """A stored position table must be the sinusoid our model rebuilds (else the conversion would lie)."""
    if stored is None:
        return
    table = stored.detach().float().reshape(-1, stored.shape[-1])[: expected.shape[0]]
    reference = expected[: table.shape[0]]
    if table.shape != reference.shape or not torch.allclose(table, reference, atol=1e-3):
        raise source.error(f"{what} is not the sinusoid this format uses (learned or modified positions are "
                           f"not supported)")
