"""Attention across training in a real offscreen window: a snapshot folder of a real run opens as a series,
the training-step slider walks the snapshots (the output changes as the model learns), the keys step them,
and a session keeps the step."""

from __future__ import annotations

import random

import pytest

from attnviz.state.session_file import SessionFileError, read_session
from models import make_config
from models.storage.snapshots import load_series, snapshot_folder
from models.training.trainer import TrainingConfig, build_tokenizers, train
from tests.test_gui import WAIT, run_text

STEPS = 60


@pytest.fixture(scope="module")
def copy_run(tmp_path_factory):
    """A tiny GRU that learns to copy 3–5-letter strings within a few dozen steps, with 4 snapshots."""
    rng = random.Random(0)
    pairs = [(word, word) for word in sorted({"".join(rng.choice("abcdef") for _ in range(rng.randint(3, 5)))
                                               for _ in range(300)})]
    source, target = build_tokenizers(pairs, "char")
    model_config = make_config("gru-additive", source.vocab_size, target.vocab_size, hidden=48, decoder_layers=1,
                               max_len=16, dropout=0.0)
    out = tmp_path_factory.mktemp("copy") / "copy.safetensors"
    config = TrainingConfig(steps=STEPS, batch_size=32, learning_rate=1e-2, warmup_steps=5, label_smoothing=0.0,
                            eval_every=0, save_every=0, validation_sentences=0, seed=0, progress=False, snapshots=4)
    train(model_config, source, target, pairs, [], out_path=out, config=config)
    return snapshot_folder(out)


def open_series(qtbot, window, folder) -> None:
    window.open_path(str(folder))
    qtbot.waitUntil(lambda: window.session.model is not None and window.session.model.path == folder, timeout=WAIT)


def wait_for_step(qtbot, window, step: int) -> None:
    qtbot.waitUntil(lambda: window.session.request.snapshot == step and bool(window.session.results), timeout=WAIT)


def test_the_slider_walks_the_snapshots_and_the_output_changes(qtbot, window, copy_run):
    open_series(qtbot, window, copy_run)
    steps = tuple(load_series(copy_run).steps)
    assert window.session.model.snapshots == steps == (15, 30, 45, 60)
    bar = window.views.snapshot_bar
    assert bar.isVisible() and bar.slider.value() == 3 and bar.label.text() == "step 60 of 60"
    run_text(qtbot, window, "cafe", max_len=10)
    learned = window.session.result.text
    assert learned == "cafe"  # the run learned to copy
    outputs = {}
    for index, step in enumerate(steps):
        bar.slider.setValue(index)
        wait_for_step(qtbot, window, step)
        outputs[step] = window.session.result.text
        assert window.views.input_bar.result_text().startswith(f"<b>{window.session.result.text}</b>")  # that output
        assert bar.label.text() == f"step {step} of 60"
        assert window.session.request.settings.text == "cafe"  # the same sentence and settings
    assert outputs[60] == learned and outputs[15] != learned
    bar.first.click()
    wait_for_step(qtbot, window, 15)
    window.viewing.step_snapshot(1)
    wait_for_step(qtbot, window, 30)
    assert bar.slider.value() == 1
    shortcuts = {action.text(): action.shortcut().toString()
                 for action in window.findChildren(type(window.named_actions["present"]))}
    assert shortcuts["Next training step"] == "Ctrl+Shift+Right"
    bar.last.click()
    wait_for_step(qtbot, window, 60)


def test_newest_snapshot_request_wins(qtbot, window, copy_run):
    open_series(qtbot, window, copy_run)
    run_text(qtbot, window, "abcd", max_len=10)
    for index in (0, 1, 2, 0, 1):
        window.views.snapshot_bar.slider.setValue(index)
    wait_for_step(qtbot, window, 30)
    assert window.session.request.snapshot == 30 and window.views.snapshot_bar.label.text() == "step 30 of 60"


def test_a_single_checkpoint_hides_the_slider(qtbot, window):
    assert not window.views.snapshot_bar.isVisible() and window.session.snapshot_step is None


def test_the_session_keeps_the_snapshot_step(qtbot, window, copy_run, tmp_path, random_checkpoint):
    open_series(qtbot, window, copy_run)
    run_text(qtbot, window, "bead", max_len=10)
    window.views.snapshot_bar.slider.setValue(1)
    wait_for_step(qtbot, window, 30)
    path = tmp_path / "lesson.attnviz"
    window.sessions.save_session(str(path))
    saved = read_session(path)
    assert saved.snapshot_step == 30 and saved.checkpoint == copy_run
    window.open_path(str(random_checkpoint))
    qtbot.waitUntil(lambda: window.session.model.path == random_checkpoint, timeout=WAIT)
    window.sessions.open_session(str(path))
    qtbot.waitUntil(lambda: window.session.model.path == copy_run and bool(window.session.results)
                    and window.session.request.snapshot == 30, timeout=WAIT)
    assert window.views.snapshot_bar.slider.value() == 1 and window.session.request.settings.text == "bead"
    path.write_text(path.read_text().replace('"snapshot_step": 30', '"snapshot_step": "thirty"'))
    with pytest.raises(SessionFileError, match='"snapshot_step" must be an integer'):
        read_session(path)


def test_a_bad_series_is_one_line_in_the_window(qtbot, window, copy_run, random_checkpoint, tmp_path):
    import shutil

    folder = tmp_path / "mixed"
    shutil.copytree(copy_run, folder)
    shutil.copy(random_checkpoint, folder / "step-000020.safetensors")
    window.open_path(str(folder))
    qtbot.waitUntil(lambda: "step-000020.safetensors" in window.views.input_bar.result_text(), timeout=WAIT)
    text = window.views.input_bar.result_text()
    assert "without its training step" in text and "Cannot open it" in text
    assert "Traceback" not in text and "\n" not in text
