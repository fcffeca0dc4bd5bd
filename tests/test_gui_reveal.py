"""Walking the decoding steps with rows revealed as they are generated, in a real offscreen window: the focus
heatmap grows with the steps, the rows not generated yet are blank (neither hatched nor low weights), the
readout says so, and the choice is kept like the other view settings."""

from __future__ import annotations

import numpy as np

from attnviz.gui.app import create_window
from attnviz.gui.views.style import MASK_RGBA
from tests.test_gui import WAIT, run_text


def test_stepping_reveals_the_decoder_rows_one_by_one(qtbot, window):
    run_text(qtbot, window, "abc", mode="forced", target="bad")
    focus = window.views.focus
    reveal = window.views.selector.reveal_rows
    view_menu = next(action.menu() for action in window.menuBar().actions() if action.text() == "&View")
    assert reveal in view_menu.actions() and not reveal.isChecked()
    window.select(kind="dec_self", layer=0, head=0, step=0)
    assert focus.revealed is None and focus.unrevealed.image is None
    reveal.trigger()  # View → Reveal rows step by step
    assert window.session.options.reveal_rows and focus.revealed == (1, 1)
    full = window.session.trace.attention["dec_self"][0][0]
    rows = full.shape[0]
    for step in range(1, rows):
        window.viewing.step_selection("step", 1)  # ▶ / Alt+→
        assert focus.revealed == (step + 1, step + 1)
        assert np.array_equal(focus.matrix[:step + 1, :step + 1], full[:step + 1, :step + 1])
        assert not focus.matrix[step + 1:].any()  # no weight of a later row can be read out
    window.select(step=1)
    blank = focus.unrevealed.image
    assert blank.shape[:2] == full.shape and (blank[2:, :, 3] == 255).all() and (blank[:2, :2, 3] == 0).all()
    paper = tuple(int(channel) for channel in blank[-1, -1, :3])
    assert paper != MASK_RGBA  # not the hatching's colour
    assert focus.describe_cell(rows - 1, 0).endswith("not generated yet at this step")
    assert focus.query_tokens[2:] == [""] * (rows - 2)  # the later inputs' labels would give the output away
    # cross-attention: every source key exists from the first step
    window.select(kind="cross")
    assert focus.revealed == (2, len(window.session.trace.src_tokens))
    reveal.trigger()
    assert focus.revealed is None and focus.unrevealed.image is None
    assert np.array_equal(focus.matrix, window.session.trace.attention["cross"][0][0])


def test_the_reveal_choice_is_kept_like_the_other_view_settings(qtbot, qsettings, random_checkpoint):
    first = create_window(str(random_checkpoint), "cpu", qsettings)
    qtbot.addWidget(first)
    qtbot.waitUntil(lambda: first.session.model is not None, timeout=WAIT)
    first.views.selector.reveal_rows.setChecked(True)
    first.close()
    second = create_window(str(random_checkpoint), "cpu", qsettings)
    qtbot.addWidget(second)
    qtbot.waitUntil(lambda: second.session.model is not None, timeout=WAIT)
    assert second.views.selector.reveal_rows.isChecked() and second.session.options.reveal_rows
    second.close()
