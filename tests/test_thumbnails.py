"""The thumbnail grids at the sizes people train: 16 heads in a side panel, 24 layers × 16 heads."""

from __future__ import annotations

import numpy as np
import pytest

from attnviz.gui.views.thumbnails import ThumbnailGrid


@pytest.mark.parametrize(("rows", "cols", "size"), [(1, 16, (380, 300)), (6, 16, (380, 300)), (24, 16, (380, 300)),
                                                    (6, 8, (380, 300))])
def test_every_thumbnail_stays_inside_the_panel_and_headers_thin_out_whole(qtbot, rows, cols, size):
    """Headers as wide as "H10" on 16 heads made the grid wider than its panel, which cut off the last heads."""
    grid = ThumbnailGrid()
    qtbot.addWidget(grid)
    grid.resize(*size)
    grid.show()
    grid.build(rows, cols, row_names=[f"L{row}" for row in range(rows)], col_names=[f"H{col}" for col in range(cols)])
    grid.set_images([np.full((3, 4), 0.5, dtype=np.float32)] * (rows * cols))
    qtbot.waitExposed(grid)
    last = grid.mapFromScene(grid.cells[-1][0].sceneBoundingRect()).boundingRect()
    assert last.right() <= size[0] and last.bottom() <= size[1]
    for labels, cell in ((grid.col_labels, grid.cells[0][0].sceneBoundingRect().width()),
                         (grid.row_labels, grid.cells[0][0].sceneBoundingRect().height())):
        shown = [label for label in labels if label.item.isVisible()]
        assert labels[0] in shown
        every = labels.index(shown[1]) if len(shown) > 1 else len(labels)
        assert [labels.index(label) for label in shown] == list(range(0, len(labels), every))
    assert all(label.item.isVisible() for label in grid.col_labels) == (cols <= 8)  # 8 heads: every header
