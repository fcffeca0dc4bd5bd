"""The view-model and the session without Qt: given a trace and a selection, exactly what each view shows;
which answers of the worker are kept and which are dropped as stale. This file imports no PySide6."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from attnviz.state import compare_view, viewmodel
from attnviz.state.session import NO_REQUEST, ModelInfo, RunSettings, Selection, Session
from models.trace.aggregate import aggregate
from models.trace.records import AttentionTrace, DecodeResult, DecodeStep

SRC = ["▁the", "▁cat", "</s>"]
TGT = ["<s>", "▁el", "▁gato"]


def weights(heads: int, queries: int, keys: int, seed: int) -> np.ndarray:
    raw = np.random.default_rng(seed).random((heads, queries, keys)).astype(np.float32)
    return raw / raw.sum(axis=-1, keepdims=True)


@pytest.fixture
def trace() -> AttentionTrace:
    causal = np.tril(np.ones((3, 3), dtype=bool))
    return AttentionTrace(
        src_tokens=SRC, tgt_tokens=TGT,
        attention={"enc_self": [weights(2, 3, 3, 0), weights(2, 3, 3, 1)],
                   "dec_self": [weights(2, 3, 3, 2) * causal, weights(2, 3, 3, 3) * causal],
                   "cross": [weights(2, 3, 3, 4), weights(2, 3, 3, 5)]},
        masks={"enc_self": np.ones((3, 3), bool), "dec_self": causal, "cross": np.ones((3, 3), bool)})


def step(index: int, rows: int = 1, token: str = "▁el", parents=(0,), finished=(False,)) -> DecodeStep:
    top = [[token, "▁la", "▁un"] for _ in range(rows)]
    return DecodeStep(step=index, token_ids=np.arange(rows), tokens=[token] * rows,
                      probabilities=np.full(rows, 0.7), ranks=np.zeros(rows, int), top_ids=np.zeros((rows, 3), int),
                      top_tokens=top, top_probs=np.tile([0.7, 0.2, 0.1], (rows, 1)), parents=np.array(parents),
                      scores=np.full(rows, -0.36), finished=np.array(finished), attention={}, masks={})


def result(trace: AttentionTrace, steps: list[DecodeStep], text: str = "el gato") -> DecodeResult:
    return DecodeResult(token_ids=[5, 6, 2], tokens=["▁el", "▁gato", "</s>"], text=text, log_prob=-1.25, score=-0.9,
                        trace=trace, steps=steps, rows=[0] * len(steps))


def test_the_focus_heatmap_of_one_head(trace):
    state = viewmodel.heatmap(trace, Selection(kind="cross", layer=1, head=1, step=2))
    np.testing.assert_array_equal(state.matrix, trace.attention["cross"][1][1])
    np.testing.assert_array_equal(state.mask, trace.masks["cross"])
    assert state.query_labels == TGT and state.key_labels == SRC
    assert state.title == "<b>Cross-attention</b> · layer 1 · head 1"
    assert state.axis_names == ("decoder input (queries)", "source (keys)")
    assert state.levels == (0.0, 1.0) and state.step_row == 2 and state.file_stem == "cross-L1-H1"


def test_aggregates_and_the_encoder_have_their_own_titles_and_no_step_row(trace):
    state = viewmodel.heatmap(trace, Selection(kind="enc_self", layer=1, head="rollout", step=2))
    np.testing.assert_array_equal(state.matrix, aggregate(trace, "enc_self", 1, "rollout"))
    assert state.title == "<b>Encoder self-attention</b> · layer 1 · attention rollout"
    assert state.query_labels == SRC and state.key_labels == SRC and state.step_row is None
    assert state.file_stem == "enc_self-L1-rollout"
    mean = viewmodel.heatmap(trace, Selection(kind="dec_self", layer=0, head="mean"))
    np.testing.assert_allclose(mean.matrix, trace.attention["dec_self"][0].mean(axis=0))
    assert mean.title.endswith("mean of heads") and mean.key_labels == TGT
    assert viewmodel.heatmap(AttentionTrace(SRC, TGT, {}, {}), Selection()) is None


def test_head_grid_and_model_view(trace):
    grid = viewmodel.head_grid(trace, Selection(kind="dec_self", layer=1, head=1))
    assert (grid.rows, grid.cols, grid.row_names, grid.col_names, grid.selected) == (1, 2, ["L1"], ["H0", "H1"], (0, 1))
    for head in range(2):
        np.testing.assert_array_equal(grid.matrices[head], trace.attention["dec_self"][1][head])
    everything = viewmodel.model_grid(trace, Selection(kind="cross", layer=1, head="max"))
    assert (everything.rows, everything.cols, everything.selected) == (2, 2, None)  # an aggregate outlines no head
    np.testing.assert_array_equal(everything.matrices[3], trace.attention["cross"][1][1])
    assert viewmodel.model_grid(trace, Selection(kind="cross", layer=1, head=0)).selected == (1, 0)


def test_thumbnails_of_a_long_input_keep_each_blocks_largest_weight():
    """A 1,024-token head would cost megabytes per thumbnail; it is shrunk to at most THUMBNAIL_SIDE cells a
    side, each cell the largest weight of its block, so a one-cell-wide diagonal survives. Short inputs are
    untouched, and the focus heatmap always keeps every cell."""
    rng = np.random.default_rng(7)
    long = rng.random((1000, 1000)).astype(np.float16) * 0.01
    long[np.arange(1000), np.arange(1000)] = 0.9  # a sharp diagonal, one cell wide
    shrunk = viewmodel.thumbnail(long, side=256)
    assert shrunk.shape == (250, 250) and shrunk.dtype == np.float32
    expected = long.astype(np.float32).reshape(250, 4, 250, 4).max(axis=(1, 3))
    np.testing.assert_array_equal(shrunk, expected)
    np.testing.assert_array_equal(np.diag(shrunk), np.full(250, np.float32(np.float16(0.9))))
    ragged = rng.random((300, 37)).astype(np.float32)  # only the long side shrinks, blocks of 2, the last ragged
    assert viewmodel.thumbnail(ragged, side=256).shape == (150, 37)
    np.testing.assert_array_equal(viewmodel.thumbnail(ragged, side=256)[-1], ragged[-2:].max(axis=0))
    odd = rng.random((257, 5)).astype(np.float32)
    np.testing.assert_array_equal(viewmodel.thumbnail(odd, side=256)[-1], odd[-1])  # a last block of one row
    short = rng.random((256, 12)).astype(np.float32)
    assert viewmodel.thumbnail(short, side=256) is short
    side = viewmodel.THUMBNAIL_SIDE
    length = side + side // 2  # blocks of 2: thumbnails of side × ¾ cells
    trace = AttentionTrace(src_tokens=["a"] * length, tgt_tokens=["b"] * 3,
                           attention={"enc_self": [np.stack([long[:length, :length]] * 2)]},
                           masks={"enc_self": np.ones((length, length), bool)})
    for grid in (viewmodel.head_grid(trace, Selection(kind="enc_self")),
                 viewmodel.model_grid(trace, Selection(kind="enc_self"))):
        assert [matrix.shape for matrix in grid.matrices] == [(length // 2, length // 2)] * 2
    assert viewmodel.head_grid(trace, Selection(kind="enc_self"), images=False).matrices == []  # a head switch
    assert viewmodel.heatmap(trace, Selection(kind="enc_self")).matrix.shape == (length, length)


def test_the_step_bars_say_which_layer_and_head_they_show(trace):
    on_cross = viewmodel.source_bars(trace, Selection(kind="cross", layer=0, head=1, step=1))
    np.testing.assert_array_equal(on_cross.values, trace.attention["cross"][0][1][1])
    assert on_cross.labels == SRC and on_cross.highlight == int(np.argmax(trace.attention["cross"][0][1][1]))
    assert on_cross.title == "cross-attention of this step (layer 0, head 1)"
    elsewhere = viewmodel.source_bars(trace, Selection(kind="enc_self", layer=0, head=1, step=2))
    np.testing.assert_allclose(elsewhere.values, trace.attention["cross"][1][:, 2].mean(axis=0))
    assert elsewhere.title == "cross-attention of this step (layer 1, mean of heads)"
    assert (viewmodel.source_bars(AttentionTrace(SRC, TGT, {}, {}), Selection()).title
            == "this model has no cross-attention")


def test_the_decoding_panel_at_a_step(trace):
    steps = [step(0), step(1, token="▁gato"), step(2, token="</s>")]
    state = viewmodel.step_state(result(trace, steps), trace, Selection(kind="cross", step=1))
    assert (state.count, state.step, state.tokens, state.produced) == (3, 1, TGT, "▁gato")
    assert state.probability == pytest.approx(0.7)
    assert state.top_k.labels == ["▁gato", "▁la", "▁un"] and state.top_k.highlight == 0
    assert state.top_k.title == "next token ‘▁gato’: p = 0.700, rank 1"


def test_the_beam_tree_carries_a_finished_hypothesis_forward(trace):
    steps = [step(0, rows=2, parents=(0, 0), finished=(False, False)),
             step(1, rows=2, parents=(0, 1), finished=(True, False)),
             step(2, rows=2, parents=(0, 1), finished=(True, True))]  # row 0 finished at step 1: no new node
    first, second = result(trace, steps[:2], "a"), result(trace, steps, "b")
    first.rows, second.rows = [0, 0], [1, 1, 1]
    state = viewmodel.beam_state([first, second], steps)
    assert [line for line, _ in state.hypotheses] == ["1. a    score -0.900  (log p -1.250)",
                                                       "2. b    score -0.900  (log p -1.250)"]
    assert [(node.depth, node.parent, node.finished) for node in state.nodes] == [
        (0, -1, False), (0, -1, False), (1, 0, True), (1, 1, False), (2, 3, True)]
    assert len(state.roots) == 2 and state.nodes[2].children == []
    assert state.paths == [[0, 2], [1, 3, 4]]
    assert [node.slot for node in state.nodes] == [0.0, 1.0, 0.0, 1.0, 1.0]  # leaves one apart, parents centred


def test_a_wide_deep_beam_lays_out_without_overlap():
    rows, depth = 8, 60
    steps = [step(index, rows=rows, parents=tuple(range(rows)), finished=(False,) * rows) for index in range(depth)]
    steps[0] = step(0, rows=rows, parents=(0,) * rows, finished=(False,) * rows)
    state = viewmodel.beam_state([], steps)
    assert len(state.nodes) == rows * depth
    leaves = sorted(node.slot for node in state.nodes if not node.children)
    assert leaves == [float(index) for index in range(rows)]  # eight lines, one slot apart


def test_result_line_and_head_names():
    line = viewmodel.result_line(result(None, [], "el gato"), ["a notice"])
    assert (line.text, line.details, line.notices) == ("el gato", "score -0.900 · log p -1.250 · 3 tokens",
                                                       ["a notice"])
    assert [label for label, _ in viewmodel.head_choices(2)] == ["head 0", "head 1", "mean of heads", "max of heads",
                                                                 "attention rollout"]


def model_info(name: str) -> ModelInfo:
    return ModelInfo(path=__import__("pathlib").Path(name), arch="gru-additive", parameters=1, kinds=("cross",),
                     config={}, provenance={}, source_tokenizer="", target_tokenizer="", device="cpu", max_len=64)


def test_the_session_keeps_only_the_newest_run(trace):
    session = Session()
    first = session.new_request(RunSettings(text="the cat"))
    second = session.new_request(RunSettings(text="the dog"))
    assert not session.accept_steps(first.id, [step(0)]) and not session.accept_results(first.id, [result(trace, [])])
    assert not session.accept_notice(first.id, "from the older run")
    assert session.results == [] and session.notices == []
    assert session.accept_notice(NO_REQUEST, "saved a file") and session.accept_notice(second.id, "truncated")
    assert session.accept_results(second.id, [result(trace, [])]) and session.trace is trace
    assert session.selection.step == 2  # the last step is shown once a run is done


def test_the_newest_model_job_wins():
    session = Session()
    older, newer = session.new_model_job(), session.new_model_job()
    assert not session.accept_model(older, model_info("old.safetensors")) and session.model is None
    assert session.accept_model(newer, model_info("new.safetensors")) and session.model.path.name == "new.safetensors"
    assert not session.accept_device(older, model_info("old.safetensors"))
    assert session.accept_device(NO_REQUEST, model_info("moved.safetensors"))  # an out-of-memory move is no job
    request = session.new_request(RunSettings(text="x"))
    session.accept_model(session.new_model_job(), model_info("third.safetensors"))
    assert session.request is None and not session.is_current(request.id)  # a new model drops the old run


def test_stepping_the_selection_wraps_heads(trace):
    session = Session()
    request = session.new_request(RunSettings(text="x"))
    session.accept_results(request.id, [result(trace, [])])
    session.replace_selection(kind="cross", layer=0, head=1)
    assert session.stepped_selection("head", 1) == {"head": 0}
    session.replace_selection(head="mean")
    assert session.stepped_selection("head", -1) == {"head": 1} and session.stepped_selection("head", 1) == {"head": 0}
    assert session.stepped_selection("layer", 1) == {"layer": 1}


def test_the_plain_data_side_loads_neither_qt_nor_torch():
    probe = ("import sys, attnviz.state.viewmodel, attnviz.state.session, attnviz.state.imports, attnviz.state.demos; "
             "print(sorted({m.split('.')[0] for m in sys.modules} & {'torch', 'PySide6', 'pyqtgraph', 'shiboken6'}))")
    output = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True)
    assert output.stdout.strip() == "[]"


def test_the_colour_range_and_rows_named_by_their_prediction(trace):
    from attnviz.state.session import ViewOptions

    selection = Selection(kind="dec_self", layer=0, head="mean")
    assert viewmodel.heatmap(trace, selection).levels == (0.0, 1.0)
    own = viewmodel.heatmap(trace, selection, ViewOptions(colour_range="own"))
    allowed = own.matrix[trace.masks["dec_self"]]
    assert own.levels == (float(allowed.min()), float(allowed.max()))  # masked zeros do not stretch the range
    named = viewmodel.heatmap(trace, selection, ViewOptions(predicted_labels=True), outputs=["▁el", "▁gato", "</s>"])
    assert named.query_labels == ["<s> → ▁el", "▁el → ▁gato", "▁gato → </s>"] and named.key_labels == TGT
    encoder = viewmodel.heatmap(trace, Selection(kind="enc_self"), ViewOptions(predicted_labels=True), outputs=["x"])
    assert encoder.query_labels == SRC  # encoder rows predict nothing


def test_revealing_rows_step_by_step_grows_the_decoder_maps(trace):
    from attnviz.state.session import ViewOptions

    reveal = ViewOptions(reveal_rows=True)
    cross = viewmodel.heatmap(trace, Selection(kind="cross", layer=1, head=0, step=1), reveal)
    assert cross.revealed == (2, 3)  # rows 0–1 generated; every source key exists from the start
    full = trace.attention["cross"][1][0]
    assert np.array_equal(cross.matrix[:2], full[:2]) and not cross.matrix[2:].any()  # nothing of the future
    assert cross.query_labels == ["<s>", "▁el", ""] and cross.key_labels == SRC
    assert cross.step_row == 1 and "generated to step 2 of 3" in cross.title
    # decoder self-attention: the later inputs are not keys yet either, and their labels would give them away
    self_attention = viewmodel.heatmap(trace, Selection(kind="dec_self", step=0), reveal)
    assert self_attention.revealed == (1, 1)
    assert self_attention.query_labels == ["<s>", "", ""] and self_attention.key_labels == ["<s>", "", ""]
    assert viewmodel.unrevealed((3, 3), self_attention.revealed).sum() == 8
    # stepping on grows the map until it is whole; the encoder and the option off are never cut
    last = viewmodel.heatmap(trace, Selection(kind="dec_self", step=2), reveal)
    assert last.revealed == (3, 3) and np.array_equal(last.matrix, trace.attention["dec_self"][0][0])
    assert viewmodel.heatmap(trace, Selection(kind="enc_self", step=0), reveal).revealed is None
    assert viewmodel.heatmap(trace, Selection(kind="cross", step=0)).revealed is None
    # an own colour range is taken over the generated cells only
    own = viewmodel.heatmap(trace, Selection(kind="cross", step=0), ViewOptions(colour_range="own", reveal_rows=True))
    first_row = trace.attention["cross"][0][0][0]
    assert own.levels == (float(first_row.min()), float(first_row.max()))
    # comparing: A, B and B − A are revealed alike
    compared = compare_view.compare_state(trace, trace, Selection(kind="cross", step=1), options=reveal)
    assert {pane.state.revealed for pane in (compared.a, compared.b, compared.diff)} == {(2, 3)}


def test_predicted_labels_of_future_rows_stay_hidden(trace):
    from attnviz.state.session import ViewOptions

    options = ViewOptions(predicted_labels=True, reveal_rows=True)
    state = viewmodel.heatmap(trace, Selection(kind="cross", step=1), options, outputs=["▁el", "▁gato", "</s>"])
    assert state.query_labels == ["<s> → ▁el", "▁el → ▁gato", ""]


def test_thumbnails_revealed_step_by_step_show_only_what_the_step_generated(trace):
    """The grids must not give away what the focus view keeps hidden: later cells draw as no colour (NaN)."""
    cross = viewmodel.head_grid(trace, Selection(kind="cross", layer=1, head=0, step=1), reveal_step=1)
    for thumb, weights in zip(cross.matrices, trace.attention["cross"][1]):
        assert np.array_equal(thumb[:2], weights[:2]) and np.isnan(thumb[2:]).all()
    everything = viewmodel.model_grid(trace, Selection(kind="dec_self", step=0), reveal_step=0)
    assert all(np.isnan(thumb).sum() == thumb.size - 1 for thumb in everything.matrices)  # one cell at step 0
    encoder = viewmodel.model_grid(trace, Selection(kind="enc_self", step=0), reveal_step=0)
    assert not any(np.isnan(thumb).any() for thumb in encoder.matrices)
    whole = viewmodel.head_grid(trace, Selection(kind="cross", layer=1, head=0, step=1))
    assert all(np.array_equal(a, b) for a, b in zip(whole.matrices, trace.attention["cross"][1]))
