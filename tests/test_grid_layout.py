"""The "All layers × heads" layout (state/grid_layout.py): square thumbnails at least LEAST_SIDE pixels a side, the
rest scrolls; every thumbnail found again under its own pixels, the gaps between key/value groups included."""

from __future__ import annotations

from attnviz.state.grid_layout import LEAST_SIDE, layout


def test_32_by_32_at_1366_by_768_keeps_readable_squares_and_scrolls():
    grid = layout(32, 32, (560.0, 600.0), group=4)
    width, height = grid.size()
    assert grid.side == LEAST_SIDE and width > 560 and height > 600  # both directions scroll
    # 32 heads: 32 squares, 31 gaps of which 7 are the wider ones between key/value groups, the layer names' column
    assert width == grid.row_header + 32 * LEAST_SIDE + 31 * grid.gap + 7 * (grid.group_gap - grid.gap) + grid.gap


def test_a_grid_that_fits_fills_its_panel_with_larger_squares():
    grid = layout(16, 12, (900.0, 800.0))
    width, height = grid.size()
    assert grid.side > LEAST_SIDE and width <= 900 and height <= 800
    assert grid.side == int(min((900 - 34 - 12 * 3) / 12, (800 - 18 - 16 * 3) / 16))


def test_every_thumbnail_is_found_under_its_pixels_and_the_gaps_are_no_head():
    grid = layout(4, 8, (300.0, 200.0), group=4)
    for layer in range(4):
        for head in range(8):
            x, y, side, _ = grid.rect(layer, head)
            assert grid.cell_at(x + 1, y + 1) == grid.cell_at(x + side - 1, y + side - 1) == (layer, head)
    x, _, side, _ = grid.rect(0, 3)
    assert grid.rect(0, 4)[0] - (x + side) == grid.group_gap  # the wider gap before the second group
    assert grid.cell_at(x + side + 4, grid.y(0) + 5) is None  # in that gap
    assert grid.cell_at(5, 50) is None and grid.cell_at(50, 5) is None  # the layer and head names


def test_only_the_thumbnails_in_view_are_listed_for_painting():
    grid = layout(32, 32, (500.0, 400.0), group=4)
    view = (700.0, 500.0, 500.0, 400.0)
    layers, heads = grid.visible(view)
    seen = {(layer, head) for layer in range(32) for head in range(32)
            if grid.rect(layer, head)[0] < view[0] + view[2] and grid.rect(layer, head)[0] + grid.side > view[0]
            and grid.rect(layer, head)[1] < view[1] + view[3] and grid.rect(layer, head)[1] + grid.side > view[1]}
    assert seen <= {(layer, head) for layer in layers for head in heads}
    assert len(layers) * len(heads) < 32 * 32 / 4


def test_head_names_thinned_to_whole_groups_or_parts_of_one():
    grid = layout(32, 32, (300.0, 300.0), group=4, least=6, compact=True)  # 7-pixel steps
    assert grid.every(45) == 8 and grid.every(10) == 2 and grid.every(14) == 4  # 7, 2 and 3 steps needed
    assert layout(32, 12, (300.0, 300.0), least=6, compact=True).every(45) == 7  # no groups: just enough
