"""The contract every format module keeps, and the one pipeline each conversion ends in.

A format module is an :class:`Importer`: it names itself (``NAME``, the ``--format`` value), lists the settings
it takes (``ACCEPTED``), says cheaply whether a file or folder is of its layout (``claims``), reads what the file
says and lacks (``inspect`` → :class:`Inspection`) and describes the conversion as plain parts (``convert`` →
:class:`Converted`: our config, the foreign weights and how they map, how the tokenizers are made, the provenance
answers). :func:`checkpoint_from` alone turns that description into a :class:`Checkpoint`, in one order for all:
check the weights' shapes against the config → build the model on the meta device → load the mapped weights →
make the tokenizers → record the provenance, in one shape for every format.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple, Protocol, runtime_checkable

from torch import Tensor

from ..nn.build import build_model, parameters_on_meta
from ..nn.config import ModelConfig
from ..nn.validation import check_against_weights
from ..storage.checkpoint import Checkpoint
from ..text.tokenizers import Tokenizer
from .common import Inspection, Settings, Source, WeightMap

# Every converted checkpoint's ``imported_from`` has exactly these keys.
PROVENANCE_KEYS = ("format", "file", "weights", "read_from_file", "supplied", "assumed", "vocabularies",
                   "tokenization", "details")


@dataclass(frozen=True)
class Provenance:
    """What a format tells the record of a conversion (the user's settings are added by the pipeline).

    ``file``: the file or folder converted; ``vocabularies``: side (``src``/``tgt``) → where its tokens came from;
    ``details``: facts of this format alone (a version, the training steps, the tokenizer's settings).
    """

    file: Path
    read_from_file: Mapping[str, Any]
    vocabularies: Mapping[str, str] = field(default_factory=dict)
    details: Mapping[str, Any] = field(default_factory=dict)


class Tokenizers(NamedTuple):
    """A conversion's two tokenizers, and how they turn text into tokens, in words (kept in the provenance)."""

    source: Tokenizer
    target: Tokenizer
    tokenization: str


@dataclass(frozen=True)
class Converted:
    """A conversion described as plain parts. ``weights`` and ``tokenizers`` are made when the pipeline asks,
    after the shapes were checked and the model built, so that their errors come in the pipeline's order."""

    config: ModelConfig
    state: Mapping[str, Tensor]  # the foreign weights, checked against ``config``'s sizes first
    weights_file: Path  # the file shape errors name
    weights: Callable[[], WeightMap]  # the foreign weights under our names
    tokenizers: Callable[[], Tokenizers]
    provenance: Provenance


@dataclass(frozen=True)
class Detection:
    """When automatic detection asks a format whether it ``claims`` a path: among files (``file``) and among folders
    (``folder``), formats are asked in ascending rank, the most specific layouts first (None: never, for that kind
    of path). ``hf_folder``: a Hugging Face folder, whose weights file stands for the folder and whose
    ``MODEL_TYPES`` name what is imported."""

    file: int | None = None
    folder: int | None = None
    hf_folder: bool = False


@runtime_checkable
class Importer(Protocol):
    """A format module (``models/importers/<name>.py``), registered in the catalogue (formats.py)."""

    NAME: str
    DETECTION: Detection
    ACCEPTED: Mapping[str, str]  # every ``--set`` key → what it means (with its default)

    def claims(self, source: Source) -> bool:
        """Whether ``source`` is of this layout; cheap, and never raises for a file of another format."""

    def inspect(self, source: Source, settings: Settings) -> Inspection:
        """What the file says and lacks; what was read on the way is kept in ``Inspection.found`` for convert."""

    def convert(self, source: Source, settings: Settings, src_vocab: str | None, tgt_vocab: str | None) -> Converted:
        """The conversion as plain parts (see :class:`Converted`); refuses what it cannot convert exactly."""


def checkpoint_from(converted: Converted, *, format_name: str, settings: Settings) -> Checkpoint:
    """The one pipeline: check shapes → build (on meta: the model takes the foreign tensors as its weights instead
    of initialising a copy only to overwrite it) → load weights → tokenizers → provenance → Checkpoint."""
    check_against_weights(converted.weights_file, converted.config, converted.state)
    with parameters_on_meta():
        model = build_model(converted.config)
    converted.weights().load_into(model)
    tokenizers = converted.tokenizers()
    record = provenance_record(converted, format_name=format_name, settings=settings,
                               tokenization=tokenizers.tokenization)
    return Checkpoint(model, tokenizers.source, target_tokenizer=tokenizers.target, provenance=record)


def provenance_record(converted: Converted, *, format_name: str, settings: Settings,
                      tokenization: str) -> dict[str, Any]:
    """The record kept in the converted checkpoint (``imported_from``): where it came from and every value not
    read from it, with :data:`PROVENANCE_KEYS` for every format."""
    provenance = converted.provenance
    record = {"format": format_name, "file": str(provenance.file.resolve()), "weights": converted.weights_file.name,
              "read_from_file": dict(provenance.read_from_file), "supplied": settings.supplied,
              "assumed": settings.assumed, "vocabularies": dict(provenance.vocabularies),
              "tokenization": tokenization, "details": dict(provenance.details)}
    return {"imported_from": record}
