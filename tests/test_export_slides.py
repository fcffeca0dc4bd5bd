"""Slide-ready image exports on the real demos: white figures with every label, a caption naming the input,
the model and its output (PNG, SVG, Copy image), hatched masks in the all-heads figure, and a comparison
drawn in vector cells titled with both models' names."""

from __future__ import annotations

from xml.etree import ElementTree

import numpy as np
from PySide6.QtGui import QColor, QImage

from attnviz.cli import main
from tests.test_gui import run_text
from tests.test_gui_compare import open_demo

SVG = "{http://www.w3.org/2000/svg}"
SENTENCE = "The Lord is my shepherd."


def svg_texts(path) -> list[str]:
    return [text.text for text in ElementTree.parse(path).getroot().iter(f"{SVG}text")]


def border_colours(image: QImage) -> set[str]:
    """The colours of the image's outermost rows and columns."""
    width, height = image.width(), image.height()
    edge = [(x, 0) for x in range(width)] + [(x, height - 1) for x in range(width)]
    edge += [(0, y) for y in range(height)] + [(width - 1, y) for y in range(height)]
    return {QColor(image.pixel(x, y)).name() for x, y in edge}


def test_the_heatmap_image_is_white_and_captioned_in_png_svg_and_on_the_clipboard(qtbot, window, qapp, tmp_path):
    open_demo(qtbot, window, "en-es-transformer")
    run_text(qtbot, window, SENTENCE, max_len=20)
    output = window.session.result.text
    png, svg = tmp_path / "focus.png", tmp_path / "focus.svg"
    window.exporting.export_focus_image(str(png))
    window.exporting.export_focus_image(str(svg))
    image = QImage(str(png))
    assert border_colours(image) == {"#ffffff"}
    texts = svg_texts(svg)
    assert f"Input: {SENTENCE}" in texts and f"Output (en-es-transformer): {output}" in texts
    assert set(window.session.trace.src_tokens) <= set(texts)  # every label in full, as text
    window.exporting.copy_focus_image()
    copied = qapp.clipboard().image()
    assert copied.convertToFormat(image.format()) == image  # the clipboard holds the PNG export


def test_the_all_heads_figure_hatches_the_decoders_future(qtbot, window, tmp_path):
    open_demo(qtbot, window, "en-es-transformer")
    run_text(qtbot, window, SENTENCE, max_len=20)
    window.select(kind="dec_self", layer=0, head=0)
    trace = window.session.trace
    hatched_svg, hatched, plain = tmp_path / "heads.svg", tmp_path / "heads.png", tmp_path / "plain.png"
    window.exporting.export_grid_image(str(hatched_svg))
    window.exporting.export_grid_image(str(hatched))
    text = hatched_svg.read_text(encoding="utf-8")
    future = int((~trace.masks["dec_self"]).sum())
    assert future > 0 and text.count("fill='url(#masked)'") == trace.heads("dec_self") * future
    window.views.selector.set_masks_visible(False)
    window.exporting.export_grid_image(str(plain))
    masked = next(rect for rect in ElementTree.fromstring(text).iter(f"{SVG}rect")
                  if rect.get("fill") == "url(#masked)")
    x, y, side = (float(masked.get(name)) for name in ("x", "y", "width"))
    with_hatch, without = QImage(str(hatched)), QImage(str(plain))
    cell = [(round(2 * (x + dx)), round(2 * (y + dy)))
            for dx in np.linspace(1, side - 1, 6) for dy in np.linspace(1, side - 1, 6)]
    assert any(with_hatch.pixel(*point) != without.pixel(*point) for point in cell)  # 2×: PNG pixels per point


def test_the_comparison_svg_is_vector_cells_titled_with_both_models_names(tmp_path, capsys):
    svg = tmp_path / "both.svg"
    assert main(["render", "-c", "en-es-transformer", "--compare", "en-es-transformer-postln", SENTENCE,
                 "--kind", "cross", "-o", str(svg)]) == 0
    root = ElementTree.parse(svg).getroot()
    cells = [rect for rect in root.iter(f"{SVG}rect") if rect.find(f"{SVG}title") is not None]
    assert len(cells) > 3 * 7 * 5 and not list(root.iter(f"{SVG}image"))
    texts = svg_texts(svg)
    assert {"en-es-transformer", "en-es-transformer-postln"} <= set(texts)
    assert any(text.startswith("Output (en-es-transformer-postln): ") for text in texts)
