"""How the "Heads of this layer" grid lays many heads out in its panel (state/head_rows.py): rows of near-square
thumbnails instead of one row of slivers, whole key/value groups to a row."""

from __future__ import annotations

import pytest

from attnviz.state import head_rows

PANEL_1366 = (392.0, 358.0)  # the heads tab's size in a 1366 × 768 window
PANEL_1920 = (600.0, 632.0)  # and in a 1920 × 1080 one


@pytest.mark.parametrize("size", [PANEL_1366, PANEL_1920])
@pytest.mark.parametrize(("heads", "group"), [(32, 4), (32, 0), (14, 7), (14, 0), (16, 2), (25, 0)])
def test_many_heads_wrap_into_rows_of_the_largest_thumbnails(size, heads, group):
    per_row = head_rows.heads_per_row(heads, size, group=group)
    rows = -(-heads // per_row)
    assert rows > 1
    side = head_rows.thumbnail_side(heads, per_row, size, group=group)
    one_row = head_rows.thumbnail_side(heads, heads, size, group=group)
    assert side >= 2 * one_row  # twice the side of the one-row slivers at least
    if group:
        assert per_row % group == 0  # whole key/value groups to a row
    allowed = [count for count in range(1, heads + 1) if not group or count % group == 0 or count == heads]
    assert all(head_rows.thumbnail_side(heads, count, size, group=group) <= side + 0.05 for count in allowed)
    # the side is what the panel leaves a thumbnail: the width of a row's share and the height of a row's share
    room = head_rows.Room()
    gaps = (per_row - 1) // group if group else 0
    width = (size[0] - room.row_header - per_row * room.gap - gaps * (room.group_gap - room.gap)) / per_row
    height = size[1] / rows - room.col_header - room.gap
    assert side == pytest.approx(min(width, height))


def test_a_wide_low_panel_keeps_one_row_and_a_panel_not_laid_out_yet_too():
    assert head_rows.heads_per_row(8, (1600.0, 150.0)) == 8
    assert head_rows.heads_per_row(32, (0.0, 0.0), group=4) == 32
    assert head_rows.heads_per_row(1, PANEL_1366) == 1


def test_each_head_has_one_place_and_groups_start_in_the_same_column_on_every_row():
    per_row = head_rows.heads_per_row(32, PANEL_1366, group=4)
    places = [head_rows.place(head, per_row) for head in range(32)]
    assert len(set(places)) == 32 and places[per_row] == (1, 0) and places[-1] == (31 // per_row, 31 % per_row)
    starts = {col for head, (_, col) in enumerate(places) if head % 4 == 0 and col > 0}
    assert starts == {col for col in range(per_row) if head_rows.wide_gap_before(col, per_row, 4)}
    assert not head_rows.wide_gap_before(3, 8, 0) and not head_rows.wide_gap_before(0, 8, 4)
