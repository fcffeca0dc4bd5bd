"""Attention across training: ``--snapshots N`` keeps N float16 checkpoints of a real run, a resumed run
continues the series, and a folder is listed by the steps in the files' metadata (foreign files refused)."""

from __future__ import annotations

import re
import shutil

import pytest
import torch
from safetensors.torch import load_file

from attnviz.cli import main
from models.storage.checkpoint import load_checkpoint, save_checkpoint
from models.errors import CheckpointError, ConfigError
from models.storage.snapshots import load_series, snapshot_folder, snapshot_steps
from models.training.trainer import build_tokenizers, train
from tests.test_training import SMALL, quick, small_model_config


def run(tmp_path, name, *, resume=False, **overrides):
    source, target = build_tokenizers(SMALL, "char")
    model_config = small_model_config("gru-additive", source, target)
    out = tmp_path / f"{name}.safetensors"
    train(model_config, source, target, SMALL[4:], SMALL[:4], out_path=out, config=quick(**overrides),
          resume=resume)
    return out


def test_snapshot_steps_are_evenly_spaced_and_end_at_the_last_step():
    assert snapshot_steps(20, 4) == [5, 10, 15, 20]
    assert snapshot_steps(10, 3) == [3, 7, 10]
    assert snapshot_steps(10, 0) == []


def test_a_run_keeps_n_float16_snapshots_in_step_order(tmp_path):
    out = run(tmp_path, "run", steps=20, snapshots=4)
    folder = snapshot_folder(out)
    assert folder == tmp_path / "run.snapshots"
    series = load_series(folder)
    assert series.steps == [5, 10, 15, 20]
    assert load_series(out).steps == series.steps  # the final checkpoint names its series too
    for snapshot in series.snapshots:
        assert snapshot.path.name == f"step-{snapshot.step:06d}.safetensors"
        assert all(t.dtype == torch.float16 for t in load_file(str(snapshot.path)).values() if t.is_floating_point())
        loaded = load_checkpoint(snapshot.path)
        assert loaded.provenance["steps"] == snapshot.step
    final, last = load_checkpoint(out), load_checkpoint(series.snapshots[-1].path)
    for name, value in final.model.state_dict().items():
        torch.testing.assert_close(last.model.state_dict()[name], value.half().float())
    first = load_file(str(series.snapshots[0].path))
    assert any(not torch.equal(first[name], tensor)
               for name, tensor in load_file(str(series.snapshots[-1].path)).items())


def test_a_resumed_run_continues_the_series_and_checks_its_spacing(tmp_path):
    straight = run(tmp_path, "straight", steps=20, snapshots=4)
    resumed = run(tmp_path, "resumed", steps=10, snapshots=2)
    assert load_series(resumed).steps == [5, 10]
    with pytest.raises(ConfigError, match="snapshots were every 5 steps, now every 6.66667 steps"):
        run(tmp_path, "resumed", steps=20, snapshots=3, resume=True)
    run(tmp_path, "resumed", steps=20, snapshots=4, resume=True)
    series = load_series(resumed)
    assert series.steps == [5, 10, 15, 20]
    for ours, theirs in zip(series.snapshots, load_series(straight).snapshots):
        first, second = load_file(str(ours.path)), load_file(str(theirs.path))
        assert all(torch.equal(first[name], second[name]) for name in first)


def test_a_foreign_file_or_an_empty_folder_is_one_line(tmp_path, random_checkpoint):
    out = run(tmp_path, "run", steps=6, snapshots=2)
    folder = snapshot_folder(out)
    stranger = folder / "step-000004.safetensors"
    shutil.copy(random_checkpoint, stranger)
    with pytest.raises(CheckpointError) as caught:
        load_series(folder)
    assert str(stranger) in str(caught.value) and "\n" not in str(caught.value)
    stranger.unlink()
    other = load_checkpoint(random_checkpoint)
    save_checkpoint(stranger, other.model, other.source_tokenizer, other.target_tokenizer, {"steps": 4})
    with pytest.raises(CheckpointError, match="another model or tokenizer than step-000003.safetensors"):
        load_series(folder)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(CheckpointError, match="holds no snapshots"):
        load_series(empty)


def test_cli_train_snapshots_and_info_shows_the_step(tmp_path, capsys):
    data = tmp_path / "pairs.tsv"
    data.write_text("".join(f"{a}\t{b}\n" for a, b in SMALL), encoding="utf-8")
    out = tmp_path / "cli.safetensors"
    assert main(["train", "--data", str(data), "--arch", "gru-additive", "--out", str(out), "--steps", "6",
                 "--snapshots", "3", "--tokenizer", "char", "--batch-size", "8", "--set", "hidden=16",
                 "--eval-every", "0", "--save-every", "0", "--valid-sentences", "1", "--no-progress"]) == 0
    series = load_series(out)
    assert series.steps == [2, 4, 6]
    capsys.readouterr()
    assert main(["info", str(series.snapshots[0].path)]) == 0
    assert re.search(r"trained\s+2 of 6 planned steps \(a snapshot taken during the run\)", capsys.readouterr().out)
    assert main(["train", "--data", str(data), "--arch", "gru-additive", "--out", str(out), "--steps", "6",
                 "--snapshots", "7", "--tokenizer", "char", "--no-progress"]) == 1
    assert "attnviz: error: snapshots (7) must be at most steps (6)" in capsys.readouterr().err


def test_render_draws_one_frame_per_snapshot(tmp_path, capsys):
    out = run(tmp_path, "run", steps=9, snapshots=3)
    frames = tmp_path / "frames"
    assert main(["render", "--snapshots", str(snapshot_folder(out)), "abc", "--kind", "cross", "--size", "300x200",
                 "-o", str(frames)]) == 0
    assert sorted(path.name for path in frames.iterdir()) == ["step-000003.png", "step-000006.png", "step-000009.png"]
    assert all(path.read_bytes().startswith(b"\x89PNG") for path in frames.iterdir())
    assert main(["render", "abc", "--kind", "cross", "-o", str(tmp_path / "x.png")]) == 1
    assert "attnviz: error: give either -c CHECKPOINT or --snapshots FOLDER" in capsys.readouterr().err
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["render", "--snapshots", str(empty), "abc", "--kind", "cross", "-o", str(frames)]) == 1
    assert "holds no snapshots" in capsys.readouterr().err


def test_the_shipped_series_lists_in_order_and_its_snapshots_load():
    from attnviz.state.demos import RESOURCES

    folder = RESOURCES / "series" / "piglatin-gru-additive.snapshots"
    series = load_series(folder)
    assert series.steps == [200, 400, 600, 800, 1000, 1200]
    assert load_checkpoint(series.snapshots[0].path).provenance["snapshot"] == {"step": 200, "of": 6}
