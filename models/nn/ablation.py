"""Head ablation: which attention heads are switched off (Michel et al. 2019, "Are Sixteen Heads Really
Better than One?").

An ``Ablation`` is a frozen set of ``(kind, layer, head)`` with kind in ``models.trace.records.KINDS``, layer and
head counted from 0, and head ``None`` for every head of that layer. Applying it zeroes each ablated
head's output before the heads are combined (before the output projection, where there is one); the
weights the head computed are still traced. A GRU decoder's attention has one head: ablating it zeroes the
context vector the cell reads. How the models apply it: docs/ARCHITECTURE.md#head-ablation.

This module imports no torch, so the app's plain-data side (session, view-model) can hold ablations.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterable, Mapping

from ..errors import InputError
from ..trace.records import KINDS

if TYPE_CHECKING:
    from torch import Tensor

Entry = tuple[str, int, "int | None"]
Shape = Mapping[str, tuple[int, int]]  # kind → (layers, heads), as ``Seq2Seq.attention_shape()`` gives


class AblationError(InputError):
    """An ablation spec that cannot be read, or names a head the model does not have."""


@dataclass(frozen=True)
class Ablation:
    """The heads switched off. ``Ablation()`` switches none off and changes nothing."""

    entries: frozenset = frozenset()

    def __bool__(self) -> bool:
        return bool(self.entries)

    @classmethod
    def of(cls, entries: Iterable[Entry]) -> "Ablation":
        return cls(frozenset((kind, int(layer), None if head is None else int(head)) for kind, layer, head in entries))

    @classmethod
    def parse(cls, specs: Iterable[str]) -> "Ablation":
        """Specs ``KIND:LAYER:HEAD`` (``HEAD`` may be ``*``: the whole layer), e.g. ``cross:0:1``."""
        return cls.of(parse_spec(spec) for spec in specs)

    def widened(self, kind: str, layer: int, *tensors):
        """``tensors`` as they are: an ablation runs one copy of the batch (see ``HeadGates.widened``)."""
        return tensors

    def heads_off(self, kind: str, layer: int, heads: int) -> tuple[int, ...]:
        """The heads of ``kind`` layer ``layer`` (which has ``heads`` heads) that are off, ascending."""
        if (kind, layer, None) in self.entries:
            return tuple(range(heads))
        return tuple(sorted(head for k, l, head in self.entries if k == kind and l == layer and head is not None))

    def is_off(self, kind: str, layer: int, head: int) -> bool:
        return (kind, layer, None) in self.entries or (kind, layer, head) in self.entries

    def heads(self, shape: Shape) -> tuple[tuple[str, int, int], ...]:
        """Every ablated head as ``(kind, layer, head)``, ``*`` spelled out, in kind, layer, head order."""
        found = []
        for kind in KINDS:
            if kind in shape:
                layers, heads = shape[kind]
                found += [(kind, layer, head) for layer in range(layers) for head in self.heads_off(kind, layer, heads)]
        return tuple(found)

    def toggled(self, kind: str, layer: int, head: int, shape: Shape) -> "Ablation":
        """This ablation with one head switched the other way (a whole-layer entry is spelled out first)."""
        current = set(self.heads(shape))
        current ^= {(kind, layer, head)}
        return Ablation.of(current)

    def with_layer(self, kind: str, layer: int, off: bool, shape: Shape) -> "Ablation":
        """This ablation with every head of one layer switched off (``off``) or on."""
        current = {entry for entry in self.heads(shape) if entry[:2] != (kind, layer)}
        if off:
            current |= {(kind, layer, head) for head in range(shape[kind][1])}
        return Ablation.of(current)

    def specs(self) -> list[str]:
        """The entries as ``KIND:LAYER:HEAD`` specs, sorted (``parse(specs())`` gives this ablation back)."""
        return [f"{kind}:{layer}:{'*' if head is None else head}"
                for kind, layer, head in sorted(self.entries, key=_order)]

    def validate(self, shape: Shape) -> "Ablation":
        """Itself, once every entry names a kind, layer and head that ``shape`` has; otherwise one line naming
        the first that does not and what exists."""
        for kind, layer, head in sorted(self.entries, key=_order):
            spec = f"{kind}:{layer}:{'*' if head is None else head}"
            if not shape:
                raise AblationError(f"cannot ablate {spec}: this model has no attention heads to switch off")
            if kind not in shape:
                raise AblationError(f"cannot ablate {spec}: this model has no {kind} attention "
                                    f"(it has {', '.join(k for k in KINDS if k in shape)})")
            layers, heads = shape[kind]
            if not 0 <= layer < layers:
                raise AblationError(f"cannot ablate {spec}: {kind} has layers 0 to {layers - 1}")
            if head is not None and not 0 <= head < heads:
                raise AblationError(f"cannot ablate {spec}: {kind} layer {layer} has heads 0 to {heads - 1}")
        return self


NO_ABLATION = Ablation()


class HeadGates:
    """Per ``(kind, layer)`` a float tensor ``[rows, heads]`` (or ``[1, heads]`` for every row) that multiplies
    each head's output where an ``Ablation`` zeroes it: a gate of 0 is ``--ablate``, and one forward pass can
    switch a different head off in each row (models/analysis/importance.py). Models read it through the same
    ``heads_off`` as an ``Ablation``; a layer without a gate adds no operation."""

    def __init__(self, gates: "Mapping[tuple[str, int], Tensor]", *, copies: int = 1,
                 widen_at: tuple[str, int] | None = None):
        self.gates = dict(gates)
        self.copies, self.widen_at = copies, widen_at

    def __bool__(self) -> bool:
        return bool(self.gates)

    def widened(self, kind: str, layer: int, *tensors):
        """``tensors`` (``[B, ...]`` or None) repeated ``copies`` times in the batch dimension (copy ``c`` in rows
        ``c·B … c·B + B − 1``) from the layer ``widen_at`` on, else as they are. A model whose ``widens_gates`` is
        True calls this before each layer (a decoder layer as ``dec_self``) on what the layer reads, so the layers
        below the first gated one run once for every copy: the gates then have ``copies · B`` rows."""
        if self.widen_at is None or self.copies == 1 or _stage(kind, layer) < _stage(*self.widen_at):
            return tensors
        rows = next(iter(self.gates.values())).shape[0]
        return tuple(tensor if tensor is None or tensor.shape[0] == rows else
                     tensor.repeat(self.copies, *[1] * (tensor.dim() - 1)) for tensor in tensors)

    def heads_off(self, kind: str, layer: int, heads: int) -> "Tensor | tuple[int, ...]":
        """This layer's gate, or ``()`` (no head touched)."""
        return self.gates.get((kind, layer), ())


def _stage(kind: str, layer: int) -> tuple[bool, int]:
    """Where a layer runs: the encoder's layers, then the decoder's."""
    return kind != "enc_self", layer


def _order(entry: Entry) -> tuple:
    """Kinds in KINDS order (a kind that is none of them last), then layer, then head (the whole layer first)."""
    kind, layer, head = entry
    return (KINDS.index(kind) if kind in KINDS else len(KINDS), str(kind), layer, -1 if head is None else head)


def parse_spec(spec: str) -> Entry:
    """``KIND:LAYER:HEAD`` → ``(kind, layer, head)``; ``HEAD`` ``*`` → ``None``."""
    parts = spec.strip().split(":")
    if len(parts) != 3:
        raise AblationError(f"ablation {spec[:60]!r} must be KIND:LAYER:HEAD (e.g. cross:0:1, or cross:0:* for a "
                            f"whole layer)")
    kind, layer, head = (part.strip() for part in parts)
    if kind not in KINDS:
        raise AblationError(f"ablation {spec[:60]!r}: the kind must be one of {', '.join(KINDS)}; got {kind[:30]!r}")
    if not layer.isdigit():
        raise AblationError(f"ablation {spec[:60]!r}: the layer must be a number from 0; got {layer[:30]!r}")
    if head != "*" and not head.isdigit():
        raise AblationError(f"ablation {spec[:60]!r}: the head must be a number from 0 or *; got {head[:30]!r}")
    return kind, int(layer), None if head == "*" else int(head)
