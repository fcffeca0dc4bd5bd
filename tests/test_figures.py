"""Slide-ready SVG figures from view-model states (no Qt): vector cells up to 64×64, one embedded bitmap
beyond (said in the file), hatched masks, the step row outlined, labels as text."""

from __future__ import annotations

import base64
import dataclasses
import re
import zlib
from xml.etree import ElementTree

import numpy as np

from attnviz.state.figures import CAPTION_LINES, VECTOR_LIMIT, Caption, compare_svg, heads_svg, heatmap_svg, png_bytes
from attnviz.state.viewmodel import HeatmapState

SVG = "{http://www.w3.org/2000/svg}"
LUT = np.stack([np.arange(256)] * 3, axis=1).astype(np.uint8)  # grey ramp: colour = weight × 255


def state(size: int, mask: np.ndarray | None = None) -> HeatmapState:
    matrix = np.linspace(0, 1, size * size, dtype=np.float32).reshape(size, size)
    labels = [f"t{index}" for index in range(size)]
    return HeatmapState(matrix=matrix, mask=mask, query_labels=labels, key_labels=labels,
                        title="<b>Decoder self-attention</b> · layer 0 · head 1", axis_names=("queries", "keys"),
                        levels=(0.0, 1.0), step_row=2, file_stem="x")


def test_small_maps_are_vector_cells_with_hatched_masks_and_the_step_outlined():
    mask = np.tril(np.ones((4, 4), dtype=bool))
    root = ElementTree.fromstring(heatmap_svg(state(4, mask), LUT).split("\n", 1)[1])
    rects = list(root.iter(f"{SVG}rect"))
    cells = [rect for rect in rects if rect.find(f"{SVG}title") is not None]
    assert len(cells) == 16
    assert cells[-1].get("fill") == "#ffffff" and cells[0].get("fill") == "#000000"
    assert len([rect for rect in rects if rect.get("fill") == "url(#masked)"]) == int((~mask).sum())
    outline = [rect for rect in rects if rect.get("stroke") == "#ff5a36"]
    assert len(outline) == 1 and float(outline[0].get("y")) == float(cells[8].get("y"))  # row 2
    texts = [text.text for text in root.iter(f"{SVG}text")]
    assert "Decoder self-attention · layer 0 · head 1" in texts and {"t0", "t3", "queries", "keys"} <= set(texts)


def test_large_maps_embed_one_bitmap_and_say_so():
    text = heatmap_svg(state(VECTOR_LIMIT + 1), LUT)
    assert f"drawn as one embedded bitmap (vector cells up to {VECTOR_LIMIT}×{VECTOR_LIMIT})" in text
    assert text.count("<title>") == 0
    encoded = re.search(r"base64,([A-Za-z0-9+/=]+)", text).group(1)
    assert base64.b64decode(encoded).startswith(b"\x89PNG")


def test_png_bytes_hold_the_pixels():
    rgb = np.arange(2 * 3 * 3, dtype=np.uint8).reshape(2, 3, 3)
    data = png_bytes(rgb)
    start = data.index(b"IDAT") + 4
    length = int.from_bytes(data[start - 8:start - 4], "big")
    rows = zlib.decompress(data[start:start + length])
    assert rows == b"\x00" + rgb[0].tobytes() + b"\x00" + rgb[1].tobytes()


def texts_of(svg: str) -> list[str]:
    return [text.text for text in ElementTree.fromstring(svg.split("\n", 1)[1]).iter(f"{SVG}text")]


def test_the_heads_figure_hatches_masked_cells_even_when_its_maps_are_thumbnails():
    from attnviz.state.viewmodel import THUMBNAIL_SIDE, GridState

    for size in (4, THUMBNAIL_SIDE * 2):  # a long input's thumbnails: a block is hatched when all of it is masked
        mask = np.tril(np.ones((size, size), dtype=bool))
        shown = 4 if size == 4 else THUMBNAIL_SIDE
        grid = GridState(rows=1, cols=2, row_names=["L0"], col_names=["H0", "H1"],
                         matrices=[np.zeros((shown, shown), np.float32)] * 2, selected=None)
        svg = heads_svg(grid, "Decoder self-attention", query_labels=["q"] * size, key_labels=["k"] * size, lut=LUT,
                        mask=mask)
        blocked = shown * (shown - 1) // 2  # above the diagonal
        assert svg.count("fill='url(#masked)'") == 2 * blocked


def test_a_caption_names_the_input_and_each_model_with_its_output_and_keeps_long_texts_short():
    caption = Caption("The Lord is my shepherd.", (("en-es-transformer", "El Señor es mi pastor."),))
    texts = texts_of(heatmap_svg(state(4), LUT, caption=caption))
    assert "Input: The Lord is my shepherd." in texts
    assert "Output (en-es-transformer): El Señor es mi pastor." in texts
    long = Caption("word " * 500, (("m", "x"),))
    lines = long.lines(300)
    assert len(lines) == CAPTION_LINES + 1 and lines[CAPTION_LINES - 1].endswith("…")


def test_the_comparison_is_vector_cells_titled_with_the_models_names():
    from attnviz.state.compare_view import ComparePane, CompareState

    a, b = state(4), state(4)
    diff = dataclasses.replace(state(4), title="<b>B − A</b> · Cross-attention · layer 0 · head 0")
    both = CompareState(ComparePane(dataclasses.replace(a, title="<b>A</b> · Cross-attention · layer 0 · head 0")),
                        ComparePane(dataclasses.replace(b, title="<b>B</b> · Cross-attention · layer 0 · head 0")),
                        ComparePane(diff))
    svg = compare_svg(both, ("pre-ln", "post-ln"), luts=(LUT, LUT))
    assert svg.count("<title>") == 3 * 16 and "<image" not in svg
    texts = texts_of(svg)
    assert {"pre-ln", "post-ln", "post-ln − pre-ln"} <= set(texts) and "A" not in texts and "B" not in texts
    missing = CompareState(both.a, ComparePane(None, "model B has no encoder self-attention"), ComparePane(None, "-"))
    texts = texts_of(compare_svg(missing, ("gru", "transformer"), luts=(LUT, LUT)))
    assert "transformer" in texts and "model B has no encoder self-attention" in texts


def test_cells_not_generated_yet_are_left_blank_in_a_revealed_figure():
    """Step by step, a figure must not draw the future as weights of 0 (nor hatch it as masked)."""
    mask = np.tril(np.ones((4, 4), dtype=bool))
    revealed = dataclasses.replace(state(4, mask), revealed=(2, 2))
    root = ElementTree.fromstring(heatmap_svg(revealed, LUT).split("\n", 1)[1])
    rects = list(root.iter(f"{SVG}rect"))
    assert len([rect for rect in rects if rect.find(f"{SVG}title") is not None]) == 4  # the 2 × 2 generated
    assert len([rect for rect in rects if rect.get("fill") == "url(#masked)"]) == 1  # row 0's future key
