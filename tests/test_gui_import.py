"""Opening checkpoints from other code in the app: the one dialog for what a file lacks, trust, refusal
of hostile pickles, and saving the converted model with the answers in it."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest
import torch
from PySide6.QtCore import QMimeData, QPointF, Qt, QUrl
from PySide6.QtGui import QDropEvent

from attnviz.gui.app import create_window
from models.storage.checkpoint import load_checkpoint
from tests.test_import_nn_transformer import HEADS, SRC_WORDS, TGT_WORDS, Seq2SeqTransformer, write_vocab
from tests.test_import_safety import CreatesAFile

WAIT = 20_000
pytestmark = pytest.mark.filterwarnings("ignore:enable_nested_tensor")


@pytest.fixture(scope="module")
def tutorial_files(tmp_path_factory):
    torch.manual_seed(5)
    original = Seq2SeqTransformer(4 + len(SRC_WORDS), 4 + len(TGT_WORDS), False).eval()
    folder = tmp_path_factory.mktemp("tutorial")
    torch.save(original.state_dict(), folder / "transformer.pt")
    torch.save(original, folder / "whole.pt")
    return folder, write_vocab(folder / "src.txt", SRC_WORDS), write_vocab(folder / "tgt.txt", TGT_WORDS)


@pytest.fixture
def window(qtbot, qsettings, random_checkpoint):
    window = create_window(str(random_checkpoint), "cpu", qsettings)
    qtbot.addWidget(window)
    window.show()
    qtbot.waitUntil(lambda: window.session.model is not None, timeout=WAIT)
    yield window
    window.close()


def opened(window, name: str) -> bool:
    return window.session.model is not None and window.session.model.path.name == name


def drop(window, path) -> None:
    mime = QMimeData()
    mime.setUrls([QUrl.fromLocalFile(str(path))])
    window.dropEvent(QDropEvent(QPointF(5, 5), Qt.DropAction.CopyAction, mime, Qt.MouseButton.NoButton,
                                Qt.KeyboardModifier.NoModifier))


def wait_for_dialog(qtbot, window, previous=None):
    qtbot.waitUntil(lambda: window.opening.import_dialog not in (None, previous)
                    and window.opening.import_dialog.isVisible(), timeout=WAIT)
    return window.opening.import_dialog


def test_a_state_dict_asks_once_then_opens_and_saves_with_the_answers(qtbot, window, tutorial_files, tmp_path):
    folder, src_vocab, tgt_vocab = tutorial_files
    drop(window, folder / "transformer.pt")
    dialog = wait_for_dialog(qtbot, window)
    assert set(dialog.fields) == {"nhead", "norm_first"} and set(dialog.vocabularies) == {"src", "tgt"}
    dialog.fields["nhead"].setText("3")  # wrong: d_model is not divisible by 3
    dialog.fields["norm_first"].setText("false")
    dialog.vocabularies["src"].setText(str(src_vocab))
    dialog.vocabularies["tgt"].setText(str(tgt_vocab))
    dialog.accept()
    again = wait_for_dialog(qtbot, window, dialog)  # asked again, saying why, keeping the answers
    assert again.problem.isVisibleTo(again) and "nhead" in again.problem.text()
    assert again.vocabularies["src"].text() == str(src_vocab)
    again.fields["nhead"].setText(str(HEADS))
    again.accept()
    qtbot.waitUntil(lambda: opened(window, "transformer.pt"), timeout=WAIT)
    assert window.session.model.arch == "transformer-postln"
    window.views.input_bar.text.setText(" ".join(SRC_WORDS[:3]))
    window.views.input_bar.max_len.setValue(5)
    window.run()
    qtbot.waitUntil(lambda: window.session.trace is not None and window.session.trace.heads("cross") == HEADS,
                    timeout=WAIT)
    trace = window.session.trace
    assert trace.kinds == ["enc_self", "dec_self", "cross"] and trace.heads("cross") == HEADS
    saved = tmp_path / "converted.safetensors"
    window.opening.save_model_as(str(saved))
    qtbot.waitUntil(saved.exists, timeout=WAIT)
    remembered = load_checkpoint(saved).provenance["imported_from"]
    assert "nhead" in str(remembered) and "transformer.pt" in str(remembered)


def test_a_whole_pickled_model_opens_only_when_trusted(qtbot, window, tutorial_files):
    folder, src_vocab, tgt_vocab = tutorial_files
    window.open_path(str(folder / "whole.pt"))
    dialog = wait_for_dialog(qtbot, window)
    assert not dialog.fields and "unpickling" in dialog.problem.text()
    dialog.reject()  # not trusted: nothing opens, the open model stays
    assert opened(window, "random.safetensors")
    window.open_path(str(folder / "whole.pt"))
    dialog = wait_for_dialog(qtbot, window, dialog)
    dialog.trust.setChecked(True)
    dialog.accept()
    vocab_dialog = wait_for_dialog(qtbot, window, dialog)  # the trusted file still lacks its vocabularies
    assert vocab_dialog.trust.isChecked() and not vocab_dialog.fields  # nhead and norm_first were read
    vocab_dialog.vocabularies["src"].setText(str(src_vocab))
    vocab_dialog.vocabularies["tgt"].setText(str(tgt_vocab))
    vocab_dialog.accept()
    qtbot.waitUntil(lambda: opened(window, "whole.pt"), timeout=WAIT)
    assert window.session.model.arch == "transformer-postln"


@pytest.mark.parametrize("layout", ["torch.save", "pickle"])
def test_a_hostile_pickle_is_refused_in_the_window(qtbot, window, tmp_path, layout):
    target = tmp_path / "pwned"
    payload = {"model": {"weight": torch.ones(2, 2)}, "settings": CreatesAFile(target)}
    path = tmp_path / "model.pt"
    if layout == "torch.save":
        torch.save(payload, path)
    else:
        path.write_bytes(pickle.dumps(payload, protocol=4))
    window.open_path(str(path))
    qtbot.waitUntil(lambda: "Cannot open it" in window.views.input_bar.result_text(), timeout=WAIT)
    assert not target.exists() and opened(window, "random.safetensors")
    assert window.opening.import_dialog is None  # no "trust" offer for a file that would run code


def test_a_dropped_t5_folder_opens_without_questions_and_shows_every_head(qtbot, window, tmp_path):
    pytest.importorskip("transformers")
    from tests.test_import_t5 import SENTENCES, build

    folder, _, _ = build(tmp_path, "v1.1")
    drop(window, folder)
    qtbot.waitUntil(lambda: opened(window, folder.name), timeout=WAIT)
    assert window.opening.import_dialog is None or not window.opening.import_dialog.isVisible()
    window.views.input_bar.text.setText(SENTENCES[1])
    window.views.input_bar.max_len.setValue(5)
    window.run()
    qtbot.waitUntil(lambda: window.session.trace is not None and window.session.trace.heads("cross") == 4,
                    timeout=WAIT)
    trace = window.session.trace
    assert trace.kinds == ["enc_self", "dec_self", "cross"]
    assert trace.tgt_tokens[0] == "<pad>" and trace.src_tokens[-1] == "</s>"  # T5 starts from the pad id


def test_a_dropped_fairseq_folder_asks_which_dictionary_is_the_source_then_opens(qtbot, window, tmp_path):
    """A fairseq checkpoint whose dictionaries are dict.en.txt and dict.de.txt and which names no languages:
    the import dialog asks for the two dictionaries, then the model opens and runs."""
    import shutil

    folder = tmp_path / "fairseq"
    shutil.copytree(Path(__file__).parent / "data" / "fairseq" / "transformer-preln", folder)
    (folder / "dict.src.txt").rename(folder / "dict.en.txt")
    (folder / "dict.tgt.txt").rename(folder / "dict.de.txt")
    drop(window, folder)
    dialog = wait_for_dialog(qtbot, window)
    assert set(dialog.vocabularies) == {"src", "tgt"} and not dialog.fields
    dialog.vocabularies["src"].setText(str(folder / "dict.en.txt"))
    dialog.vocabularies["tgt"].setText(str(folder / "dict.de.txt"))
    dialog.accept()
    qtbot.waitUntil(lambda: opened(window, "fairseq"), timeout=WAIT)
    window.views.input_bar.text.setText("the cat sees a big house")
    window.run()
    qtbot.waitUntil(lambda: window.session.trace is not None and window.session.trace.heads("cross") == 4,
                    timeout=WAIT)
    assert window.session.trace.src_tokens[-1] == "</s>" and window.session.trace.tgt_tokens[0] == "</s>"
