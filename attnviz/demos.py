"""The bundled demo checkpoints: where they are, their recorded example sentences, the default one.
No Qt, no torch."""

from __future__ import annotations

from pathlib import Path

RESOURCES = Path(__file__).resolve().parent.parent / "resources"
DEMO_FOLDER = RESOURCES / "checkpoints"
DEFAULT_DEMO = DEMO_FOLDER / "en-es-transformer.safetensors"


def demo_checkpoints() -> list[Path]:
    """The bundled checkpoints (not the trainer's ``*.train-state.safetensors`` beside them)."""
    return sorted(path for path in DEMO_FOLDER.glob("*.safetensors") if not path.name.endswith(".train-state.safetensors"))


def demo_examples(path: Path) -> list[str]:
    """The example sentences recorded for a bundled demo (none for any other checkpoint)."""
    import json

    records_file = DEMO_FOLDER / "demos.json"
    if path.parent.resolve() != DEMO_FOLDER.resolve() or not records_file.exists():
        return []
    record = json.loads(records_file.read_text(encoding="utf-8")).get(path.stem, {})
    return list(record.get("examples", {}))


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
