"""``attnviz render``: the app's heatmap drawn headless to PNG and SVG, and one-line errors."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest
from PySide6.QtGui import QImage
from PySide6.QtSvg import QSvgRenderer

from attnviz.cli import main


def render(capsys, *args) -> tuple[int, str]:
    code = main(["render", *[str(arg) for arg in args]])
    return code, capsys.readouterr().err


def distinct_colours(path) -> int:
    image = QImage(str(path))
    return len({image.pixel(x, y) for x in range(0, image.width(), 9) for y in range(0, image.height(), 9)})


def test_png_is_twice_the_requested_size_and_shows_a_heatmap(qapp, capsys, tmp_path, random_checkpoint):
    output = tmp_path / "cross.png"
    code, err = render(capsys, "-c", random_checkpoint, "abc", "--kind", "cross", "--layer", "1", "--head", "mean",
                       "--size", "640x480", "--max-len", "4", "-o", output)
    assert code == 0, err
    image = QImage(str(output))
    assert (image.width(), image.height()) == (1280, 960)
    assert distinct_colours(output) > 30


def test_all_heads_and_svg(qapp, capsys, tmp_path, random_checkpoint):
    png, svg = tmp_path / "heads.png", tmp_path / "rollout.svg"
    assert render(capsys, "-c", random_checkpoint, "abc", "--kind", "enc_self", "--head", "all", "-o", png)[0] == 0
    assert distinct_colours(png) > 30
    code, err = render(capsys, "-c", random_checkpoint, "abcd", "--kind", "dec_self", "--head", "rollout",
                       "--target", "dcba", "-o", svg)
    assert code == 0, err
    text = svg.read_text()
    assert text.startswith("<?xml") and "<svg" in text and "decoder input" in text  # the axis name is text


@pytest.mark.parametrize("options, fragment", [
    (["--kind", "cross", "--layer", "7"], "--layer must be below 2"),
    (["--kind", "cross", "--head", "9"], "--head must be below 4"),
    (["--kind", "cross", "--head", "median"], "--head must be"),
    (["--kind", "cross", "--size", "10x10"], "--size"),
])
@pytest.mark.usefixtures("qapp")
def test_bad_selections(capsys, tmp_path, random_checkpoint, options, fragment):
    code, err = render(capsys, "-c", random_checkpoint, "abc", *options, "-o", tmp_path / "x.png")
    assert code == 1 and fragment in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "x.png").exists()


def test_the_gui_starts_and_quits_cleanly(tmp_path, random_checkpoint):
    """A real process: the window opens the checkpoint, runs a sentence, closes; exit code 0, no crash."""
    script = textwrap.dedent(f"""
        import os, sys
        os.environ["QT_QPA_PLATFORM"] = "offscreen"
        from PySide6.QtCore import QSettings, QTimer
        from PySide6.QtWidgets import QApplication
        from attnviz.gui.app import create_window
        app = QApplication(sys.argv)
        window = create_window({str(random_checkpoint)!r}, "cpu",
                               QSettings({str(tmp_path / 's.ini')!r}, QSettings.Format.IniFormat))
        window.show()
        def finish():
            assert window.session.trace is not None, "no result"
            window.close()
            app.quit()
        def start():
            window.views.input_bar.text.setText("abc")
            window.run()
            QTimer.singleShot(3000, finish)
        QTimer.singleShot(1000, start)
        sys.exit(app.exec())
    """)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                            cwd=str(tmp_path))
    assert result.returncode == 0, result.stderr[-2000:]
    assert "Traceback" not in result.stderr and "QThread: Destroyed while thread" not in result.stderr


@pytest.mark.parametrize("options", [["-o", "cross.png"], ["--compare", "en-es-transformer-postln", "-o", "both.png"]])
def test_render_prints_nothing_on_stderr(tmp_path, options):
    """No Qt warning (an offscreen platform warns about every window shown): stderr stays empty; the file
    written is named on stdout."""
    result = subprocess.run([sys.executable, "-m", "attnviz", "render", "-c", "en-es-transformer",
                             "The Lord is my shepherd.", "--kind", "cross", *options],
                            capture_output=True, text=True, timeout=300, cwd=str(tmp_path))
    assert result.returncode == 0 and result.stderr == ""
    assert result.stdout.strip() == options[-1] and (tmp_path / options[-1]).stat().st_size > 1000


def white_margin(path) -> float:
    """The share of the image's area outside the smallest rectangle holding every pixel that is not white."""
    image = QImage(str(path)).convertToFormat(QImage.Format.Format_RGB32)
    pixels = np.frombuffer(image.constBits(), dtype=np.uint32).reshape(image.height(), image.bytesPerLine() // 4)
    drawn = (pixels[:, : image.width()] & 0xFFFFFF) != 0xFFFFFF
    rows, cols = np.flatnonzero(drawn.any(axis=1)), np.flatnonzero(drawn.any(axis=0))
    inside = (rows[-1] - rows[0] + 1) * (cols[-1] - cols[0] + 1)
    return 1 - inside / drawn.size


def test_a_comparison_png_is_cut_to_its_figure(qapp, capsys, tmp_path):
    """The three panes were drawn into three 900 × 700 boxes: 39 % of the PNG was white margin."""
    path = tmp_path / "both.png"
    code, _ = render(capsys, "-c", "en-es-transformer", "The Lord is my shepherd.", "--kind", "cross",
                     "--compare", "en-es-transformer-postln", "-o", str(path))
    assert code == 0
    code, _ = render(capsys, "-c", "en-es-transformer", "The Lord is my shepherd.", "--kind", "cross",
                     "--compare", "en-es-transformer-postln", "-o", str(tmp_path / "both.svg"))
    svg = QSvgRenderer(str(tmp_path / "both.svg")).defaultSize()
    image = QImage(str(path))
    assert image.width() / image.height() == pytest.approx(svg.width() / svg.height(), rel=0.01)  # no white band
    assert white_margin(path) < 0.08, white_margin(path)  # 0.12 in the boxes
    assert image.width() <= 2 * 3 * 900 and image.height() <= 2 * 700
    assert max(image.width() / (2 * 3 * 900), image.height() / (2 * 700)) > 0.99  # as large as the boxes allow


def test_a_signed_method_renders_on_the_diverging_colormap_symmetric_about_0(qapp, capsys, tmp_path):
    """``render --show alti_logit``: the colour bar runs from CET-D1's blue end to its red end, its numbers ± the
    map's largest magnitude (the window's colormap choice does not apply)."""
    from attnviz.gui.views.style import lookup_table

    svg = tmp_path / "logit.svg"
    code, err = render(capsys, "-c", "resources/checkpoints/en-es-transformer.safetensors", "The house is small.",
                       "--kind", "cross", "--head", "rollout", "--show", "alti_logit", "--colormap", "magma",
                       "-o", svg)
    assert code == 0, err
    text = svg.read_text()
    lut = lookup_table("CET-D1")
    for end in (lut[0], lut[-1]):
        assert f"fill='#{int(end[0]):02x}{int(end[1]):02x}{int(end[2]):02x}'" in text
    magma = lookup_table("magma")[-1]
    assert f"fill='#{int(magma[0]):02x}{int(magma[1]):02x}{int(magma[2]):02x}'" not in text
    assert "Δ logit" in text


def test_a_signed_methods_heads_render_on_the_diverging_colormap_one_range_for_all(qapp, capsys, tmp_path):
    """``render --show alti_logit --head all``: every head of the layer as the window's head grid draws it, the terms
    on CET-D1 with one colour bar ± the largest magnitude across the heads, named in Δ logit."""
    from attnviz.gui.views.style import lookup_table
    from models.analysis.methods import contributions
    from models.inference.translator import Translator
    from models.storage.checkpoint import load_checkpoint

    svg, sentence = tmp_path / "heads.svg", "The old man gave his grandson a red bicycle."
    code, err = render(capsys, "-c", "resources/checkpoints/en-es-transformer.safetensors", sentence,
                       "--kind", "cross", "--layer", "1", "--head", "all", "--show", "alti_logit",
                       "--colormap", "magma", "-o", svg)
    assert code == 0, err
    text = svg.read_text()
    diverging, magma = lookup_table("CET-D1"), lookup_table("magma")[-1]
    for end in (diverging[0], diverging[-1]):
        assert f"fill='#{int(end[0]):02x}{int(end[1]):02x}{int(end[2]):02x}'" in text
    assert f"fill='#{int(magma[0]):02x}{int(magma[1]):02x}{int(magma[2]):02x}'" not in text
    assert "Δ logit" in text and "ALTI-Logit" in text and text.count("L1 · H") == 4
    translator = Translator(load_checkpoint("resources/checkpoints/en-es-transformer.safetensors"), "cpu")
    result = translator.translate(sentence)
    layer = contributions("alti_logit", translator.model, translator.source(sentence).ids,
                          output_ids=result.token_ids).layers["cross"][1]
    bound = float(np.abs(layer).max())
    assert f">{-bound:.3g}</text>" in text and f">{bound:.3g}</text>" in text  # the colour bar's ends
