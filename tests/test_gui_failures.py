"""The window says what went wrong when a file cannot be opened or written; nothing is lost silently."""

from __future__ import annotations

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
    qtbot.waitUntil(lambda: "Cannot open it" in window.input_bar.result_text(), timeout=WAIT)
    assert "impossible.safetensors" in window.input_bar.result_text()
    assert "still showing random.safetensors" in window.input_bar.result_text()


@pytest.mark.parametrize("suffix", [".svg", ".png"])
def test_an_image_export_into_a_read_only_folder_says_so_and_not_saved(qtbot, window, tmp_path, suffix):
    folder = tmp_path / "readonly"
    folder.mkdir()
    # A read-only tmpfs: root ignores file modes, so chmod would not stop the write.
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", str(folder)], check=False).returncode != 0:
        folder.rmdir()
        folder.write_text("a file where the folder should be")
    try:
        window.exporting.export_focus_image(str(folder / f"focus{suffix}"))
        assert "Export failed" in window.input_bar.result_text()
        assert not window.statusBar().currentMessage().startswith("Saved")
        assert not (folder / f"focus{suffix}").exists()
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
    qtbot.waitUntil(lambda: "The model produced NaN at step 1" in window.input_bar.result_text(), timeout=WAIT)
