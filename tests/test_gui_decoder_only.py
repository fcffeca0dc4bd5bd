"""A decoder-only language model in the window (docs/architectures.md#decoder-only): the bundled Pig Latin demo
decoded greedily, by beam and forced; its one prompt box, its one attention kind with the prompt's boundary, its
steps over the continuation; a random 24-layer × 14-head grouped-query model with sliding windows at 1366×768; the
Show box; and Compare With an encoder-decoder model trained on the same task."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from attnviz.state.grid_layout import LEAST_SIDE
from attnviz.state.demos import demo_path
from models import build_model
from models.nn.config import DecoderOnlyConfig
from models.storage.checkpoint import save_checkpoint
from tests.test_gui import WAIT, run_text
from tests.test_gui_compare import compare, open_demo
from tests.test_gui_contributions import show

DEMO = "piglatin-decoder-only"


@pytest.fixture
def demo_window(qtbot, qsettings):
    from attnviz.gui.app import create_window

    window = create_window(str(demo_path(DEMO)), "cpu", qsettings)
    qtbot.addWidget(window)
    window.resize(1366, 768)
    window.show()
    qtbot.waitUntil(lambda: window.session.model is not None, timeout=WAIT)
    yield window
    window.close()


def prompt_len(window) -> int:
    return window.session.trace.prompt_len


def test_the_demo_opens_with_one_prompt_box_and_one_attention_kind(qtbot, demo_window):
    window, bar = demo_window, demo_window.views.input_bar
    assert bar.text_label.isVisible() and "Prompt" in bar.text_label.text()
    assert "prompt" in bar.text.placeholderText().lower()
    assert not bar.source_language.isVisible() and not bar.target_language.isVisible()
    info = window.session.model
    assert info.prompted and info.kv_groups == (0, 1, 2, 3) and info.windows == (0, 0, 0, 0)  # no groups, no windows
    run_text(qtbot, window, "team", max_len=12)
    trace, selector = window.session.trace, window.views.selector
    assert [selector.kind.itemData(index) for index in range(selector.kind.count())] == ["dec_self"]
    count = prompt_len(window)
    assert trace.src_tokens[-1] == "<s>" and count == len("team") + 1
    # the prompt's end on both axes of the focus view and of every thumbnail
    vertical, horizontal = window.views.focus.boundary
    assert vertical.isVisible() and horizontal.isVisible()
    assert vertical.value() == horizontal.value() == count - 0.5
    assert "prompt end" in window.views.focus.legend.text()
    assert all(line.isVisible() for line in window.views.head_grid.boundaries)
    assert [label.name for label in window.views.head_grid.col_labels] == ["H0", "H1", "H2", "H3"]
    # the steps are the continuation's: the scrubber's last step is the last output token's, outlined at its row
    result = window.session.result
    panel = window.views.decoding
    assert panel.controls.slider.maximum() == len(result.tokens) - 1
    assert window.views.focus.step_box.rect().center().y() == count - 1 + len(result.tokens) - 1
    window.select(step=0)
    assert window.views.focus.step_box.rect().center().y() == count - 1
    assert "Step 1, input:" in panel.prefix.text() and f"→ &nbsp;<b>{result.tokens[0]}</b>" in panel.prefix.text()
    bars = panel.source_strip.state
    assert bars.labels == trace.src_tokens and "over the prompt" in bars.title
    assert np.allclose(bars.values, trace.attention["dec_self"][0][0][count - 1, :count])
    assert panel.top_k.state.labels[0] == result.tokens[0]


def test_beam_and_forced_decoding_of_the_demo(qtbot, demo_window):
    window = demo_window
    run_text(qtbot, window, "the quick brown fox", mode="beam", beam=3, max_len=40)
    results, steps = window.session.results, window.session.steps
    assert len(results) == 3 and max(step.beam_size for step in steps) > 3  # the finished list joins the running
    beam = window.views.decoding.beam
    assert beam.isVisible() and beam.hypotheses.count() == 3
    assert beam.hypotheses.item(0).text().startswith(f"1. {results[0].text}")
    assert beam.graph.scene().items()  # the tree is drawn
    beam.hypotheses.setCurrentRow(2)
    assert window.session.result is results[2]
    assert window.views.decoding.controls.slider.maximum() == len(results[2].tokens) - 1
    run_text(qtbot, window, "team", mode="forced", target="eamtay", max_len=20)
    assert window.session.result.text == "eamtay"
    assert window.views.input_bar.target.placeholderText() == "Continuation to force"
    assert window.views.decoding.controls.slider.maximum() == len("eamtay")  # and the end token


def grouped_model(path, char_tokenizer):
    """A random-weight decoder-only model of 24 layers × 14 query heads reading 2 key/value heads, every other
    layer local with a sliding window of 3 keys (Gemma 2's alternation)."""
    torch.manual_seed(0)
    config = DecoderOnlyConfig(arch="decoder-only", vocab_size=char_tokenizer.vocab_size, d_model=56, layers=24,
                               heads=14, kv_heads=2, d_ff=64, max_len=256, sliding_window=3,
                               window_layers="LG" * 12, pad_id=0, bos_id=2, eos_id=3, prompt_separator=True)
    return save_checkpoint(path, build_model(config), char_tokenizer, char_tokenizer)


def test_a_24_by_14_grouped_query_model_with_sliding_windows_at_1366_by_768(qtbot, qsettings, tmp_path,
                                                                             char_tokenizer):
    from attnviz.gui.app import create_window

    window = create_window(str(grouped_model(tmp_path / "grouped.safetensors", char_tokenizer)), "cpu", qsettings)
    qtbot.addWidget(window)
    window.resize(1366, 768)
    window.show()
    qtbot.waitUntil(lambda: window.session.model is not None, timeout=WAIT)
    info = window.session.model
    assert info.kv_groups == (0,) * 7 + (1,) * 7 and info.windows == (3, 0) * 12
    run_text(qtbot, window, "hello world", max_len=4)
    # a local layer masks the keys 3 or more positions back as the future is; a global layer does not
    window.select(layer=0, head=0)
    mask = window.views.focus.mask
    assert mask[8, 6] and not mask[8, 5] and not mask[8, 9]  # W = 3 keys: positions 6, 7, 8
    window.select(layer=1)
    mask = window.views.focus.mask
    assert mask[8, 0] and not mask[8, 9]
    # the heads grid names each head's key/value group and leaves a wider gap between the groups
    grid = window.views.model_view
    names = grid.col_names
    assert names[6] == "H6·kv0" and names[7] == "H7·kv1" and grid.shape == (24, 14)
    window.views.grids.setCurrentWidget(grid)
    qtbot.waitUntil(lambda: grid.isVisible(), timeout=WAIT)
    assert grid.grid.side >= LEAST_SIDE and grid.grid.x(7) - grid.grid.x(6) > grid.grid.x(6) - grid.grid.x(5)
    grid.scroll_to(23, 13)  # the last layer's last head scrolled into view, not cut off
    assert grid.viewport().rect().contains(grid.cell_rect(23, 13).toRect())
    window.views.grids.setCurrentWidget(window.views.head_grid)
    heads = window.views.head_grid
    qtbot.waitUntil(lambda: heads.isVisible(), timeout=WAIT)
    assert [label.name for label in heads.col_labels][7] == "H7·kv1"
    # 14 heads in the tab: two rows, one key/value group each (head 7, the second group's first, starts row 2)
    first, seventh = (heads.cells[head][0].sceneBoundingRect() for head in (0, 7))
    assert heads.per_row == 7 and seventh.top() > first.bottom() and seventh.left() == first.left()
    assert min(view.sceneBoundingRect().width() for view, _ in heads.cells) >= 16


def test_the_show_box_gives_prompt_contributions(qtbot, demo_window):
    window = demo_window
    run_text(qtbot, window, "team", max_len=12)
    show(qtbot, window, "alti")
    count = prompt_len(window)
    bars = window.views.decoding.source_strip.state
    assert bars.labels == window.session.trace.src_tokens and len(bars.values) == count
    assert "of each prompt token to this step" in bars.title
    assert window.views.focus.boundary[0].isVisible() and window.views.focus.boundary[0].value() == count - 0.5
    window.select(head="rollout")
    assert window.views.focus.boundary[0].isVisible()


def test_compare_a_gru_with_the_decoder_only_demo(qtbot, qsettings, random_checkpoint):
    from attnviz.gui.app import create_window

    window = create_window(str(random_checkpoint), "cpu", qsettings)
    qtbot.addWidget(window)
    window.resize(1366, 768)
    window.show()
    qtbot.waitUntil(lambda: window.session.model is not None, timeout=WAIT)
    open_demo(qtbot, window, "piglatin-gru-additive")
    compare(qtbot, window, DEMO)
    run_text(qtbot, window, "team", mode="forced", target="eamtay", max_len=20)
    qtbot.waitUntil(lambda: window.session.partner_result is not None
                    and window.session.partner_result.text == "eamtay", timeout=WAIT)
    view, partner = window.views.compare_view, window.session.partner_result.trace
    assert window.views.selector.kind.currentData() == "cross"
    count = partner.prompt_len
    # B's pane: its steps' attention over the prompt, the map an encoder-decoder's cross-attention is
    assert np.array_equal(view.b.matrix, partner.attention["dec_self"][0][0][count - 1:, :count])
    assert view.a.matrix.shape[0] == view.b.matrix.shape[0]  # the same rows: <s> and the output fed
    assert "over the prompt" in view.b.title.text()
    said = view.diff.title.text()
    assert "source tokens differ" in said  # the GRU's source ends with </s>, the prompt with <s>
    assert "‘&lt;s&gt;’ in B" in said  # the token quoted, not taken for a strike-through tag
