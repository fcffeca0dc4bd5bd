"""The Patching pane's and ``attnviz patch``'s plain data (attnviz/state/patch_view.py), without Qt or torch: the
normalisation (m − m_corrupt) / (m_clean − m_corrupt) written out, the panels' layout and labels, the selection
rule, and the raw metric where the two runs' metrics are equal."""

from __future__ import annotations

import numpy as np
import pytest

from attnviz.state.patch_view import PatchReport, patch_document, patch_panels, selected_cell, text_tables

CLEAN, CORRUPT = 4.0, -2.0


def report(*, clean: float = CLEAN, corrupt: float = CORRUPT, prompt_len=None) -> PatchReport:
    rng = np.random.default_rng(0)
    exact = {"encoder": rng.normal(size=(3, 4)), "decoder": rng.normal(size=(3, 5)), "encoder_all": rng.normal(size=3),
             "heads_enc_self": rng.normal(size=(2, 2)), "heads_cross": rng.normal(size=(2, 2))}
    atp = {name: table * 0.5 for name, table in exact.items()}
    return PatchReport("logit_difference", 2, "▁pastor", corrupt_token="▁padre", clean=clean, corrupt=corrupt,
                       tables={"exact": exact, "atp": atp}, source_labels=list("abcd"), corrupt_labels=list("abxd"),
                       decoder_labels=["<s>", "p", "q", "r", "s"], spearman={"all": 0.9}, prompt_len=prompt_len)


def test_panels_are_the_normalised_tables_with_their_labels():
    shown = report()
    state = patch_panels(shown)
    assert [panel.name for panel in state.panels] == ["encoder", "decoder", "heads_enc_self", "heads_cross"]
    encoder, decoder, enc_self, _ = state.panels
    exact = shown.tables["exact"]
    np.testing.assert_allclose(encoder.values[:, :4], (exact["encoder"] - CORRUPT) / (CLEAN - CORRUPT))
    np.testing.assert_allclose(encoder.values[:, 4], (exact["encoder_all"] - CORRUPT) / (CLEAN - CORRUPT))
    assert encoder.column_labels == ["a", "b", "c", "d", "(all)"] and encoder.row_labels == ["emb", "L0", "L1"]
    assert decoder.column_labels == ["<s>", "p", "q", "r", "s"] and decoder.kind is None
    assert (enc_self.kind, enc_self.row_labels, enc_self.column_labels) == ("enc_self", ["L0", "L1"], ["H0", "H1"])
    assert state.low == -state.high and state.high >= 1.0
    assert state.lines[0] == "logit(▁pastor) − logit(▁padre) at step 2: clean 4.000, corrupted -2.000"
    atp = patch_panels(shown, estimate="atp")
    np.testing.assert_allclose(atp.panels[3].values, (exact["heads_cross"] * 0.5 - CORRUPT) / (CLEAN - CORRUPT))
    assert "attribution patching's estimate" in atp.lines[2]


def test_equal_metrics_show_the_raw_tables_and_say_so():
    shown = report(clean=1.0, corrupt=1.0)
    state = patch_panels(shown)
    np.testing.assert_allclose(state.panels[1].values, shown.tables["exact"]["decoder"])
    assert "raw" in state.lines[1]
    assert patch_document(shown, clean_text="x", corrupt_text="y")["metric"]["normalised"] is False


def test_the_main_views_head_is_outlined_on_its_kind_else_the_chosen_cell():
    state = patch_panels(report(), selected=("encoder", 1, 2))
    assert selected_cell(state, kind="cross", layer=1, head=0) == ("heads_cross", 1, 0)
    assert selected_cell(state, kind="dec_self", layer=1, head=0) == ("encoder", 1, 2)  # no dec_self table here
    assert selected_cell(state, kind="cross", layer=1, head="mean") == ("encoder", 1, 2)


def test_a_prompts_panel_and_the_document_and_text():
    shown = report(prompt_len=3)
    assert patch_panels(shown).panels[1].title == "residual stream"
    document = patch_document(shown, clean_text="x", corrupt_text="y")
    assert document["prompt_len"] == 3 and document["clean"]["tokens"] == list("abcd")
    assert document["raw"]["encoder_all"] == pytest.approx(shown.tables["exact"]["encoder_all"].tolist())
    lines = text_tables(report())
    heads = lines.index("cross-attention heads:")
    assert lines[heads + 1].split() == ["H0", "H1"] and lines[heads + 2].split()[0] == "L0"
