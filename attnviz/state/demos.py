"""The bundled demo checkpoints: where they are, their recorded example sentences, names, the default one.
No Qt, no torch.

The repository's top-level ``resources/`` folder is installed as the package ``attnviz.resources`` (see
pyproject.toml), so an installed attnviz finds its demos with importlib.resources wherever it lives; a
source checkout run without installing finds the same folder beside the package.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

DEFAULT_NAME = "en-es-transformer"


def resources_folder() -> Path:
    """The installed ``attnviz.resources`` package (a data-only namespace package); in a source checkout
    that is not installed, the repository's own folder."""
    try:
        spec = importlib.util.find_spec("attnviz.resources")
    except ModuleNotFoundError:
        spec = None
    for location in (spec.submodule_search_locations or []) if spec is not None else []:
        if (Path(location) / "checkpoints").is_dir():
            return Path(location)
    return Path(__file__).resolve().parents[2] / "resources"


RESOURCES = resources_folder()
DEMO_FOLDER = RESOURCES / "checkpoints"
DEFAULT_DEMO = DEMO_FOLDER / f"{DEFAULT_NAME}.safetensors"
ICON = RESOURCES / "icons" / "attnviz.svg"


def demo_checkpoints() -> list[Path]:
    """The bundled checkpoints (not the trainer's ``*.train-state.safetensors`` beside them)."""
    return sorted((path for path in DEMO_FOLDER.glob("*.safetensors")
                   if not path.name.endswith(".train-state.safetensors")),
                  key=lambda path: path.stem)  # by name: en-es-transformer before en-es-transformer-postln


def demo_records() -> dict[str, dict]:
    """``demos.json``: per demo name, its architecture and example sentences (with their outputs)."""
    records_file = DEMO_FOLDER / "demos.json"
    return json.loads(records_file.read_text(encoding="utf-8")) if records_file.exists() else {}


def demo_path(name: str) -> Path | None:
    """The checkpoint of the bundled demo called ``name`` (None when there is no such demo)."""
    path = DEMO_FOLDER / f"{name}.safetensors"
    return path if name and "/" not in name and path in demo_checkpoints() else None


def demo_examples(path: Path) -> list[str]:
    """The example sentences recorded for a bundled demo (none for any other checkpoint)."""
    if Path(path).parent.resolve() != DEMO_FOLDER.resolve():
        return []
    return list(demo_records().get(Path(path).stem, {}).get("examples", {}))


def demo_name(checkpoint: str | Path) -> str | None:
    """The bundled demo a checkpoint is (given by name or path); None for any other checkpoint."""
    path = Path(checkpoint)
    if path.suffix != ".safetensors" and demo_path(str(checkpoint)) is not None:
        return str(checkpoint)
    try:
        in_demos = path.parent.resolve() == DEMO_FOLDER.resolve()
    except OSError:
        return None
    return path.stem if in_demos and demo_path(path.stem) is not None else None


def demo_reference_pairs(checkpoint: str | Path) -> list[tuple[str, str]]:
    """A bundled demo's sentences with their reference translations (``"references"`` in demos.json), as
    (source, target) pairs: the corpus the corpus tools use when no PAIRS.tsv is given. Empty for any
    other checkpoint, or a demo without references."""
    name = demo_name(checkpoint)
    references = demo_records().get(name, {}).get("references", {}) if name else {}
    return [(source, target) for source, target in references.items()]


def demo_pairs() -> list[tuple[str, Path, Path]]:
    """The demos recorded as a comparison (``"compare_with"`` in demos.json: model A): per pair its menu title,
    model A and model B (the demo that names A), both present."""
    pairs = []
    for name, record in sorted(demo_records().items()):
        a, b = demo_path(str(record.get("compare_with", ""))), demo_path(name)
        if a is not None and b is not None:
            pairs.append((record.get("compare_title") or f"{a.stem} | {b.stem}", a, b))
    return pairs


def demo_example(path: Path) -> str:
    """The first example sentence recorded for a bundled demo ('' for any other checkpoint)."""
    return next(iter(demo_examples(path)), "")


def initial_checkpoint(requested: str | None) -> str | None:
    if requested:
        return requested
    if DEFAULT_DEMO.exists():
        return str(DEFAULT_DEMO)
    demos = demo_checkpoints()
    return str(demos[0]) if demos else None


def compare_choices(model: Path | None, demos: list[Path], recent: list[str]) -> list[tuple[str, list[str]]]:
    """What File → Compare With offers: the demos, then the recent files, each without the open ``model``."""
    def other(path) -> bool:
        return model is None or Path(path).resolve() != Path(model).resolve()

    demo_paths = [str(path) for path in demos if other(path)]
    recent_paths = [path for path in recent if other(path) and path not in demo_paths]
    return [("Demos", demo_paths), ("Recent files", recent_paths)]


SERIES_SUFFIX = ".snapshots"  # a snapshot series' folder beside its run's checkpoint (models/storage/snapshots.py)
CORPUS_EXAMPLES = 8  # sentences a model trained here offers from its training corpus
CORPUS_BYTES = 64_000  # read at most this much of that corpus for them


def model_examples(path: str | Path, provenance: dict | None = None) -> list[str]:
    """The example sentences offered for a model: a bundled demo's; a demo's snapshot series (``NAME.snapshots``,
    ``attnviz train --snapshots``), that demo's; otherwise the first sources of the PAIRS.tsv corpus its
    provenance names (``attnviz train`` records it), where that file is still there; else none."""
    path = Path(path)
    examples = demo_examples(path)
    if not examples and path.name.endswith(SERIES_SUFFIX):
        name = path.name[: -len(SERIES_SUFFIX)]
        examples = list(demo_records().get(name, {}).get("examples", {})) if demo_path(name) else []
    corpus = (provenance or {}).get("corpus")
    if examples or not isinstance(corpus, str) or not corpus:
        return examples
    for place in dict.fromkeys((path.parent / corpus, Path(corpus))):  # beside the model, or from here
        sources = _corpus_sources(place)
        if sources:
            return sources
    return []


def _corpus_sources(corpus: Path) -> list[str]:
    try:
        with corpus.open("r", encoding="utf-8", errors="replace") as file:
            text = file.read(CORPUS_BYTES)
    except OSError:
        return []
    lines = text.splitlines()
    whole = lines if len(text) < CORPUS_BYTES else lines[:-1]  # a line cut by the limit is not offered
    sources = [line.split("\t", 1)[0].strip() for line in whole if "\t" in line]
    return [source for source in dict.fromkeys(sources) if source][:CORPUS_EXAMPLES]
