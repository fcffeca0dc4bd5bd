"""The window says what went wrong when a file cannot be opened or written; nothing is lost silently."""

from __future__ import annotations

import html
import json
import subprocess

import pytest
from safetensors.torch import save_file

from models.storage.files import read_safetensors
from tests.test_gui import WAIT


def test_a_checkpoint_that_cannot_be_built_is_reported_in_the_window(qtbot, window, tmp_path, random_checkpoint):
    tensors, metadata = read_safetensors(random_checkpoint)
    config = json.loads(metadata["config"])
    config["max_len"] = 10 ** 14  # a position table larger than any address space: torch refuses the memory
    path = tmp_path / "impossible.safetensors"
    save_file(tensors, str(path), metadata={**metadata, "config": json.dumps(config)})
    window.open_path(str(path))
    qtbot.waitUntil(lambda: "Cannot open it" in window.views.input_bar.result_text(), timeout=WAIT)
    assert "impossible.safetensors" in window.views.input_bar.result_text()
    assert "still showing random.safetensors" in window.views.input_bar.result_text()


@pytest.mark.parametrize("name, export", [("focus.svg", "export_focus_image"), ("focus.png", "export_focus_image"),
                                          ("heads.png", "export_grid_image"), ("attention.npz", "export_npz"),
                                          ("cross.csv", "export_csv")])
def test_an_export_into_a_read_only_folder_says_so_and_not_saved(qtbot, window, tmp_path, name, export):
    from tests.test_gui import run_text

    run_text(qtbot, window, "abc")
    folder = tmp_path / "readonly"
    folder.mkdir()
    # A read-only tmpfs: root ignores file modes, so chmod would not stop the write.
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", str(folder)], check=False).returncode != 0:
        folder.rmdir()
        folder.write_text("a file where the folder should be")
    try:
        getattr(window.exporting, export)(str(folder / name))
        shown = html.unescape(window.views.input_bar.result_text())
        assert f"Export failed: {folder / name}: cannot write in {folder}" in shown and "\n" not in shown
        assert not window.statusBar().currentMessage().startswith("Saved")
        assert not (folder / name).exists()
    finally:
        if folder.is_dir():
            subprocess.run(["umount", str(folder)], check=True)


def test_a_model_that_computes_nan_says_so_in_the_window(qtbot, window, tmp_path, random_checkpoint):
    import torch

    from models.storage.checkpoint import load_checkpoint, save_checkpoint
    from tests.test_gui import run_text

    checkpoint = load_checkpoint(random_checkpoint)
    with torch.no_grad():
        checkpoint.model.output.bias.fill_(float("nan"))
    path = save_checkpoint(tmp_path / "nan.safetensors", checkpoint.model, checkpoint.source_tokenizer,
                           checkpoint.target_tokenizer)
    window.open_path(str(path))
    qtbot.waitUntil(lambda: window.session.model is not None and window.session.model.path == path, timeout=WAIT)
    run_text(qtbot, window, "abc", max_len=3)
    qtbot.waitUntil(lambda: "The model produced NaN at step 1" in window.views.input_bar.result_text(), timeout=WAIT)


def test_a_run_the_model_cannot_make_is_one_line_and_the_next_run_works(qtbot, window):
    """A user's error on the worker thread (here a head the model does not have) reaches the window as its one line."""
    from models.nn.ablation import Ablation
    from tests.test_gui import run_text

    window.session.ablation = Ablation.parse(["cross:9:0"])  # the random model has 2 layers
    window.views.input_bar.text.setText("abc")
    window.run()
    qtbot.waitUntil(lambda: "cannot ablate" in window.views.input_bar.result_text(), timeout=WAIT)
    shown = window.views.input_bar.result_text()
    assert "cannot ablate cross:9:0: cross has layers 0 to 1" in shown and "\n" not in shown
    assert "internal error" not in shown and window.views.input_bar.busy.isHidden()
    window.session.restore_heads()
    run_text(qtbot, window, "abc")  # the worker still answers
    assert window.session.results and "cannot ablate" not in window.views.input_bar.result_text()


def test_a_bug_on_the_worker_thread_is_said_in_the_window_and_the_next_run_works(qtbot, window, capfd):
    """Anything else that goes wrong in a run is a bug: the window says which error it was, the traceback goes to
    stderr for a report, and the worker thread lives on."""
    from tests.test_gui import run_text

    bar = window.views.input_bar
    greedy = bar.mode.findData("greedy")
    bar.mode.setItemData(greedy, "sideways")  # a mode no decoder knows reaches the core: a ValueError there
    bar.mode.setCurrentIndex(greedy)
    bar.text.setText("abc")
    window.run()
    qtbot.waitUntil(lambda: "internal error" in bar.result_text(), timeout=WAIT)
    shown = html.unescape(bar.result_text())
    assert "internal error: ValueError: mode must be one of ('greedy', 'beam', 'forced')" in shown
    assert "\n" not in shown and bar.busy.isHidden()
    assert "Traceback" in capfd.readouterr().err
    bar.mode.setItemData(greedy, "greedy")
    run_text(qtbot, window, "abc")  # the worker still answers
    assert window.session.results and "internal error" not in bar.result_text()
