"""Teaching sessions: a small ``.attnviz`` JSON file that reopens exactly one view (docs/ARCHITECTURE.md#sessions).

It holds the checkpoint (a bundled demo by name, any other file by a path relative to the session file when
they share a folder tree, else absolute), the input bar (sentence, mode, beam, forced target, length limit),
the selection (kind, layer, head, step, hypothesis), how the heatmap is drawn (colour map, masks, colour
range, row labels), when heads are switched off, ``ablation``: their ``KIND:LAYER:HEAD`` specs
(models/nn/ablation.py), for a snapshot series ``snapshot_step``: the training step shown, while comparing,
``compare``: the second model, named like the first, and when the maps show more than attention weights,
``show``: the contributions method (a name of models/analysis/contributions.py's registry; a name this attnviz
does not know shows the weights, and the window says so), and where the contrastive maps contrast with a token,
``contrast``: its hypothesis, step, token id and label (attnviz/state/contrast_view.py). No Qt, no torch: the
window and the tests read it the same way.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from models.inference.modes import MAX_BEAM, MIN_BEAM, MODE_NAMES
from models.nn.ablation import NO_ABLATION, Ablation
from models.trace.aggregate import AGGREGATES
from models.errors import AttnvizError
from models.storage.files import write_text
from models.trace.records import KINDS

from .contrast_view import ContrastWith
from .contributions import WEIGHTS
from .demos import DEMO_FOLDER, demo_path
from .session import RunSettings, Selection, ViewOptions

SUFFIX = ".attnviz"
FORMAT = "attnviz-session"
VERSION = 1
MAX_BYTES = 1024 * 1024  # a session is a few hundred bytes; anything this large is not one
COLOUR_RANGES = ("fixed", "own")


class SessionFileError(AttnvizError):
    """A session file that cannot be read or whose checkpoint is gone; the message is one line."""


@dataclass(frozen=True)
class Look:
    """How the heatmaps are drawn."""

    colormap: str = "viridis"
    masks: bool = True
    options: ViewOptions = field(default_factory=ViewOptions)


@dataclass(frozen=True)
class SavedSession:
    checkpoint: Path
    run: RunSettings
    selection: Selection
    look: Look
    ignored: tuple[str, ...] = ()  # keys of a newer version this one does not know
    ablation: Ablation = NO_ABLATION  # the heads switched off (checked against the model when it runs)
    snapshot_step: int | None = None  # a snapshot series: the training step shown
    compare: Path | None = None  # the model compared with (model B)
    compare_problem: str = ""  # why the saved model B cannot be opened (moved): model A still opens
    show: str = WEIGHTS  # the Show choice: attention weights or a contributions method, checked against the model
    contrast: ContrastWith | None = None  # y′ of the contrastive maps (of no run: its request id 0)


def checkpoint_reference(checkpoint: Path, session_path: Path) -> dict[str, str]:
    """How a session names its checkpoint: a bundled demo by name (it opens on any machine), else a path
    relative to the session file when possible (the two can move together), else absolute."""
    checkpoint = Path(checkpoint).resolve()
    if checkpoint.parent == DEMO_FOLDER.resolve() and demo_path(checkpoint.stem) is not None:
        return {"demo": checkpoint.stem}
    try:
        return {"checkpoint": Path(os.path.relpath(checkpoint, Path(session_path).resolve().parent)).as_posix()}
    except ValueError:  # another drive (Windows)
        return {"checkpoint": str(checkpoint)}


def session_document(checkpoint: Path, session_path: Path, *, run: RunSettings, selection: Selection,
                     look: Look, ablation: Ablation = NO_ABLATION, snapshot_step: int | None = None,
                     compare: Path | None = None, show: str = WEIGHTS,
                     contrast: ContrastWith | None = None) -> dict[str, Any]:
    document = {"format": FORMAT, "version": VERSION, **checkpoint_reference(checkpoint, session_path),
                "input": asdict(run),
                "selection": asdict(selection),
                "view": {"colormap": look.colormap, "masks": look.masks, **asdict(look.options)}}
    if ablation:
        document["ablation"] = ablation.specs()
    if snapshot_step is not None:
        document["snapshot_step"] = snapshot_step
    if compare is not None:
        document["compare"] = checkpoint_reference(compare, session_path)
    if show != WEIGHTS:  # optional: files of the weights alone stay as older versions wrote them
        document["show"] = show
    if contrast is not None:
        document["contrast"] = contrast.saved()
    return document


def save_session(path: str | Path, *, checkpoint: Path, run: RunSettings, selection: Selection, look: Look,
                 ablation: Ablation = NO_ABLATION, snapshot_step: int | None = None,
                 compare: Path | None = None, show: str = WEIGHTS, contrast: ContrastWith | None = None) -> Path:
    """Write the session atomically (a failed write leaves the old file as it was)."""
    path = Path(path)
    if path.suffix != SUFFIX:
        path = path.with_name(path.name + SUFFIX)
    document = session_document(checkpoint, path, run=run, selection=selection, look=look, ablation=ablation,
                                snapshot_step=snapshot_step, compare=compare, show=show, contrast=contrast)
    return write_text(path, json.dumps(document, indent=2, ensure_ascii=False) + "\n")


def read_session(path: str | Path, colormaps: tuple[str, ...] = ()) -> SavedSession:
    """The session saved in ``path``, checked field by field; a :class:`SessionFileError` names the file and
    the problem in one line (a moved checkpoint included)."""
    path = Path(path)
    try:
        if path.stat().st_size > MAX_BYTES:
            raise SessionFileError(f"{path}: not an attnviz session (larger than {MAX_BYTES // 1024} KB)")
        document = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise SessionFileError(f"{path}: no such session file") from None
    except OSError as error:
        raise SessionFileError(f"{path}: cannot read it ({error.strerror or error})") from None
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as error:
        raise SessionFileError(f"{path}: not an attnviz session (not JSON text: {_first_line(error)})") from None
    if not isinstance(document, dict) or document.get("format") != FORMAT:
        raise SessionFileError(f"{path}: not an attnviz session (no \"format\": \"{FORMAT}\")")
    version = document.get("version")
    if not _is_int(version) or version < 1:
        raise SessionFileError(f"{path}: \"version\" must be a positive integer; got {version!r}")
    if version > VERSION:
        raise SessionFileError(f"{path}: saved by a newer attnviz (session version {version}; this one reads "
                               f"version {VERSION})")
    reader = _Reader(path)
    checkpoint = _checkpoint(path, document)
    run = reader.section(document, "input", cls=RunSettings,
                         fields={"text": str, "mode": MODE_NAMES, "beam": (MIN_BEAM, MAX_BEAM), "target": str,
                                 "max_len": (1, 100_000), "src_lang": str, "tgt_lang": str, "chat": bool})
    selection = reader.section(document, "selection", cls=Selection,
                               fields={"kind": KINDS, "layer": (0, 10_000), "head": "head", "step": (0, 1_000_000),
                                "hypothesis": (0, 10_000)})
    view = document.get("view", {})
    if not isinstance(view, dict):
        raise SessionFileError(f"{path}: \"view\" must be an object")
    option_fields = {"colour_range": COLOUR_RANGES, "predicted_labels": bool, "reveal_rows": bool}
    options = reader.section({"view": {key: view[key] for key in option_fields if key in view}},
                             "view", cls=ViewOptions, fields=option_fields)
    look_fields = {"colormap": colormaps or str, "masks": bool}
    look_values = reader.values({key: view[key] for key in look_fields if key in view}, "view", look_fields)
    ablation = _ablation(path, document.get("ablation", []))
    snapshot = reader.values({"snapshot_step": document["snapshot_step"]} if "snapshot_step" in document else {},
                             "", {"snapshot_step": (0, 10**12)})
    compare, compare_problem = _partner(path, document.get("compare"))
    show = reader.values({"show": document["show"]} if "show" in document else {}, "", {"show": str})
    contrast = _contrast(reader, document.get("contrast"))
    ignored = sorted(set(document) - {"format", "version", "demo", "checkpoint", "input", "selection", "view",
                                      "ablation", "snapshot_step", "compare", "show", "contrast"})
    ignored += [f"view.{key}" for key in sorted(set(view) - {"colormap", "masks", *option_fields})]
    return SavedSession(checkpoint=checkpoint, run=run, selection=selection,
                        look=Look(options=options, **look_values), ignored=tuple(ignored), ablation=ablation,
                        snapshot_step=snapshot.get("snapshot_step"), compare=compare, compare_problem=compare_problem,
                        show=show.get("show", WEIGHTS), contrast=contrast)


CONTRAST_FIELDS = {"hypothesis": (0, 10_000), "step": (0, 1_000_000), "token_id": (0, 10**9), "label": str}


def _contrast(reader: _Reader, saved: Any) -> ContrastWith | None:
    """The saved contrast token, each of its fields checked (one line names a wrong or missing one)."""
    if saved is None:
        return None
    values = reader.section({"contrast": saved}, "contrast", cls=dict, fields=CONTRAST_FIELDS)
    missing = [key for key in CONTRAST_FIELDS if key not in values]
    if missing:
        raise SessionFileError(f"{reader.path}: \"contrast\" lacks {', '.join(missing)}")
    return ContrastWith(0, **values)


def _partner(path: Path, reference: Any) -> tuple[Path | None, str]:
    """The model to compare with, or (None, why) when it is gone: model A opens all the same."""
    if reference is None:
        return None, ""
    if not isinstance(reference, dict) or not {"demo", "checkpoint"} & set(reference):
        raise SessionFileError(f"{path}: \"compare\" must be an object with \"demo\" or \"checkpoint\"; "
                               f"got {reference!r:.80}")
    try:
        return _checkpoint(path, reference), ""
    except SessionFileError as problem:
        return None, f"Not comparing: the session's model B cannot be opened ({problem})"


def _ablation(path: Path, specs: Any) -> Ablation:
    if not isinstance(specs, list) or not all(isinstance(spec, str) for spec in specs):
        raise SessionFileError(f"{path}: \"ablation\" must be a list of KIND:LAYER:HEAD texts; got {specs!r:.80}")
    try:
        return Ablation.parse(specs)
    except AttnvizError as problem:
        raise SessionFileError(f"{path}: {problem}") from None


class _Reader:
    def __init__(self, path: Path):
        self.path = path

    def section(self, document: dict, name: str, cls, fields: dict[str, Any]):
        values = document.get(name, {})
        if not isinstance(values, dict):
            raise SessionFileError(f"{self.path}: \"{name}\" must be an object")
        return cls(**self.values(values, name, fields))

    def values(self, values: dict, name: str, fields: dict[str, Any]) -> dict[str, Any]:
        checked = {}
        for key, rule in fields.items():
            if key not in values:
                continue
            value = values[key]
            where = f"{self.path}: \"{name + '.' if name else ''}{key}\""
            if rule is str and not isinstance(value, str):
                raise SessionFileError(f"{where} must be text; got {value!r}")
            if rule is bool and not isinstance(value, bool):
                raise SessionFileError(f"{where} must be true or false; got {value!r}")
            if isinstance(rule, tuple) and isinstance(rule[0], str) and value not in rule:
                raise SessionFileError(f"{where} must be one of {', '.join(rule)}; got {value!r}")
            if isinstance(rule, tuple) and _is_int(rule[0]) and not (_is_int(value) and rule[0] <= value <= rule[1]):
                raise SessionFileError(f"{where} must be an integer from {rule[0]} to {rule[1]}; got {value!r}")
            if rule == "head" and not (_is_int(value) and 0 <= value < 10_000 or value in AGGREGATES):
                raise SessionFileError(f"{where} must be a head index or one of {', '.join(AGGREGATES)}; "
                                       f"got {value!r}")
            checked[key] = value
        return checked


def _checkpoint(path: Path, document: dict) -> Path:
    if "demo" in document:
        name = document["demo"]
        found = demo_path(name) if isinstance(name, str) else None
        if found is None:
            raise SessionFileError(f"{path}: the bundled demo {name!r} is not part of this attnviz")
        return found
    reference = document.get("checkpoint")
    if not isinstance(reference, str) or not reference:
        raise SessionFileError(f"{path}: names no checkpoint (\"demo\" or \"checkpoint\")")
    checkpoint = Path(reference)
    if not checkpoint.is_absolute():
        checkpoint = (path.resolve().parent / checkpoint).resolve()
    if not checkpoint.exists():
        raise SessionFileError(f"{path}: its checkpoint {checkpoint} is not there (moved or deleted?); open the "
                               "checkpoint with File → Open, then save the session again")
    return checkpoint


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _first_line(error: Exception) -> str:
    return str(error).splitlines()[0] if str(error) else type(error).__name__
