"""ALTI-Logit's signed terms in the window's grids and hover, with the real worker on the en-es demo: both grids
("Heads of this layer", "All layers × heads") draw them on the diverging colormap with one symmetric range, a
negative cell below its white centre, the window's colormap back for the weights; the hover names the method and
its unit."""

from __future__ import annotations

import numpy as np
import pytest
from PySide6.QtCore import QPointF

from attnviz.gui.views.style import lookup_table
from tests.test_gui import WAIT, run_text
from tests.test_gui_compare import open_demo
from tests.test_gui_contributions import show

SENTENCE = "The old man gave his grandson a red bicycle."  # steps 6, 7 and 13 have negative source terms


def lut_index(lut: np.ndarray, rgb: tuple[int, int, int]) -> int:
    """The entry of ``lut`` nearest to ``rgb``."""
    return int(np.argmin(np.abs(lut[:, :3].astype(int) - np.array(rgb)).sum(axis=1)))


def test_alti_logit_grids_use_the_diverging_colormap_on_one_symmetric_range(qtbot, window, tmp_path):
    open_demo(qtbot, window, "en-es-transformer")
    run_text(qtbot, window, SENTENCE, max_len=16)
    window.select(kind="cross", layer=1, head=0, step=6)
    show(qtbot, window, "alti_logit")
    maps = window.contributions.maps_for()
    layer = maps.layers["cross"][1]
    every = np.abs(np.stack(maps.layers["cross"])).max()
    heads, mosaic, diverging = window.views.head_grid, window.views.model_view, lookup_table("CET-D1")
    qtbot.waitUntil(lambda: heads.cells and np.allclose(heads.cells[0][1].image, layer[0], atol=1e-5), timeout=WAIT)
    for head, (_, image) in enumerate(heads.cells):
        np.testing.assert_allclose(image.image, layer[head], atol=1e-5)  # the terms, not shares of the largest
        np.testing.assert_array_equal(image.lut, diverging)
        assert tuple(image.getLevels()) == pytest.approx((-np.abs(layer).max(), np.abs(layer).max()), rel=1e-5)
    window.views.grids.setCurrentWidget(mosaic)
    assert mosaic.levels == pytest.approx((-every, every), rel=1e-5)
    head = int(np.argmin(layer.min(axis=(1, 2))))
    row, col = np.unravel_index(np.argmin(layer[head]), layer[head].shape)
    assert layer[head][row, col] < 0
    picture = mosaic._colours(1 * mosaic.shape[1] + head)
    colour = picture.pixelColor(int(col), int(row))
    index = lut_index(diverging, (colour.red(), colour.green(), colour.blue()))
    expected = round((layer[head][row, col] + every) / (2 * every) * (len(diverging) - 1))
    assert abs(index - expected) <= 1 and index < len(diverging) // 2  # below the white centre

    window.views.selector.set_colormap_name("magma")  # the user's colormap waits for the weights
    np.testing.assert_array_equal(heads.cells[0][1].lut, diverging)
    np.testing.assert_array_equal(mosaic.lut, diverging)

    figure = tmp_path / "heads.svg"  # File → Export all heads of this layer: the terms as the grid draws them
    window.exporting.export_grid_image(str(figure))
    text, magma = figure.read_text(), lookup_table("magma")[-1]
    assert "ALTI-Logit" in text and "Δ logit" in text and f">{np.abs(layer).max():.3g}</text>" in text
    for end in (diverging[0], diverging[-1]):
        assert f"fill='#{int(end[0]):02x}{int(end[1]):02x}{int(end[2]):02x}'" in text
    assert f"fill='#{int(magma[0]):02x}{int(magma[1]):02x}{int(magma[2]):02x}'" not in text

    focus = window.views.focus
    assert "Δ logit" in focus.readout.text() and "weight" not in focus.readout.text()
    focus._on_mouse_moved(focus.plot.getViewBox().mapViewToScene(QPointF(float(col), float(row))))
    value = focus.matrix[row, col]
    assert f"ALTI-Logit {f'{value:.4f}'.replace('-', '−')} Δ logit" in focus.readout.text()

    show(qtbot, window, "weights")
    qtbot.waitUntil(lambda: np.array_equal(heads.cells[0][1].lut, lookup_table("magma")), timeout=WAIT)
    assert tuple(heads.cells[0][1].getLevels()) == (0.0, 1.0)
    assert mosaic.levels == (0.0, 1.0) and np.array_equal(mosaic.lut, lookup_table("magma"))
    assert focus.readout.text().startswith("Hover over a cell to read its weight")
