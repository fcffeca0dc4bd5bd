"""The questions and answers about a checkpoint from other code, as plain data (no Qt, no torch): the
worker asks (``ImportQuestion``), the import dialog answers (``ImportAnswer``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the inspection is made on the worker; this module stays free of torch
    from models.importers.common import Inspection


@dataclass(frozen=True)
class ImportAnswer:
    """What the user said about a foreign checkpoint in the import dialog."""

    path: str
    format: str | None
    settings: dict
    src_vocab: str | None
    tgt_vocab: str | None
    trust: bool
    device: str
    inspection: Inspection | None = None


@dataclass(frozen=True)
class ImportQuestion:
    """A foreign checkpoint needs answers: ``inspection`` says what it lacks (None: it needs trust first)."""

    path: str
    inspection: Inspection | None
    problem: str
    previous: ImportAnswer | None = None
