"""Teaching sessions (.attnviz files) and presentation mode: a saved view reopens identically, bad session
files are one line, presenting hides the docks and walks the steps with the arrow keys."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from PySide6.QtCore import Qt

from attnviz.state.demos import DEFAULT_DEMO
from attnviz.state.session import RunSettings, Selection, ViewOptions
from attnviz.state.session_file import Look, SessionFileError, read_session, save_session
from tests.test_gui import WAIT, run_text


def _save(path, checkpoint, **changes):
    run = changes.pop("run", RunSettings(text="abc", mode="beam", beam=3, max_len=6))
    return save_session(path, checkpoint=checkpoint, run=run, selection=Selection(kind="dec_self", layer=1, head="mean",
                        step=2, hypothesis=1), look=Look(colormap="magma", masks=False,
                                                         options=ViewOptions(colour_range="own")))


def test_a_session_file_round_trips(tmp_path, random_checkpoint):
    folder = tmp_path / "class"
    folder.mkdir()
    checkpoint = shutil.copy(random_checkpoint, folder / "model.safetensors")
    path = _save(folder / "lesson", checkpoint)
    assert path.name == "lesson.attnviz"
    document = json.loads(path.read_text(encoding="utf-8"))
    assert document["checkpoint"] == "model.safetensors"  # relative: the folder can move as a whole
    saved = read_session(path)
    assert saved.checkpoint == folder / "model.safetensors"
    assert saved.run == RunSettings(text="abc", mode="beam", beam=3, max_len=6)
    assert saved.selection == Selection(kind="dec_self", layer=1, head="mean", step=2, hypothesis=1)
    assert saved.look == Look(colormap="magma", masks=False, options=ViewOptions(colour_range="own"))
    moved = tmp_path / "moved"
    shutil.move(folder, moved)
    assert read_session(moved / "lesson.attnviz").checkpoint == moved / "model.safetensors"


def test_a_bundled_demo_is_named_not_located(tmp_path):
    path = _save(tmp_path / "demo.attnviz", DEFAULT_DEMO)
    assert json.loads(path.read_text(encoding="utf-8"))["demo"] == DEFAULT_DEMO.stem
    assert read_session(path).checkpoint == DEFAULT_DEMO


@pytest.mark.parametrize(("content", "message"), [
    ("", "not JSON text"),
    ("[1, 2]", 'no "format": "attnviz-session"'),
    ('{"format": "attnviz-session", "version": 9, "demo": "x"}', "saved by a newer attnviz (session version 9"),
    ('{"format": "attnviz-session", "version": true, "demo": "x"}', '"version" must be a positive integer'),
    ('{"format": "attnviz-session", "version": 1}', 'names no checkpoint'),
    ('{"format": "attnviz-session", "version": 1, "demo": "nope"}', "the bundled demo 'nope' is not part"),
    ('{"format": "attnviz-session", "version": 1, "checkpoint": "gone.safetensors"}',
     "is not there (moved or deleted?)"),
    ('{"format": "attnviz-session", "version": 1, "demo": "DEMO", "input": {"mode": "sideways"}}',
     '"input.mode" must be one of greedy, beam, forced'),
    ('{"format": "attnviz-session", "version": 1, "demo": "DEMO", "input": {"beam": 1e9}}',
     '"input.beam" must be an integer from 1 to 64'),
    ('{"format": "attnviz-session", "version": 1, "demo": "DEMO", "selection": {"head": "loudest"}}',
     '"selection.head" must be a head index or one of mean, max, rollout'),
    ('{"format": "attnviz-session", "version": 1, "demo": "DEMO", "selection": {"kind": "sideways"}}',
     '"selection.kind" must be one of enc_self, dec_self, cross'),
    ('{"format": "attnviz-session", "version": 1, "demo": "DEMO", "view": []}', '"view" must be an object'),
    ('{"format": "attnviz-session", "version": 1, "demo": "DEMO", "view": {"masks": "yes"}}',
     '"view.masks" must be true or false'),
    ("[" * 100_000, "not JSON text"),
], ids=["empty", "a-list", "newer", "boolean-version", "no-checkpoint", "unknown-demo", "moved", "mode", "beam",
        "head", "kind", "view-list", "masks-text", "deep-nesting"])
def test_a_bad_session_file_is_one_line(tmp_path, content, message):
    path = tmp_path / "bad.attnviz"
    path.write_text(content.replace("DEMO", DEFAULT_DEMO.stem), encoding="utf-8")
    with pytest.raises(SessionFileError) as caught:
        read_session(path)
    text = str(caught.value)
    assert message in text and str(path) in text and "\n" not in text


def test_a_newer_sessions_extra_fields_are_named_not_fatal(tmp_path):
    path = tmp_path / "newer.attnviz"
    path.write_text(json.dumps({"format": "attnviz-session", "version": 1, "demo": DEFAULT_DEMO.stem,
                                "notes": "for week 3", "view": {"grid": True}}), encoding="utf-8")
    assert read_session(path).ignored == ("notes", "view.grid")  # ("compare" is a field now: the model B)


def _view(window):
    """What the window shows, as plain data: compared between the saved and the reopened window."""
    heatmap = window.viewing.current_heatmap()
    return {"selection": window.session.selection, "run": window.views.input_bar.run_settings(),
            "colormap": window.views.selector.colormap_name(), "masks": window.views.selector.masks_visible(),
            "options": window.views.selector.view_options(), "title": heatmap.title, "queries": heatmap.query_labels,
            "keys": heatmap.key_labels, "output": window.session.result.tokens,
            "hypothesis": window.session.selection.hypothesis}


def test_a_saved_session_reopens_the_same_view(qtbot, window, qsettings, tmp_path, random_checkpoint):
    from attnviz.gui.app import create_window

    run_text(qtbot, window, "abcd", mode="beam", beam=3, max_len=6)
    window.select(kind="dec_self", layer=1, head=1, step=2)
    window.viewing.choose_hypothesis(1)
    window.views.selector.set_colormap_name("magma")
    window.views.selector.set_masks_visible(False)
    window.views.selector.colour_range.setCurrentIndex(1)
    window.views.selector.predicted.setChecked(True)
    path = tmp_path / "lesson.attnviz"
    window.sessions.save_session(str(path))
    assert path.exists()
    saved_view, saved_image = _view(window), window.views.focus.image.image.copy()

    other = create_window(None, "cpu", qsettings)  # the default demo: another model is open before
    qtbot.addWidget(other)
    other.show()
    qtbot.waitUntil(lambda: other.session.model is not None and bool(other.session.results), timeout=WAIT)
    other.sessions.open_session(str(path))
    qtbot.waitUntil(lambda: other.session.model.path == random_checkpoint and bool(other.session.results)
                    and other.opening.plan is None, timeout=WAIT)
    assert _view(other) == saved_view
    np.testing.assert_array_equal(other.views.focus.image.image, saved_image)
    assert not other.views.focus.overlay.isVisible()
    assert other.views.decoding.beam.hypotheses.currentRow() == 1  # the reopened hypothesis is the one picked
    other.close()


def test_a_session_whose_checkpoint_moved_is_one_line_and_keeps_the_model(qtbot, window, tmp_path, random_checkpoint):
    checkpoint = shutil.copy(random_checkpoint, tmp_path / "gone.safetensors")
    path = _save(tmp_path / "old.attnviz", checkpoint)
    (tmp_path / "gone.safetensors").unlink()
    window.sessions.open_session(str(path))
    message = window.views.input_bar.result_text()
    assert "Cannot open the session" in message and "is not there (moved or deleted?)" in message
    assert "still showing random.safetensors" in message
    assert window.session.model.path == random_checkpoint and window.opening.plan is None


def test_dropping_a_session_file_opens_it(qtbot, window, tmp_path, random_checkpoint):
    path = _save(tmp_path / "dropped.attnviz", random_checkpoint)
    window.open_path(str(path))  # what a drop or a command-line argument does
    qtbot.waitUntil(lambda: bool(window.session.results) and window.opening.plan is None, timeout=WAIT)
    last_step = len(window.session.trace.tgt_tokens) - 1  # a saved step past this output's end is clamped
    assert window.session.selection == Selection(kind="dec_self", layer=1, head="mean", step=min(2, last_step),
                                                 hypothesis=1)
    assert window.views.input_bar.run_settings().mode == "beam"


def test_presenting_hides_the_docks_enlarges_text_and_walks_steps_with_arrows(qtbot, window):
    from PySide6.QtWidgets import QApplication

    from attnviz.gui.features.presenting import PRESENTATION_FONT_SCALES

    run_text(qtbot, window, "abcd", mode="forced", target="dcba")
    window.select(kind="cross", layer=0, head=0, step=0)
    size = QApplication.font().pointSizeF()
    axis_name = window.views.focus.plot.getAxis("bottom").label.font().pointSizeF()
    window.named_actions["present"].trigger()
    assert window.presenting.before is not None and window.named_actions["present"].isChecked()
    assert not window.views.model_dock.isVisible() and window.views.decoding_dock.isVisible()  # the steps stay in view
    scale = window.presenting.scale  # as large as fits the screen (the offscreen one is 800 pixels wide)
    assert scale in PRESENTATION_FONT_SCALES
    assert QApplication.font().pointSizeF() == pytest.approx(size * scale)
    assert window.views.focus.plot.getAxis("left").style["tickFont"].pointSizeF() == pytest.approx(size * scale)
    assert window.views.focus.plot.getAxis("bottom").label.font().pointSizeF() == pytest.approx(size * scale * 0.8)
    window.views.focus.setFocus()
    qtbot.keyClick(window.views.focus, Qt.Key.Key_Right)
    assert window.session.selection.step == 1
    qtbot.keyClick(window.views.focus, Qt.Key.Key_Down)
    assert window.session.selection.layer == 1
    qtbot.keyClick(window.views.focus, Qt.Key.Key_Left)
    assert window.session.selection.step == 0
    qtbot.keyClick(window.views.focus, Qt.Key.Key_Escape)
    assert window.presenting.before is None and not window.named_actions["present"].isChecked()
    assert window.views.model_dock.isVisible() and window.views.decoding_dock.isVisible()
    assert QApplication.font().pointSizeF() == pytest.approx(size)
    assert window.views.focus.plot.getAxis("bottom").label.font().pointSizeF() == pytest.approx(axis_name)
    qtbot.keyClick(window.views.focus, Qt.Key.Key_Right)  # outside presenting the bare arrows are not the window's
    assert window.session.selection.step == 0


def test_the_show_choice_is_saved_only_when_not_the_weights_and_older_files_show_the_weights(tmp_path):
    run, selection, look = RunSettings(text="abc"), Selection(), Look()
    alti = save_session(tmp_path / "alti", checkpoint=DEFAULT_DEMO, run=run, selection=selection, look=look,
                        show="alti")
    assert json.loads(alti.read_text(encoding="utf-8"))["show"] == "alti" and read_session(alti).show == "alti"
    plain = save_session(tmp_path / "plain", checkpoint=DEFAULT_DEMO, run=run, selection=selection, look=look)
    assert "show" not in json.loads(plain.read_text(encoding="utf-8"))  # as older versions wrote it
    assert read_session(plain).show == "weights" and read_session(plain).ignored == ()
    bad = tmp_path / "bad.attnviz"
    bad.write_text(json.dumps({"format": "attnviz-session", "version": 1, "demo": DEFAULT_DEMO.stem, "show": 3}),
                   encoding="utf-8")
    with pytest.raises(SessionFileError, match='"show" must be text; got 3'):
        read_session(bad)


def _reopened(qtbot, window, qsettings, path):
    from attnviz.gui.app import create_window

    other = create_window(None, "cpu", qsettings)
    qtbot.addWidget(other)
    other.show()
    qtbot.waitUntil(lambda: other.session.model is not None and bool(other.session.results), timeout=WAIT)
    other.sessions.open_session(str(path))
    qtbot.waitUntil(lambda: other.opening.plan is None and bool(other.session.results)
                    and other.session.model.path == window.session.model.path, timeout=WAIT)
    return other


def test_a_reopened_session_shows_its_method_and_an_unknown_one_falls_back_to_the_weights(qtbot, window, qsettings,
                                                                                            tmp_path):
    from attnviz.state.demos import demo_path
    from tests.test_gui_contributions import show
    from tests.test_gui_compare import open_demo

    open_demo(qtbot, window, "en-es-transformer")
    run_text(qtbot, window, "The house is small.", max_len=20)
    window.select(kind="cross", layer=1)
    show(qtbot, window, "alti")
    path = tmp_path / "alti.attnviz"
    window.sessions.save_session(str(path))
    assert read_session(path).show == "alti"
    other = _reopened(qtbot, window, qsettings, path)
    assert other.contributions.method == "alti" and other.views.selector.show_name() == "alti"
    qtbot.waitUntil(lambda: "<b>ALTI+</b>" in other.views.focus.title.text(), timeout=WAIT)
    np.testing.assert_allclose(other.views.focus.image.image, window.views.focus.image.image, atol=1e-6)
    other.close()

    document = json.loads(path.read_text(encoding="utf-8"))
    newer = tmp_path / "newer.attnviz"
    newer.write_text(json.dumps({**document, "demo": "en-es-transformer", "show": "sparkles"}), encoding="utf-8")
    assert read_session(newer).checkpoint == demo_path("en-es-transformer")
    other = _reopened(qtbot, window, qsettings, newer)
    assert other.contributions.method == "weights" and other.views.selector.show_name() == "weights"
    notice = "‘sparkles’, a method this attnviz does not know: showing the attention weights"
    assert notice in other.views.input_bar.result_text()
    assert "<b>Cross-attention</b> · layer 1 · head 0" in other.views.focus.title.text()
    other.close()


def test_a_reopened_session_contrasts_with_the_saved_token_and_says_so(qtbot, window, qsettings, tmp_path):
    """The contrast token y′ is saved with the session: reopened, the contrastive maps are those of
    logit(y) − logit(y′) again, so titled; a contrast of a field missing or out of range is one line."""
    from tests.test_gui_contrast import TEXT, click_top_k
    from tests.test_gui_contributions import show
    from tests.test_gui_compare import open_demo

    open_demo(qtbot, window, "en-es-transformer")
    run_text(qtbot, window, TEXT, max_len=12)
    window.select(kind="cross", layer=0, head=1, step=1)
    show(qtbot, window, "alti_logit")
    step = window.session.result.steps[1]
    chosen, other_token = step.tokens[0], next(label for label in step.top_tokens[0] if label != step.tokens[0])
    click_top_k(qtbot, window, other_token)
    contrasted = f"logit(‘{chosen}’) − logit(‘{other_token}’)"
    qtbot.waitUntil(lambda: contrasted in window.views.focus.title.text(), timeout=WAIT)
    path = tmp_path / "contrast.attnviz"
    window.sessions.save_session(str(path))
    saved = read_session(path).contrast
    assert (saved.step, saved.label, saved.hypothesis) == (1, other_token, 0)
    assert saved.token_id == window.contributions.contrast.token_id
    other = _reopened(qtbot, window, qsettings, path)
    qtbot.waitUntil(lambda: contrasted in other.views.focus.title.text(), timeout=WAIT)
    assert other.contributions.contrast.label == other_token and other.session.selection.step == 1
    np.testing.assert_allclose(other.views.focus.image.image, window.views.focus.image.image, atol=1e-6)
    assert other.views.decoding.top_k.title_text.endswith(f"vs ‘{other_token}’")
    other.close()

    document = json.loads(path.read_text(encoding="utf-8"))
    for contrast, message in (({"step": 1, "label": "x", "hypothesis": 0}, '"contrast" lacks token_id'),
                              ({**document["contrast"], "token_id": -4}, '"contrast.token_id" must be an integer')):
        bad = tmp_path / "bad.attnviz"
        bad.write_text(json.dumps({**document, "contrast": contrast}), encoding="utf-8")
        with pytest.raises(SessionFileError, match=message):
            read_session(bad)
