"""Comparing two checkpoints: ``attnviz render --compare`` and the window's comparison, with real demos."""

from __future__ import annotations

from PySide6.QtGui import QImage

from attnviz.cli import main


def test_render_compare_writes_a_figure_wider_than_one_heatmap(tmp_path, capsys):
    one, both = tmp_path / "one.png", tmp_path / "both.png"
    assert main(["render", "-c", "piglatin-gru-additive", "team", "--kind", "cross", "--size", "300x240",
                 "-o", str(one)]) == 0
    assert main(["render", "-c", "piglatin-gru-additive", "--compare", "piglatin-gru-scaled-dot", "--target", "eamtay",
                 "team", "--kind", "cross", "--size", "300x240", "-o", str(both)]) == 0
    single, compared = QImage(str(one)), QImage(str(both))
    assert compared.height() == single.height() and compared.width() > 2 * single.width()  # three panes


def test_render_compare_refuses_what_neither_model_has(tmp_path, capsys):
    assert main(["render", "-c", "piglatin-gru-additive", "--compare", "piglatin-gru-scaled-dot", "team",
                 "--kind", "enc_self", "-o", str(tmp_path / "x.png")]) == 1
    assert "neither model" in capsys.readouterr().err
    assert not (tmp_path / "x.png").exists()
