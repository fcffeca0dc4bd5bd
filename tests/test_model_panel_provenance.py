"""The Model panel shows where a checkpoint came from as rows, nested maps indented under their name (as
``attnviz info`` prints them), never as a JSON dump cut at 160 characters."""

from __future__ import annotations

from pathlib import Path

import pytest

from attnviz.cli.info import field_lines
from attnviz.cli import main
from attnviz.gui.views.model_panel import ModelPanel
from attnviz.gui.work import describe
from attnviz.state.demos import demo_path
from attnviz.state.fields import FieldRow, field_rows
from models.importers import convert
from models.inference.translator import Translator
from models.storage.checkpoint import load_checkpoint

FAIRSEQ = Path(__file__).parent / "data" / "fairseq" / "transformer-postln"


def test_an_imported_checkpoint_s_provenance_is_rows_in_the_panel_and_in_info(qtbot):
    info = describe(Translator(convert(FAIRSEQ), "cpu"), FAIRSEQ)
    rows = field_rows(info.provenance)
    assert rows[:2] == [FieldRow(0, "imported_from", None), FieldRow(1, "format", "fairseq")]
    assert FieldRow(2, "share_all_embeddings", "True") in rows
    assert not any(row.key in ("details", "supplied", "assumed") for row in rows)  # empty maps say nothing
    panel = ModelPanel(["cpu"], [])
    qtbot.addWidget(panel)
    panel.show_model(info)
    text = panel.info.text()
    assert "{" not in text and "<td style='padding-left:12px'>format: fairseq</td>" in text
    assert "<td style='padding-left:24px'>encoder_attention_heads: 2</td>" in text
    lines = field_lines(info.provenance)
    assert lines[:2] == ["  imported_from:", "    format:         fairseq"]  # aligned within its own map


def test_a_metric_says_six_digits_and_a_list_is_json():
    rows = field_rows({"metrics": {"chrf": 47.829312345678, "bleu": 28.0}, "languages": ["en", "es"]})
    assert rows == [FieldRow(0, "metrics", None), FieldRow(1, "chrf", "47.8293"), FieldRow(1, "bleu", "28.0"),
                    FieldRow(0, "languages", '["en", "es"]')]


@pytest.mark.parametrize(("demo", "reads"), [("piglatin-decoder-only", "prompt and continuation"),
                                             ("english-encoder-only", "the sentence and its filled masks"),
                                             ("piglatin-gru-additive", None)])
def test_a_model_with_one_tokenizer_is_described_with_one_in_the_panel_and_in_info(qtbot, capsys, demo, reads):
    """A decoder-only (or encoder-only) model reads one sequence through one tokenizer: "tokenizer: …" once, not
    a source and a target; an encoder-decoder model keeps both."""
    path = demo_path(demo)
    panel = ModelPanel(["cpu"], [])
    qtbot.addWidget(panel)
    panel.show_model(describe(Translator(load_checkpoint(path), "cpu"), path))
    text = panel.info.text()
    assert main(["info", demo]) == 0
    lines = capsys.readouterr().out.splitlines()
    if reads is None:
        assert "source: char, 32 tokens: " in text and "target: char, 32 tokens: " in text and "tokenizer:" not in text
        assert [line.split()[0] for line in lines if line.startswith(("source ", "target "))] == ["source", "target"]
        return
    assert text.count("tokenizer: char, ") == 1 and f"({reads})<br>" in text
    assert "source:" not in text and "target:" not in text
    (line,) = [line for line in lines if line.startswith("tokenizer ")]
    assert "char tokenizer, " in line and line.endswith(f"({reads})")
    assert not any(line.startswith(("source ", "target ")) for line in lines)
    assert "layers 4, heads 4" in text  # its own sizes: a one-stack model's layers, not an encoder's and decoder's
    assert "kv_heads" not in text  # every head its own keys and values (kv_heads 0 in its config: as many as heads)
