"""The bundled demo checkpoints: each loads, its config is valid, and it translates the inputs recorded in
resources/checkpoints/demos.json to the recorded outputs (which its README line quotes; an encoder-only demo fills
the masks of its inputs)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from attnviz.state.demos import DEFAULT_DEMO, demo_checkpoints
from models.storage.checkpoint import load_checkpoint
from models.inference.fill_mask import fill_masks
from models.inference.translator import Translator

FOLDER = Path(__file__).resolve().parent.parent / "resources" / "checkpoints"
RECORDS = json.loads((FOLDER / "demos.json").read_text(encoding="utf-8"))
README = (FOLDER / "README.md").read_text(encoding="utf-8")


def test_every_shipped_checkpoint_has_a_record_and_every_record_a_file():
    assert sorted(path.stem for path in demo_checkpoints()) == sorted(RECORDS)
    assert sum(path.stat().st_size for path in FOLDER.parent.rglob("*") if path.is_file()) < 60 * 2**20


@pytest.mark.parametrize("name", sorted(RECORDS))
def test_demo_loads_and_translates_as_recorded(name):
    record = RECORDS[name]
    checkpoint = load_checkpoint(FOLDER / f"{name}.safetensors")
    checkpoint.model.config.validate()
    assert checkpoint.model.config.arch == record["arch"]
    assert name in README
    translator = Translator(checkpoint, "cpu")
    for source, expected in record["examples"].items():
        if translator.model.decodes:
            assert translator.translate(source).text == expected, source
        else:  # an encoder-only demo fills each mask with its most likely token (models/inference/fill_mask.py)
            assert fill_masks(translator, translator.source(source)).text == expected, source
        assert expected in README


def test_the_app_opens_the_english_spanish_demo_by_default_when_it_is_there():
    from attnviz.state.demos import initial_checkpoint

    demos = demo_checkpoints()
    expected = str(DEFAULT_DEMO) if DEFAULT_DEMO.exists() else (str(demos[0]) if demos else None)
    assert initial_checkpoint(None) == expected


def test_opening_a_demo_runs_its_example_at_once(qtbot, qsettings):
    from attnviz.gui.app import create_window

    name = sorted(RECORDS)[0]
    source, expected = next(iter(RECORDS[name]["examples"].items()))
    window = create_window(str(FOLDER / f"{name}.safetensors"), "cpu", qsettings)
    qtbot.addWidget(window)
    qtbot.waitUntil(lambda: window.session.result is not None, timeout=20_000)
    assert window.views.input_bar.text.text() == source and window.session.result.text == expected
    window.close()


def test_shipped_demos_carry_no_machine_paths():
    import re

    from models.storage.files import read_header

    for path in demo_checkpoints():
        provenance = read_header(path)["__metadata__"]["provenance"]
        assert not re.search(r'(^|[\s"=])/(work|tmp|root|home|Users)/', provenance), path.name


def test_every_demo_has_reference_pairs_for_the_corpus_tools():
    from attnviz.state.demos import DEMO_FOLDER, demo_reference_pairs
    from models.text.piglatin import to_pig_latin

    for name, record in RECORDS.items():
        pairs = demo_reference_pairs(name)
        assert len(pairs) >= 8, name
        assert pairs == demo_reference_pairs(DEMO_FOLDER / f"{name}.safetensors")
        if record["arch"].startswith("gru"):
            assert all(target == to_pig_latin(source) for source, target in pairs), name
    assert demo_reference_pairs("no-such-demo") == []
