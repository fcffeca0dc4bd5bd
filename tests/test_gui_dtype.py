"""The precision of the weights in a real offscreen window (Model panel → Weights): choosing it re-opens the open
model from its file (and model B, and a snapshot series' current snapshot) in that precision on the real worker
thread, it is remembered across restarts, a bad stored value falls back to float32, and the memory refusal
speaks of the combo, not of the CLI's flag."""

from __future__ import annotations

import pytest
import torch

from attnviz.gui.app import create_window
from attnviz.state.demos import demo_path
from models.nn.precisions import PRECISIONS
from models.storage.checkpoint import WEIGHT_DTYPES
from tests.helpers import write_checkpoint_twice_the_free_memory
from tests.test_gui import WAIT, run_text
from tests.test_gui_import import opened, tutorial_files, wait_for_dialog  # noqa: F401 (tutorial_files is a fixture)
from tests.test_gui_snapshots import copy_run, open_series  # noqa: F401 (copy_run is a fixture)

SENTENCE = "The Lord is my shepherd."
pytestmark = pytest.mark.filterwarnings("ignore:enable_nested_tensor")


def open_window(qtbot, qsettings, path):
    window = create_window(str(path), "cpu", qsettings)
    qtbot.addWidget(window)
    window.resize(1200, 800)
    window.show()
    qtbot.waitUntil(lambda: window.session.model is not None, timeout=WAIT)
    return window


def parameter_dtypes(translator) -> set[torch.dtype]:
    return {parameter.dtype for parameter in translator.model.parameters()}


def choose_weights(window, name: str) -> None:
    """As the user does: pick the entry in the Model panel's combo."""
    combo = window.views.model_panel.weights
    combo.setCurrentIndex(combo.findText(name))
    combo.activated.emit(combo.currentIndex())


def test_the_combo_offers_every_precision_load_checkpoint_keeps():
    assert set(PRECISIONS) == set(WEIGHT_DTYPES) and PRECISIONS[0] == "float32"


def test_choosing_bfloat16_reopens_the_demo_in_bfloat16_and_translates_the_same(qtbot, qsettings):
    window = open_window(qtbot, qsettings, demo_path("en-es-transformer"))
    worker = window.worker_thread.worker
    run_text(qtbot, window, SENTENCE, max_len=20)
    full = window.session.result.text
    assert parameter_dtypes(worker.translator) == {torch.float32}
    assert "weights float32" in window.views.model_panel.info.text()

    request = window.session.request
    choose_weights(window, "bfloat16")
    qtbot.waitUntil(lambda: window.session.model.weights == "bfloat16" and window.session.request is not request
                    and bool(window.session.results), timeout=WAIT)
    assert parameter_dtypes(worker.translator) == {torch.bfloat16}
    assert window.session.result.text == full == "El Señor es mi pastor."
    assert "weights bfloat16" in window.views.model_panel.info.text()
    assert window.session.trace.attention["cross"][0].dtype.name == "float32"  # attention is still traced as float32
    qsettings.sync()
    assert qsettings.value("model/weights") == "bfloat16"
    window.close()


def test_the_precision_survives_a_restart_and_a_bad_stored_value_falls_back(qtbot, qsettings, random_checkpoint):
    first = open_window(qtbot, qsettings, random_checkpoint)
    choose_weights(first, "float16")
    qtbot.waitUntil(lambda: first.session.model.weights == "float16", timeout=WAIT)
    first.close()

    second = open_window(qtbot, qsettings, random_checkpoint)  # a restart: a new window on the same settings file
    assert second.views.model_panel.weights_name() == "float16"
    assert second.session.model.weights == "float16"
    assert parameter_dtypes(second.worker_thread.worker.translator) == {torch.float16}
    second.close()

    qsettings.setValue("model/weights", "float8")
    qsettings.sync()
    third = open_window(qtbot, qsettings, random_checkpoint)
    assert third.views.model_panel.weights_name() == "float32"
    assert third.session.model.weights == "float32"
    assert parameter_dtypes(third.worker_thread.worker.translator) == {torch.float32}
    assert "model/weights='float8' is not valid; using 'float32'" in third.stored.problems
    third.close()


def test_model_b_and_a_snapshot_series_follow_the_precision(qtbot, window, copy_run):  # noqa: F811
    worker = window.worker_thread.worker
    window.comparing.compare_with(str(window.session.model.path))
    qtbot.waitUntil(lambda: window.session.partner is not None, timeout=WAIT)
    run_text(qtbot, window, "abc")
    choose_weights(window, "bfloat16")
    qtbot.waitUntil(lambda: window.session.model.weights == "bfloat16", timeout=WAIT)
    assert parameter_dtypes(worker.translator) == parameter_dtypes(worker.partner) == {torch.bfloat16}

    window.comparing.stop_comparing()
    open_series(qtbot, window, copy_run)  # opened in the chosen precision
    assert window.session.model.weights == "bfloat16" and parameter_dtypes(worker.translator) == {torch.bfloat16}
    run_text(qtbot, window, "cafe", max_len=10)
    window.views.snapshot_bar.slider.setValue(0)  # another snapshot loads when a run first asks for it
    qtbot.waitUntil(lambda: window.session.request.snapshot == 15 and bool(window.session.results), timeout=WAIT)
    assert parameter_dtypes(worker.translator) == {torch.bfloat16}

    choose_weights(window, "float32")  # the snapshot shown is read again from its file
    qtbot.waitUntil(lambda: window.session.model.weights == "float32", timeout=WAIT)
    assert parameter_dtypes(worker.translator) == {torch.float32} and list(worker.series_translators) == [15]
    assert window.session.model.snapshots == (15, 30, 45, 60)


def test_weights_too_large_for_the_memory_point_at_the_combo(qtbot, window, tmp_path, char_tokenizer):
    path = tmp_path / "huge.safetensors"
    write_checkpoint_twice_the_free_memory(path, char_tokenizer)
    window.open_path(str(path))
    qtbot.waitUntil(lambda: "Cannot open it" in window.views.input_bar.result_text(), timeout=WAIT)
    line = window.views.input_bar.result_text()
    assert "choose Weights: bfloat16 in the Model panel" in line and "--dtype" not in line
    assert "still showing random.safetensors" in line


def test_an_imported_model_converts_in_the_precision_and_says_when_a_change_applies(qtbot, window, tutorial_files):  # noqa: F811
    from tests.test_import_nn_transformer import HEADS

    worker = window.worker_thread.worker
    folder, src_vocab, tgt_vocab = tutorial_files
    window.open_path(str(folder / "transformer.pt"))
    dialog = wait_for_dialog(qtbot, window)
    dialog.fields["nhead"].setText(str(HEADS))
    dialog.fields["norm_first"].setText("false")
    dialog.vocabularies["src"].setText(str(src_vocab))
    dialog.vocabularies["tgt"].setText(str(tgt_vocab))
    dialog.accept()
    choose_weights(window, "bfloat16")  # while it converts: converted again, in the new precision
    qtbot.waitUntil(lambda: opened(window, "transformer.pt"), timeout=WAIT)
    assert window.session.model.weights == "bfloat16" and parameter_dtypes(worker.translator) == {torch.bfloat16}

    choose_weights(window, "float32")  # converted in memory: there is no file of it to read again
    qtbot.waitUntil(lambda: "applies from the next open" in window.views.input_bar.result_text(), timeout=WAIT)
    assert parameter_dtypes(worker.translator) == {torch.bfloat16} and window.session.model.weights == "bfloat16"


def test_changing_the_precision_while_a_model_opens_opens_that_model_in_it(qtbot, window):
    demo = demo_path("piglatin-gru-additive")
    window.open_path(str(demo))
    choose_weights(window, "float16")  # before the open has answered
    qtbot.waitUntil(lambda: window.session.model.path == demo and window.session.model.weights == "float16",
                    timeout=WAIT)
    assert parameter_dtypes(window.worker_thread.worker.translator) == {torch.float16}
