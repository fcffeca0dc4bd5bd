"""Shared fixtures. Qt runs offscreen (set before any Qt import); torch uses one thread so two test
processes never fight over the two cores."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import pytest  # noqa: E402
import torch  # noqa: E402

from models import build_model
from models.storage.checkpoint import save_checkpoint
from models.text.tokenizers import CharTokenizer
from tests.helpers import LETTERS, tiny_config  # noqa: E402

torch.set_num_threads(1)



@pytest.fixture(scope="session")
def char_tokenizer() -> CharTokenizer:
    return CharTokenizer(list(LETTERS))


@pytest.fixture(scope="session")
def random_checkpoint(tmp_path_factory, char_tokenizer):
    """A real checkpoint file of an untrained (seeded) pre-LN Transformer over ``LETTERS``."""
    torch.manual_seed(0)
    model = build_model(tiny_config("transformer-preln"))
    path = tmp_path_factory.mktemp("checkpoints") / "random.safetensors"
    return save_checkpoint(path, model, char_tokenizer, char_tokenizer, {"note": "random weights"})


@pytest.fixture
def qsettings(tmp_path):
    """QSettings in a temporary INI file, so tests never read or write the user's settings."""
    from PySide6.QtCore import QSettings

    return QSettings(str(tmp_path / "attnviz.ini"), QSettings.Format.IniFormat)


@pytest.fixture(autouse=True, scope="session")
def converted_checkpoints_kept_apart(tmp_path_factory):
    """Foreign checkpoints the CLI converts for -c go to a temporary cache, never the user's ~/.cache."""
    previous = os.environ.get("XDG_CACHE_HOME")
    os.environ["XDG_CACHE_HOME"] = str(tmp_path_factory.mktemp("cache"))
    yield
    if previous is None:
        os.environ.pop("XDG_CACHE_HOME", None)
    else:
        os.environ["XDG_CACHE_HOME"] = previous


@pytest.fixture(autouse=True)
def no_thread_left_running():
    """Fail any test that leaves a model worker thread running."""
    yield
    import sys

    if "attnviz.gui.worker" not in sys.modules:
        return
    running = [thread for thread in sys.modules["attnviz.gui.worker"].WorkerThread.live if thread.thread.isRunning()]
    for thread in running:
        thread.close()
    assert not running, f"{len(running)} worker thread(s) left running"


@pytest.fixture
def window(qtbot, qsettings, random_checkpoint):
    """A real window on the random checkpoint, opened and shown (offscreen)."""
    from attnviz.gui.app import create_window

    window = create_window(str(random_checkpoint), "cpu", qsettings)
    qtbot.addWidget(window)
    window.resize(1200, 800)
    window.show()
    qtbot.waitUntil(lambda: window.session.model is not None, timeout=20_000)
    yield window
    window.close()

