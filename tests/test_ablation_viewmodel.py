"""What the window shows about switched-off heads, computed in the view-model (plain numpy, no Qt)."""

from __future__ import annotations

import numpy as np

from attnviz.state import viewmodel
from attnviz.state.session import RunSettings, Selection, Session
from models.nn.ablation import Ablation
from models.trace.records import AttentionTrace, DecodeResult


def trace(ablated=()) -> AttentionTrace:
    weights = [np.full((3, 2, 4), 0.25, dtype=np.float32) for _ in range(2)]
    return AttentionTrace(src_tokens=list("abc") + ["</s>"], tgt_tokens=["<s>", "x"], attention={"cross": weights},
                          masks={"cross": np.ones((2, 4), dtype=bool)}, ablated=tuple(ablated))


def result(tokens: list[str]) -> DecodeResult:
    return DecodeResult(token_ids=list(range(len(tokens))), tokens=tokens, text="".join(tokens), log_prob=-1.0,
                        score=-1.0, trace=None, steps=[])


def test_token_diff_marks_inserted_and_deleted_tokens():
    assert viewmodel.token_diff(list("abcd"), list("abxd")) == [
        ("a", "same"), ("b", "same"), ("c", "deleted"), ("x", "inserted"), ("d", "same")]
    assert viewmodel.token_diff(["el", "gato"], ["el", "gato"]) == [("el", "same"), ("gato", "same")]
    assert viewmodel.token_diff([], ["a"]) == [("a", "inserted")]


def test_the_result_line_holds_the_original_and_the_diff_only_when_heads_were_off():
    plain = viewmodel.result_line(result(["el", "perro", "</s>"]), [])
    assert plain.original is None and plain.diff == []
    line = viewmodel.result_line(result(["el", "perro", "</s>"]), [], original=result(["el", "gato", "</s>"]))
    assert line.original == "elgato</s>"
    assert line.diff == [("el", "same"), ("gato", "deleted"), ("perro", "inserted"), ("</s>", "same")]


def test_the_source_contribution_on_the_result_line_is_the_shown_runs():
    run, original = result(["el", "perro", "</s>"]), result(["el", "gato", "</s>"])
    ablated, every_head = "ALTI+ source contribution 0.41", "ALTI+ source contribution 0.63"
    line = viewmodel.result_line(run, [], original=original, coverage=ablated, original_coverage=every_head)
    assert line.coverage == ablated and line.original_coverage == ""
    shown = viewmodel.result_line(run, [], original=original, coverage=ablated, original_coverage=every_head,
                                  showing_original=True)
    assert shown.original_coverage == every_head and shown.coverage == "" and shown.text == run.text
    waiting = viewmodel.result_line(run, [], original=original, coverage=ablated, showing_original=True)
    assert waiting.coverage == waiting.original_coverage == ""  # never the ablated run's meanwhile


def test_switched_off_heads_are_marked_in_grids_and_titles():
    shown = trace(ablated=[("cross", 1, 0), ("cross", 1, 2)])
    assert viewmodel.head_grid(shown, Selection(kind="cross", layer=1)).off == [True, False, True]
    assert viewmodel.head_grid(shown, Selection(kind="cross", layer=0)).off == [False] * 3
    assert viewmodel.model_grid(shown, Selection(kind="cross")).off == [False] * 3 + [True, False, True]
    assert "switched off" in viewmodel.heatmap(shown, Selection(kind="cross", layer=1, head=2)).title
    assert "switched off" not in viewmodel.heatmap(shown, Selection(kind="cross", layer=1, head=1)).title
    assert "2 of 3 heads off" in viewmodel.heatmap(shown, Selection(kind="cross", layer=1, head="mean")).title
    assert "off" not in viewmodel.heatmap(trace(), Selection(kind="cross", layer=1, head="mean")).title


def test_the_thumbnail_menu_offers_the_other_state():
    off = [False, True, False, True, True, True]  # 2 layers × 3 heads: layer 1 all off
    assert viewmodel.thumbnail_menu(off, 3, 0, 0) == [("Switch head off", "head"), ("Switch layer off", "layer")]
    assert viewmodel.thumbnail_menu(off, 3, 0, 1) == [("Switch head on", "head"), ("Switch layer off", "layer")]
    assert viewmodel.thumbnail_menu(off, 3, 1, 2) == [("Switch head on", "head"), ("Switch layer on", "layer")]
    assert viewmodel.thumbnail_menu([], 3, 0, 0)[0] == ("Switch head off", "head")


def test_the_restore_bar_counts_heads_and_names_them():
    assert not viewmodel.ablation_state(Ablation(), trace()).visible
    state = viewmodel.ablation_state(Ablation.parse(["cross:0:*", "cross:1:1"]), trace())
    assert (state.visible, state.text) == (True, "4 heads off")
    assert state.tooltip.endswith("cross-attention L0 H2, cross-attention L1 H1")


def test_the_session_toggles_heads_and_layers_against_the_shown_trace():
    session = Session()
    session.new_request(RunSettings(text="abc"))
    session.accept_results(session.request.id, [DecodeResult([1], ["x"], "x", -1.0, -1.0, trace(), [])])
    assert session.toggle_head("cross", 1, 2).specs() == ["cross:1:2"]
    assert session.toggle_layer("cross", 1).heads({"cross": (2, 3)}) == (("cross", 1, 0), ("cross", 1, 1),
                                                                         ("cross", 1, 2))
    assert not session.toggle_layer("cross", 1)  # every head of it was off: all on again
    session.toggle_head("cross", 0, 0)
    assert session.new_request(RunSettings(text="abc")).ablation.specs() == ["cross:0:0"] and session.original is None
    session.restore_heads()
    assert not session.new_request(RunSettings(text="abc")).ablation


def test_the_session_can_show_the_run_with_every_head_on():
    session = Session()
    session.ablation = Ablation.parse(["cross:1:0"])
    request = session.new_request(RunSettings(text="abc"))
    off = DecodeResult([1], ["x"], "x", -1.0, -1.0, trace(ablated=[("cross", 1, 0)]), [])
    on = DecodeResult([2], ["y"], "y", -0.5, -0.5, trace(), [])
    session.accept_original(request.id, on)
    session.accept_results(request.id, [off])
    assert session.result is off and session.run_result is off
    session.show_original = True
    assert session.result is on and session.trace.ablated == () and session.run_result is off
    session.restore_heads()
    assert not session.show_original and session.result is off
