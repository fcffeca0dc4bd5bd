"""What the window shows of contributions (attnviz/state/contributions.py), without Qt: the core's maps of a real
run of the en-es demo, put in the place of the trace's attention."""

import dataclasses

import numpy as np
import pytest

from attnviz.state import contributions as shown
from attnviz.state import viewmodel
from attnviz.state.demos import demo_path
from attnviz.state.session import Selection, ViewOptions
from models.analysis.contributions import CONTRIBUTION_METHODS, capture_forward, source_coverage
from models.analysis.gradients import integrated_gradients
from models.analysis.methods import contributions
from models.nn.precisions import rounded_weights_notice
from models.inference.translator import Translator
from models.storage.checkpoint import load_checkpoint

SENTENCE = "The old man gave his grandson a red bicycle."


def choice(name: str) -> shown.ShowChoice:
    return shown.show_choice(CONTRIBUTION_METHODS[name])


@pytest.fixture(scope="module")
def run():
    translator = Translator(load_checkpoint(demo_path("en-es-transformer")), "cpu")
    source = translator.source(SENTENCE)
    result = translator.translate(SENTENCE, need_weights=True)
    captured = capture_forward(translator.model, source.ids, result.token_ids)
    maps = {name: contributions(name, translator.model, source.ids, output_ids=result.token_ids,
                                captured=captured if CONTRIBUTION_METHODS[name].from_forward else None)
            for name in ("value_norms", "alti", "input_x_gradient")}
    return result, maps


def test_value_norms_show_each_head_with_the_unit_and_their_own_colour_range(run):
    result, maps = run
    selection = Selection(kind="cross", layer=1, head=2, step=3)
    state = shown.contribution_heatmap(result.trace, maps["value_norms"], selection, choice=choice("value_norms"))
    expected = maps["value_norms"].layers["cross"][1][2]
    np.testing.assert_array_equal(state.matrix, expected)
    assert "value-weighted norms" in state.title and "head 2" in state.title
    assert state.scale_title == CONTRIBUTION_METHODS["value_norms"].unit
    assert state.levels == pytest.approx((expected.min(), expected.max()))  # not 0–1: the model's units
    assert state.file_stem == "cross-L1-H2-value_norms"
    assert state.key_labels == result.trace.src_tokens and state.step_row == 3


def test_alti_shows_the_block_map_whatever_head_is_chosen_on_a_fixed_range(run):
    result, maps = run
    for head in (0, 3, "mean"):
        state = shown.contribution_heatmap(result.trace, maps["alti"], Selection(kind="dec_self", layer=2, head=head),
                                           choice=choice("alti"))
        np.testing.assert_array_equal(state.matrix, maps["alti"].layers["dec_self"][2])
        assert state.levels == viewmodel.LEVELS and "the block" in state.title and "ALTI+" in state.title
    own = shown.contribution_heatmap(result.trace, maps["alti"], Selection(kind="enc_self"), choice=choice("alti"),
                                     options=ViewOptions(colour_range="own"))
    assert own.levels != viewmodel.LEVELS


def test_a_kind_the_method_lacks_is_one_line_and_gradients_are_the_whole_model(run):
    result, maps = run
    gradients = choice("input_x_gradient")
    line = shown.contribution_heatmap(result.trace, maps["input_x_gradient"], Selection(kind="enc_self"),
                                      choice=gradients)
    assert line == ("input × gradient gives no encoder self-attention map; it shows decoder self-attention, "
                    "cross-attention.")
    state = shown.contribution_heatmap(result.trace, maps["input_x_gradient"], Selection(kind="cross", layer=2),
                                       choice=gradients)
    np.testing.assert_array_equal(state.matrix, maps["input_x_gradient"].source)
    assert "whole model" in state.title


def test_revealing_rows_hides_the_contributions_of_steps_not_generated_yet(run):
    result, maps = run
    state = shown.contribution_heatmap(result.trace, maps["alti"], Selection(kind="cross", layer=0, step=2),
                                       choice=choice("alti"), options=ViewOptions(reveal_rows=True))
    assert state.revealed == (3, len(result.trace.src_tokens))
    assert not state.matrix[3:].any() and state.matrix[:3].any()


def test_grids_show_every_head_or_the_one_block(run):
    result, maps = run
    heads = shown.contribution_grid(result.trace, maps["value_norms"], Selection(kind="cross", layer=1),
                                    choice=choice("value_norms"), whole_kind=False)
    assert heads.cols == 4 and max(float(matrix.max()) for matrix in heads.matrices) == pytest.approx(1.0)
    blocks = shown.contribution_grid(result.trace, maps["alti"], Selection(kind="cross"), choice=choice("alti"),
                                     whole_kind=True)
    assert (blocks.rows, blocks.cols, blocks.col_names) == (3, 4, ["block", "", "", ""])  # the attention's shape
    np.testing.assert_array_equal(blocks.matrices[2 * 4], maps["alti"].layers["cross"][2])
    assert np.isnan(blocks.matrices[2 * 4 + 1]).all()
    whole = shown.contribution_grid(result.trace, maps["input_x_gradient"], Selection(kind="cross"),
                                    choice=choice("input_x_gradient"), whole_kind=True)
    assert (whole.rows, whole.row_names[0]) == (3, "all") and np.isnan(whole.matrices[4]).all()
    assert shown.contribution_grid(result.trace, maps["input_x_gradient"], Selection(kind="enc_self"),
                                   choice=choice("input_x_gradient"), whole_kind=True) is None


def test_the_decoding_panel_bars_are_the_steps_source_contributions(run):
    result, maps = run
    bars = shown.contribution_bars(result.trace, maps["alti"], Selection(kind="enc_self", step=4),
                                   choice=choice("alti"))
    np.testing.assert_array_equal(bars.values, maps["alti"].source[4])
    assert bars.top == 1.0 and "whole model" in bars.title and bars.labels == result.trace.src_tokens
    norms = shown.contribution_bars(result.trace, maps["value_norms"], Selection(kind="cross", layer=1, head=0, step=4),
                                    choice=choice("value_norms"))
    np.testing.assert_array_equal(norms.values, maps["value_norms"].layers["cross"][1][0, 4])
    assert norms.top == pytest.approx(norms.values.max()) and norms.top > 1


def test_the_difference_of_a_models_maps_with_itself_is_zero_and_titled_with_the_method(run):
    result, maps = run
    pair = (result.trace, maps["alti"])
    pane = shown.contribution_difference(pair, pair, Selection(kind="cross", layer=1), choice=choice("alti"))
    assert not pane.state.matrix.any() and "ALTI+" in pane.state.title
    missing = shown.contribution_difference((result.trace, maps["input_x_gradient"]), pair, Selection(kind="enc_self"),
                                            choice=choice("input_x_gradient"))
    assert missing.state is None and missing.message.startswith("B − A not shown: model A: input × gradient gives no")


def test_the_hallucination_signal_in_words_in_the_output_line_and_the_beam_list(run):
    result, maps = run
    coverage = source_coverage(maps["alti"])
    text = shown.coverage_text(coverage, result.trace.src_tokens)
    assert text.startswith(f"ALTI+ source contribution {coverage.avg_source:.2f}")
    assert f"‘{result.trace.src_tokens[coverage.least_covered]}’ {coverage.min_source_token:.2f}" in text
    assert viewmodel.result_line(result, [], coverage=text).coverage == text
    beam = viewmodel.beam_state([result, dataclasses.replace(result)], result.steps, coverage={1: text})
    assert text not in beam.hypotheses[0][0] and beam.hypotheses[1][0].endswith(text)


def test_alti_rollout_is_its_own_rollout_through_the_model_and_says_so(run):
    result, maps = run
    alti = maps["alti"]
    cross = shown.contribution_heatmap(result.trace, alti, Selection(kind="cross", layer=1, head="rollout", step=2),
                                       choice=choice("alti"))
    np.testing.assert_array_equal(cross.matrix, alti.source)
    assert "whole model" in cross.title and "<b>ALTI+</b> rollout" in cross.title and "source token" in cross.title
    assert cross.levels == viewmodel.LEVELS and cross.file_stem == "cross-rollout-alti" and cross.step_row == 2
    target = shown.contribution_heatmap(result.trace, alti, Selection(kind="dec_self", layer=0, head="rollout"),
                                        choice=choice("alti"))
    np.testing.assert_array_equal(target.matrix, alti.target)
    np.testing.assert_allclose(cross.matrix.sum(1) + target.matrix.sum(1), 1.0, atol=1e-5)
    encoder = shown.contribution_heatmap(result.trace, alti, Selection(kind="enc_self", layer=1, head="rollout"),
                                         choice=choice("alti"))
    np.testing.assert_allclose(encoder.matrix, alti.layers["enc_self"][1] @ alti.layers["enc_self"][0], atol=1e-6)
    assert "layers 0–1" in encoder.title
    pair = (result.trace, alti)
    pane = shown.contribution_difference(pair, pair, Selection(kind="cross", head="rollout"), choice=choice("alti"))
    assert not pane.state.matrix.any() and pane.state.matrix.shape == alti.source.shape
    assert "whole model" in pane.state.title and "rollout" in pane.state.title
    gradients = shown.contribution_heatmap(result.trace, maps["input_x_gradient"], Selection(head="rollout"),
                                           choice=choice("input_x_gradient"))  # a whole-model map already
    np.testing.assert_array_equal(gradients.matrix, maps["input_x_gradient"].source)


def test_a_saved_show_choice_the_model_cannot_give_or_this_attnviz_does_not_know_is_the_weights_and_a_line():
    choices = (choice("value_norms"), dataclasses.replace(choice("alti"), reason="ALTI+ needs Transformer blocks"))
    assert shown.restored_choice(choices, "value_norms") == ("value_norms", "")
    assert shown.restored_choice(choices, "weights") == ("weights", "")
    name, line = shown.restored_choice(choices, "alti")
    assert name == "weights" and "ALTI+, which this model cannot give (ALTI+ needs Transformer blocks)" in line
    name, line = shown.restored_choice(choices, "sparkles")
    assert name == "weights" and "‘sparkles’, a method this attnviz does not know" in line


def test_the_head_box_names_what_each_entry_shows_of_the_method(run):
    result, maps = run
    trace = result.trace
    weights = shown.selector_state(trace, Selection(kind="cross", head="rollout"), None)
    labels = [label for label, _ in weights.head_choices]
    assert labels == ["head 0", "head 1", "head 2", "head 3", "mean of heads", "max of heads", "attention rollout"]
    alti = shown.selector_state(trace, Selection(kind="cross", layer=1, head="rollout"), choice("alti"))
    assert alti.head_choices == (("ALTI+ per layer", 0), ("ALTI+ rollout", "rollout")) and alti.head == "rollout"
    rollout = shown.contribution_heatmap(trace, maps["alti"], Selection(kind="cross", head="rollout"),
                                         choice=choice("alti"))
    assert "<b>ALTI+</b> rollout" in rollout.title  # the title and the box name the same map
    block = shown.selector_state(trace, Selection(kind="cross", layer=1, head="mean"), choice("alti"))
    assert block.head == 0  # every head and aggregate shows the block's one map: the box says so
    norms = shown.selector_state(trace, Selection(kind="cross", head="rollout"), choice("value_norms"))
    assert [label for label, _ in norms.head_choices][-1] == "value-weighted norms rollout" and norms.head == "rollout"
    title = shown.contribution_heatmap(trace, maps["value_norms"], Selection(kind="cross", head="rollout"),
                                       choice=choice("value_norms")).title
    assert "<b>value-weighted norms</b> rollout" in title and "attention rollout" not in title
    gradients = shown.selector_state(trace, Selection(kind="cross", head=2), choice("input_x_gradient"))
    assert gradients.head_choices == (("input × gradient, whole model", 0),) and gradients.head == 0


def test_the_heatmap_says_how_complete_integrated_gradients_are_and_names_the_steps_that_missed():
    translator = Translator(load_checkpoint(demo_path("en-es-transformer-postln")), "cpu")
    text = "The cat sits on the mat."
    source, result = translator.source(text), translator.translate(text, need_weights=True)
    fixed = integrated_gradients(translator.model, source.ids, result.token_ids, steps=16)
    assert fixed.incomplete  # 16 steps miss at least one output step on this sentence
    state = shown.contribution_heatmap(result.trace, fixed, Selection(kind="cross"),
                                       choice=choice("integrated_gradients"), outputs=result.tokens)
    missed = fixed.incomplete[0]
    assert state.note.startswith(f"completeness missed at step {missed} ‘{result.tokens[missed]}’")
    adapted = integrated_gradients(translator.model, source.ids, result.token_ids)
    state = shown.contribution_heatmap(result.trace, adapted, Selection(kind="cross"),
                                       choice=choice("integrated_gradients"), outputs=result.tokens)
    assert state.note.startswith("completeness: within 5% at every step")


def test_maps_of_rounded_weights_say_so_in_one_line(run):
    result, maps = run
    for name in ("alti", "input_x_gradient"):
        exact = shown.contribution_heatmap(result.trace, maps[name], Selection(kind="cross"), choice=choice(name))
        assert exact.note == ""
        rounded = shown.contribution_heatmap(result.trace, maps[name], Selection(kind="cross"), choice=choice(name),
                                             weights="bfloat16")
        assert rounded.note == rounded_weights_notice("bfloat16") and "rounded to bfloat16" in rounded.note


def test_alti_logit_maps_and_bars_are_signed_on_a_diverging_scale_centred_on_0(run):
    """ALTI-Logit's terms (Δ logit) may be below 0: its maps are drawn on the diverging colormap, ± the largest
    magnitude shown, the colour bar in Δ logit; the decoding panel's bars reach below 0 in the same unit and are the
    values of the rollout map's row at that step. The bounded shares (ALTI+) keep the window's colormap and 0–1."""
    result, maps = run
    translator = Translator(load_checkpoint(demo_path("en-es-transformer")), "cpu")
    logit = contributions("alti_logit", translator.model, translator.source(SENTENCE).ids,
                          output_ids=result.token_ids)
    assert CONTRIBUTION_METHODS["alti_logit"].signed and not CONTRIBUTION_METHODS["alti"].signed
    for selection in (Selection(kind="cross", layer=1, head=2, step=3), Selection(kind="cross", head="rollout")):
        state = shown.contribution_heatmap(result.trace, logit, selection, choice=choice("alti_logit"))
        bound = float(np.abs(state.matrix[np.isfinite(state.matrix)]).max())
        assert state.matrix.min() < 0 < state.matrix.max()
        assert state.levels == pytest.approx((-bound, bound))
        assert state.colormap == "CET-D1" and state.scale_title == "Δ logit"
    revealed = shown.contribution_heatmap(result.trace, logit, Selection(kind="cross", head="rollout", step=2),
                                          choice=choice("alti_logit"), options=ViewOptions(reveal_rows=True))
    rows = np.abs(logit.source[:3]).max()  # what is generated by step 3 sets the scale
    assert revealed.levels == pytest.approx((-rows, rows))
    for step in range(len(result.token_ids)):
        bars = shown.contribution_bars(result.trace, logit, Selection(kind="cross", step=step),
                                       choice=choice("alti_logit"))
        np.testing.assert_allclose(bars.values, logit.source[step])
        assert bars.bottom == pytest.approx(min(0.0, bars.values.min()))
        assert bars.top == pytest.approx(max(bars.values.max(), 1e-6)) and bars.unit == "Δ logit"
    assert min(shown.contribution_bars(result.trace, logit, Selection(kind="cross", step=step),
                                       choice=choice("alti_logit")).bottom for step in range(8)) < 0
    alti = shown.contribution_heatmap(result.trace, maps["alti"], Selection(kind="cross", head="rollout"),
                                      choice=choice("alti"))
    assert alti.colormap == "" and alti.levels == (0.0, 1.0)
    bars = shown.contribution_bars(result.trace, maps["alti"], Selection(kind="cross"), choice=choice("alti"))
    assert bars.bottom == 0 and bars.top == 1.0
    selector = shown.selector_state(result.trace, Selection(kind="cross"), choice("alti_logit")).own_scale
    assert all("signed" in why for why in selector)  # neither colour box applies, and each says why
    assert shown.selector_state(result.trace, Selection(kind="cross"), choice("value_norms")).own_scale[1] == ""
    assert shown.selector_state(result.trace, Selection(kind="cross"), choice("alti")).own_scale == ("", "")


def test_alti_logit_grids_are_signed_on_one_symmetric_range_and_the_hover_names_the_unit(run):
    """Both grids of ALTI-Logit (the layer's heads, every layer × head) keep the terms' signs, on the diverging
    colormap with one range for the grid, ± its largest magnitude, so a negative cell is drawn below the colormap's
    centre and heads compare; the bounded shares keep 0–1 and the window's colormap. The hover names the method and
    its unit."""
    from attnviz.state.readout import cell_readout, hover_hint

    result, maps = run
    translator = Translator(load_checkpoint(demo_path("en-es-transformer")), "cpu")
    logit = contributions("alti_logit", translator.model, translator.source(SENTENCE).ids,
                          output_ids=result.token_ids)
    selection = Selection(kind="cross", layer=1, head=0, step=6)
    for whole_kind, layers in ((False, [1]), (True, range(len(logit.layers["cross"])))):
        grid = shown.contribution_grid(result.trace, logit, selection, choice=choice("alti_logit"),
                                       whole_kind=whole_kind)
        bound = max(float(np.abs(logit.layers["cross"][layer]).max()) for layer in layers)
        assert grid.colormap == "CET-D1" and grid.levels == pytest.approx((-bound, bound))
        expected = [logit.layers["cross"][layer][head] for layer in layers for head in range(grid.cols)]
        for matrix, head in zip(grid.matrices, expected):
            np.testing.assert_allclose(matrix, head, rtol=1e-6)  # the terms themselves, not shares of the largest
        low, high = grid.levels
        negative = min(float(matrix.min()) for matrix in grid.matrices)
        assert negative < 0 and (negative - low) / (high - low) < 0.5  # below the diverging map's white centre
    alti = shown.contribution_grid(result.trace, maps["alti"], selection, choice=choice("alti"), whole_kind=True)
    assert alti.colormap == "" and alti.levels == (0.0, 1.0)

    state = shown.contribution_heatmap(result.trace, logit, selection, choice=choice("alti_logit"))
    row, col = np.unravel_index(np.argmin(state.matrix), state.matrix.shape)
    line = cell_readout(state.matrix, row, col, labels=(state.query_labels, state.key_labels),
                        quantity=state.quantity, unit=state.scale_title)
    assert f"ALTI-Logit −{abs(state.matrix[row, col]):.4f} Δ logit" in line and "weight" not in line
    assert "weight" not in hover_hint(state.quantity, state.scale_title)
    share = shown.contribution_heatmap(result.trace, maps["alti"], selection, choice=choice("alti"))
    assert cell_readout(share.matrix, 0, 0, labels=(share.query_labels, share.key_labels), quantity=share.quantity,
                        unit=share.scale_title).endswith(f"ALTI+ {share.matrix[0, 0]:.4f} share of output")
    weights = viewmodel.heatmap(result.trace, selection)
    assert cell_readout(weights.matrix, 0, 0, labels=(weights.query_labels, weights.key_labels),
                        quantity=weights.quantity, unit=weights.scale_title).endswith(f": {weights.matrix[0, 0]:.4f}")


def test_a_long_signed_maps_thumbnails_keep_each_blocks_term_of_the_larger_magnitude(tmp_path, char_tokenizer):
    """A thumbnail of more than 256 keys shrinks each block of ⌈K / 256⌉ keys to one cell: for ALTI-Logit that cell
    is the block's term of the larger magnitude, sign kept (the weights' rule, the block's largest, would lose a
    strong negative term beside a weak positive one)."""
    import torch

    from models import build_model
    from models.storage.checkpoint import save_checkpoint
    from tests.helpers import LETTERS, tiny_config

    torch.manual_seed(0)
    path = save_checkpoint(tmp_path / "long.safetensors", build_model(tiny_config("transformer-preln", max_len=400)),
                           char_tokenizer, char_tokenizer)
    translator = Translator(load_checkpoint(path), "cpu")
    text = (LETTERS * 40)[:300]
    result = translator.translate(text, need_weights=True, max_len=4)
    logit = contributions("alti_logit", translator.model, translator.source(text).ids, output_ids=result.token_ids)
    grid = shown.contribution_grid(result.trace, logit, Selection(kind="cross", layer=0, head=0),
                                   choice=choice("alti_logit"), whole_kind=False)
    full = logit.layers["cross"][0]  # [heads, T, 301 keys]: blocks of 2 keys
    assert full.shape[2] > viewmodel.THUMBNAIL_SIDE
    for head, matrix in enumerate(grid.matrices):
        for row in range(full.shape[1]):
            for block in range(matrix.shape[1]):
                terms = full[head, row, 2 * block: 2 * block + 2]
                assert matrix[row, block] == terms[np.argmax(np.abs(terms))]
        assert matrix.min() == full[head].min() < 0
