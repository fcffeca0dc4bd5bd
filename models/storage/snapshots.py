"""Attention across training: a series of float16 checkpoints of one run, kept at evenly spaced steps.

``attnviz train --snapshots N`` writes ``OUT.snapshots/step-000250.safetensors`` … beside ``OUT.safetensors``;
each is an ordinary attnviz checkpoint (same format, same tokenizers) whose provenance holds its ``steps``.
``load_series`` lists such a folder (or the final checkpoint whose ``.snapshots`` folder exists) ordered by
the step read from each file's metadata, never its name; a file of another model or tokenizer is refused
with one line naming it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import CheckpointError

FOLDER_SUFFIX = ".snapshots"
SNAPSHOT_SUFFIX = ".safetensors"


def snapshot_folder(out_path: str | Path) -> Path:
    """The snapshot folder that belongs to checkpoint ``out_path``."""
    out_path = Path(out_path)
    return out_path.with_name(out_path.stem + FOLDER_SUFFIX)


def snapshot_steps(steps: int, count: int) -> list[int]:
    """The ``count`` evenly spaced steps of a run of ``steps`` steps; the last is the final step."""
    if count <= 0:
        return []
    return sorted({max(1, round(k * steps / count)) for k in range(1, count + 1)})


def snapshot_path(folder: str | Path, step: int) -> Path:
    return Path(folder) / f"step-{step:06d}{SNAPSHOT_SUFFIX}"


@dataclass(frozen=True)
class Snapshot:
    step: int
    path: Path


@dataclass(frozen=True)
class SnapshotSeries:
    """The snapshots of one run, ordered by step; ``folder`` is where they lie."""

    folder: Path
    snapshots: tuple[Snapshot, ...]

    @property
    def steps(self) -> list[int]:
        return [snapshot.step for snapshot in self.snapshots]

    def index_of(self, step: int) -> int:
        """The snapshot at ``step``, or the nearest one before it (the first when none is)."""
        index = 0
        for position, snapshot in enumerate(self.snapshots):
            if snapshot.step <= step:
                index = position
        return index


def is_series(folder: str | Path) -> bool:
    """Whether ``folder`` is a snapshot folder: it holds attnviz checkpoints (a Hugging Face folder's
    ``model.safetensors`` is foreign, so such folders still go to the importers). Reads headers only."""
    from .metadata import read_metadata
    from ..errors import ForeignCheckpointError

    folder = Path(folder)
    if not folder.is_dir():
        return False
    for child in sorted(folder.iterdir()):
        if child.suffix == SNAPSHOT_SUFFIX and child.is_file():
            try:
                read_metadata(child)
            except ForeignCheckpointError:
                continue
            except CheckpointError:
                return True  # a damaged attnviz file: listing the series says what is wrong
            return True
    return False


def load_series(path: str | Path) -> SnapshotSeries:
    """The series in folder ``path`` (or beside checkpoint ``path``), checked from each file's metadata."""
    from .metadata import read_metadata

    path = Path(path)
    folder = path if path.is_dir() else snapshot_folder(path)
    if not folder.is_dir():
        raise CheckpointError(path, "no snapshot folder (train with --snapshots N to keep one)")
    files = sorted(child for child in folder.iterdir() if child.suffix == SNAPSHOT_SUFFIX and child.is_file())
    if not files:
        raise CheckpointError(folder, "holds no snapshots (.safetensors checkpoints)")
    snapshots, first = [], None
    for file in files:
        document = read_metadata(file)
        model = (document["config"], document["tokenizers"])
        step = document["provenance"].get("steps")
        if not isinstance(step, int) or isinstance(step, bool) or step < 0:
            raise CheckpointError(file, "a checkpoint without its training step in the metadata; not a snapshot")
        if first is None:
            first = (file, model)
        elif model != first[1]:
            raise CheckpointError(file, f"another model or tokenizer than {first[0].name}; a series holds one run")
        if any(snapshot.step == step for snapshot in snapshots):
            raise CheckpointError(file, f"a second snapshot of step {step}")
        snapshots.append(Snapshot(step, file))
    return SnapshotSeries(folder, tuple(sorted(snapshots, key=lambda snapshot: snapshot.step)))


def snapshot_provenance(provenance: dict[str, Any], step: int, count: int) -> dict[str, Any]:
    return {**provenance, "steps": step, "snapshot": {"step": step, "of": count}}
