"""What the views show of a decoder-only model's run (attnviz/state/prompt_view.py and the view-model), on a real
run of the bundled Pig Latin decoder-only demo: plain data, no Qt."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from attnviz.state import compare_view, prompt_view, viewmodel
from attnviz.state.demos import demo_path
from attnviz.state.figures import heatmap_svg
from attnviz.state.session import RunLabels, Selection, ViewOptions
from models.inference.translator import Translator
from models.storage.checkpoint import load_checkpoint


def decoded(name: str, text: str, **options):
    translator = Translator(load_checkpoint(demo_path(name)), "cpu")
    steps = translator.decode(translator.source(text), **options)
    try:
        while True:
            next(steps)
    except StopIteration as finished:
        return finished.value


@pytest.fixture(scope="module")
def result():
    return decoded("piglatin-decoder-only", "team", max_len=12)[0]


def test_steps_count_the_continuation_and_sit_after_the_prompt(result):
    trace = result.trace
    prompt = trace.prompt_len
    assert prompt == 5 and trace.src_tokens == ["t", "e", "a", "m", "<s>"]
    assert prompt_view.step_offset(trace) == prompt - 1
    assert prompt_view.step_count(trace) == len(result.tokens)
    state = viewmodel.heatmap(trace, Selection(kind="dec_self", step=2))
    assert state.step_row == prompt - 1 + 2 and state.boundary == prompt
    assert state.axis_names == prompt_view.SEQUENCE_AXES
    named = viewmodel.heatmap(trace, Selection(kind="dec_self"), ViewOptions(predicted_labels=True),
                              outputs=result.tokens)
    assert named.query_labels[:prompt - 1] == trace.tgt_tokens[:prompt - 1]  # the prompt's rows keep their tokens
    assert named.query_labels[prompt - 1] == f"<s> → {result.tokens[0]}"
    # revealed step by step: the prompt exists at once, the continuation up to the step
    revealed = viewmodel.heatmap(trace, Selection(kind="dec_self", step=1), ViewOptions(reveal_rows=True))
    assert revealed.revealed == (prompt + 1, prompt + 1)
    panel = viewmodel.step_state(result, trace, Selection(kind="dec_self", step=1))
    assert panel.count == len(result.tokens) and panel.offset == prompt - 1 and panel.produced == result.tokens[1]
    assert panel.source_bars.labels == trace.src_tokens
    assert np.allclose(panel.source_bars.values, trace.attention["dec_self"][0][0][prompt, :prompt])


def test_a_local_layer_masks_the_keys_beyond_its_window(result):
    trace = result.trace
    whole = viewmodel.heatmap(trace, Selection(kind="dec_self"), windows=(0, 0, 0, 0)).mask
    local = viewmodel.heatmap(trace, Selection(kind="dec_self"), windows=(2, 0, 0, 0)).mask
    n = len(trace.tgt_tokens)
    rows, cols = np.indices((n, n))
    assert np.array_equal(whole, cols <= rows)  # causal
    assert np.array_equal(local, (cols <= rows) & (cols > rows - 2))  # and 2 keys: itself and the one before
    second = viewmodel.heatmap(trace, Selection(kind="dec_self", layer=1), windows=(2, 0, 0, 0)).mask
    assert np.array_equal(second, whole)


def test_key_value_groups_name_the_heads():
    assert prompt_view.group_size((0, 0, 1, 1), 4) == 2
    assert prompt_view.group_size((0, 1, 2, 3), 4) == 0  # one key/value head each: nothing to mark
    assert prompt_view.group_size((0, 0, 0, 0), 4) == 4  # multi-query
    assert prompt_view.head_names(4, 2) == ["H0·kv0", "H1·kv0", "H2·kv1", "H3·kv1"]


def test_the_thumbnails_boundary_follows_their_shrinking(result):
    trace = result.trace
    grid = viewmodel.model_grid(trace, Selection(kind="dec_self"), kv_groups=(0, 0, 1, 1))
    assert grid.boundary == trace.prompt_len and grid.group == 2 and grid.col_names[2] == "H2·kv1"
    long = dataclasses.replace(trace, src_tokens=["a"] * 600, tgt_tokens=["a"] * 1000, prompt_len=600)
    assert prompt_view.thumbnail_boundary(long, "dec_self", side=256) == 600 / 4  # every 4th cell kept


def test_the_exported_figure_draws_the_boundary(result):
    state = viewmodel.heatmap(result.trace, Selection(kind="dec_self"))
    lut = np.zeros((256, 3), np.uint8)
    assert "#ff9800" in heatmap_svg(state, lut)
    gru = decoded("piglatin-gru-additive", "team", max_len=12)[0].trace
    assert "#ff9800" not in heatmap_svg(viewmodel.heatmap(gru, Selection(kind="cross")), lut)


def test_compared_with_a_gru_its_attention_over_the_prompt_stands_for_cross_attention(result):
    gru = decoded("piglatin-gru-additive", "team", max_len=12)[0].trace
    trace, prompt = result.trace, result.trace.prompt_len
    state = compare_view.compare_state(trace, gru, Selection(kind="dec_self", layer=0, head=0))
    assert np.array_equal(state.a.state.matrix, trace.attention["dec_self"][0][0][prompt - 1:, :prompt])
    assert state.a.state.query_labels == trace.tgt_tokens[prompt - 1:]
    assert np.array_equal(state.b.state.matrix, gru.attention["cross"][0][0])
    assert prompt_view.PROMPT_COLUMNS_NOTE in state.a.state.title
    assert state.diff.state is None and "source tokens differ" in state.diff.message
    both = compare_view.compare_state(trace, trace, Selection(kind="dec_self"))
    assert both.diff.state is not None and not both.diff.state.matrix.any()  # two decoder-only: as they are


def test_a_decoder_only_run_streams_its_prompt_and_the_steps_so_far_as_the_finished_map_will_show_them():
    """While a decoder-only run decodes, the focus map is the prompt's prefilled rows (carried by the first step) and
    one row per step so far: the finished trace's top-left block, cell for cell, labels and mask too."""
    from models.inference.decoding import run

    translator = Translator(load_checkpoint(demo_path("piglatin-decoder-only")), "cpu")
    source = translator.source("strength")
    steps, results = run(translator.decode(source, max_len=8))
    labels = RunLabels(tuple(translator.source_labels(source)), "<s>")
    assert steps[0].attention["dec_self"][0].shape[-1] == len(labels.source)  # the prompt's keys, then itself
    assert steps[0].first_rows is not None and all(step.first_rows is None for step in steps[1:])
    trace = results[0].trace
    for count in (1, 4, len(steps)):
        streamed = viewmodel.streamed_trace(labels, steps[:count], "dec_self")
        n = len(labels.source) - 1 + count
        assert streamed.prompt_len == trace.prompt_len and streamed.tgt_tokens == trace.tgt_tokens[:n]
        assert np.array_equal(streamed.masks["dec_self"], trace.masks["dec_self"][:n, :n])
        for layer, weights in enumerate(streamed.attention["dec_self"]):
            np.testing.assert_array_equal(weights, trace.attention["dec_self"][layer][:, :n, :n])
    state = viewmodel.streamed_heatmap(labels, steps[:4], Selection(kind="dec_self", layer=1, head=2))
    assert state is not None and state.matrix.shape == (len(labels.source) + 3, len(labels.source) + 3)
    assert "decoding… 4 steps so far" in state.title
    gru = Translator(load_checkpoint(demo_path("piglatin-gru-transformer-decoder")), "cpu")
    gru_source = gru.source("team")
    gru_steps = list(gru.decode(gru_source, max_len=6))
    streamed = viewmodel.streamed_heatmap(RunLabels(tuple(gru.source_labels(gru_source)), "<s>"), gru_steps,
                                          Selection(kind="dec_self"))
    assert streamed is not None and streamed.matrix.shape == (len(gru_steps), len(gru_steps))


def test_the_beam_tree_follows_each_hypothesis_through_the_finished_list():
    """A decoder-only beam's step has up to 2K rows: K running, then the list of finished hypotheses
    (models/inference/finished_beams.py); every final hypothesis' path through the tree spells its tokens."""
    translator = Translator(load_checkpoint(demo_path("piglatin-decoder-only")), "cpu")
    run = translator.decode(translator.source("the quick brown fox"), mode="beam", beam=3, max_len=40)
    steps = []
    try:
        while True:
            steps.append(next(run))
    except StopIteration as finished:
        results = finished.value
    assert max(step.beam_size for step in steps) > 3
    state = viewmodel.beam_state(results, steps)
    assert len(state.hypotheses) == len(results) == 3
    for result, path in zip(results, state.paths):
        assert [state.nodes[node].token for node in path] == result.tokens
    assert sum(node.finished for node in state.nodes) >= 3
