"""Slide-ready figures as SVG text, from the view-model's states (no Qt, no torch).

A heatmap figure has the title, token labels on both axes, hatched masked cells, the current step's
row outlined and a colour bar. Up to ``VECTOR_LIMIT`` cells a side every cell is a vector rectangle;
beyond that the cells are one embedded PNG image (the file says so in a comment), which keeps files small.
The heads figure shows every head of a layer with one shared colour bar; the comparison figure shows model A,
model B and B − A side by side, each pane drawn like the single heatmap. A caption under a figure names the
input, the model(s) and their output. PNG exports and Copy image render these SVGs.
"""

from __future__ import annotations

import base64
import dataclasses
import html
import re
import struct
import textwrap
import zlib
from dataclasses import dataclass

import numpy as np

from . import head_rows
from .compare_view import CompareState
from .viewmodel import GridState, HeatmapState, thumbnail, unrevealed

XML = "<?xml version='1.0' encoding='UTF-8'?>"
VECTOR_LIMIT = 64
BITMAP_SIDE = 2048  # pixels at most along a side of a large map's embedded bitmap
CELL = 18.0  # points per cell in a vector figure
TITLE_SIZE, TITLE_STEP = 14, 18.0
CAPTION_SIZE, CAPTION_STEP, CAPTION_LINES = 11, 15.0, 4  # a long sentence keeps its first lines
PANE_GAP = 24.0  # between a comparison's panes
MESSAGE_WIDTH = 260.0  # a comparison pane that has no map, only why
FONT = "font-family='DejaVu Sans, Helvetica, Arial, sans-serif'"
HATCH = ("<pattern id='masked' width='6' height='6' patternUnits='userSpaceOnUse' patternTransform='rotate(45)'>"
         "<rect width='6' height='6' fill='#ebebeb' fill-opacity='0.35'/>"
         "<line x1='0' y1='0' x2='0' y2='6' stroke='#ebebeb' stroke-width='2.5'/></pattern>")


def _plain(text: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", "", text))


def _colours(values: np.ndarray, levels: tuple[float, float], lut: np.ndarray) -> np.ndarray:
    """``values`` → ``[..., 3]`` uint8 through a 256-entry lookup table; NaN becomes grey."""
    low, high = levels
    scaled = np.clip((np.nan_to_num(values, nan=low) - low) / max(high - low, 1e-12), 0, 1)
    colours = lut[np.round(scaled * (len(lut) - 1)).astype(int)][..., :3].astype(np.uint8)
    colours[np.isnan(values)] = (128, 128, 128)
    return colours


def png_bytes(rgb: np.ndarray) -> bytes:
    """A minimal PNG (8-bit RGB) of an ``[height, width, 3]`` array."""
    height, width, _ = rgb.shape
    rows = b"".join(b"\x00" + np.ascontiguousarray(row, dtype=np.uint8).tobytes() for row in rgb)

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows, 6)) + chunk(b"IEND", b"")


def _cells(matrix: np.ndarray, mask: np.ndarray | None, *, levels, lut, x: float, y: float, cell: float,
           hidden: np.ndarray | None = None) -> list[str]:
    """The cells, masked ones hatched; ``hidden`` ones (not generated yet, step by step) left as blank paper,
    so they read neither as low weight nor as masked."""
    rows, cols = matrix.shape
    colours = _colours(matrix, levels, lut)
    hidden = np.zeros(matrix.shape, dtype=bool) if hidden is None else hidden
    colours[hidden] = (255, 255, 255)
    parts = []
    if rows <= VECTOR_LIMIT and cols <= VECTOR_LIMIT:
        for r in range(rows):
            for c in range(cols):
                if hidden[r, c]:
                    continue
                red, green, blue = colours[r, c]
                parts.append(f"<rect x='{x + c * cell:.2f}' y='{y + r * cell:.2f}' width='{cell:.2f}' "
                             f"height='{cell:.2f}' fill='#{red:02x}{green:02x}{blue:02x}'>"
                             f"<title>{matrix[r, c]:.4f}</title></rect>")
    else:
        # each cell a block of pixels: renderers smooth a scaled-up bitmap (Qt's ignores "pixelated")
        factor = max(1, min(int(np.ceil(2 * cell)), BITMAP_SIDE // max(rows, cols)))
        blocks = np.repeat(np.repeat(colours, factor, axis=0), factor, axis=1)
        encoded = base64.b64encode(png_bytes(blocks)).decode("ascii")
        parts.append(f"<!-- {rows}×{cols} cells: drawn as one embedded bitmap (vector cells up to "
                     f"{VECTOR_LIMIT}×{VECTOR_LIMIT}) -->")
        parts.append(f"<image x='{x}' y='{y}' width='{cols * cell:.2f}' height='{rows * cell:.2f}' "
                     f"preserveAspectRatio='none' style='image-rendering:pixelated' "
                     f"href='data:image/png;base64,{encoded}'/>")
    if mask is not None and mask.shape == matrix.shape and not mask.all():
        for r, c in zip(*np.nonzero(~mask & ~hidden)):
            parts.append(f"<rect x='{x + c * cell:.2f}' y='{y + r * cell:.2f}' width='{cell:.2f}' height='{cell:.2f}' "
                         "fill='url(#masked)'/>")
    return parts


def _colour_bar(levels, lut, x: float, y: float, height: float, *, title: str = "") -> list[str]:
    """The colour scale beside a map: ``levels`` from bottom to top, its numbers, and ``title`` (its unit) down its
    right side."""
    steps = 64
    parts = []
    for index in range(steps):
        value = levels[1] - (levels[1] - levels[0]) * index / (steps - 1)
        red, green, blue = _colours(np.array([value]), levels, lut)[0]
        parts.append(f"<rect x='{x}' y='{y + index * height / steps:.2f}' width='12' "
                     f"height='{height / steps + 0.5:.2f}' fill='#{red:02x}{green:02x}{blue:02x}'/>")
    for fraction in (0.0, 0.5, 1.0):
        value = levels[0] + (levels[1] - levels[0]) * fraction
        parts.append(f"<text x='{x + 16}' y='{y + height * (1 - fraction) + 4:.2f}' font-size='10' {FONT}>"
                     f"{value:.3g}</text>")
    if title:
        middle, right = y + height / 2, x + 58
        parts.append(f"<text x='{right:.2f}' y='{middle:.2f}' font-size='11' text-anchor='middle' {FONT} "
                     f"transform='rotate(-90 {right:.2f} {middle:.2f})'>{html.escape(title)}</text>")
    return parts


def _label_width(labels: list[str]) -> float:
    return 6.5 * max((len(label) for label in labels), default=1) + 8


def _text_width(text: str, size: float) -> float:
    """An estimate (no font metrics without Qt): DejaVu Sans averages about 0.5 em a character."""
    return 0.52 * size * len(text)


@dataclass(frozen=True)
class Caption:
    """What a figure shows the attention of: the input sentence and each model's name and output."""

    sentence: str
    outputs: tuple[tuple[str, str], ...]  # (model name, its output), model A first

    def lines(self, width: float) -> list[str]:
        """The caption wrapped to ``width`` points; a long input or output keeps its first lines and "…"."""
        chars = max(30, int(width / _text_width("x", CAPTION_SIZE)))
        entries = [f"Input: {self.sentence}"] + [f"Output ({model}): {output}" for model, output in self.outputs]
        lines = []
        for entry in entries:
            wrapped = textwrap.wrap(entry, chars, subsequent_indent="    ") or [entry]
            if len(wrapped) > CAPTION_LINES:
                wrapped = wrapped[:CAPTION_LINES - 1] + [wrapped[CAPTION_LINES - 1][:chars - 1] + "…"]
            lines += wrapped
        return lines


def _document(size: tuple[float, float], body: list[str], caption: Caption | None) -> str:
    """The whole SVG: a white page of ``size`` points holding ``body``, the caption under it."""
    width, height = size
    lines = caption.lines(width - 24) if caption is not None else []
    text = [f"<text xml:space='preserve' x='12' y='{height + 4 + CAPTION_STEP * (index + 1):.2f}' "
            f"font-size='{CAPTION_SIZE}' fill='#333333' {FONT}>{html.escape(line)}</text>"
            for index, line in enumerate(lines)]
    height += CAPTION_STEP * len(lines) + (12 if lines else 0)
    return "\n".join([XML, f"<svg xmlns='http://www.w3.org/2000/svg' width='{width:.0f}' height='{height:.0f}' "
                      f"viewBox='0 0 {width:.0f} {height:.0f}'>", f"<defs>{HATCH}</defs>",
                      "<rect width='100%' height='100%' fill='white'/>", *body, *text, "</svg>"])


BOUNDARY_COLOUR = "#ff9800"  # the window's line where a decoder-only model's prompt ends


def _heatmap_panel(state: HeatmapState, lut: np.ndarray, x0: float = 0.0,
                   heading: str = "") -> tuple[list[str], float, float]:
    """One titled heatmap with its labels and colour bar, its left edge at ``x0``, a ``heading`` line above
    its title if given: (parts, width, height)."""
    rows, cols = state.matrix.shape
    cell = CELL if max(rows, cols) <= VECTOR_LIMIT else max(2.0, 900.0 / max(rows, cols))
    label_every = max(1, int(np.ceil(11 / cell)))  # labels 11 points apart at least
    titles = [line for line in (heading, _plain(state.title)) if line]
    left, top = x0 + _label_width(state.query_labels) + 18, 34.0 + TITLE_STEP * (len(titles) - 1)
    bottom = _label_width(state.key_labels) * 0.75 + 24
    widest = max(_text_width(line, TITLE_SIZE) for line in titles)
    width = max(left - x0 + cols * cell + 86, left - x0 + widest + 12)  # the colour bar, its numbers and unit
    height = top + rows * cell + bottom
    parts = [f"<text x='{left:.2f}' y='{20 + TITLE_STEP * index}' font-size='{TITLE_SIZE}' {FONT}>"
             f"{html.escape(line)}</text>" for index, line in enumerate(titles)]
    hidden = None if state.revealed is None else unrevealed(state.matrix.shape, state.revealed)
    parts += _cells(state.matrix, state.mask, levels=state.levels, lut=lut, x=left, y=top, cell=cell, hidden=hidden)
    if state.step_row is not None and 0 <= state.step_row < rows:
        parts.append(f"<rect x='{left:.2f}' y='{top + state.step_row * cell:.2f}' width='{cols * cell:.2f}' "
                     f"height='{cell:.2f}' fill='none' stroke='#ff5a36' stroke-width='1.5'/>")
    if state.boundary is not None:  # a decoder-only map: where the prompt ends, on both axes
        edge = state.boundary * cell
        parts.append(f"<path d='M{left + edge:.2f},{top:.2f}v{rows * cell:.2f}M{left:.2f},{top + edge:.2f}"
                     f"h{cols * cell:.2f}' stroke='{BOUNDARY_COLOUR}' stroke-width='1.5' fill='none'/>")
    for r in range(0, rows, label_every):
        parts.append(f"<text x='{left - 4:.2f}' y='{top + (r + 0.5) * cell + 4:.2f}' font-size='10' text-anchor='end' "
                     f"{FONT}>{html.escape(state.query_labels[r])}</text>")
    for c in range(0, cols, label_every):
        cx, cy = left + (c + 0.5) * cell, top + rows * cell + 6
        parts.append(f"<text transform='translate({cx:.2f},{cy:.2f}) rotate(-45)' font-size='10' text-anchor='end' "
                     f"{FONT}>{html.escape(state.key_labels[c])}</text>")
    parts.append(f"<text x='{x0 + 12:.2f}' y='{top + rows * cell / 2:.2f}' font-size='11' text-anchor='middle' {FONT} "
                 f"transform='rotate(-90 {x0 + 12:.2f} {top + rows * cell / 2:.2f})'>"
                 f"{html.escape(state.axis_names[0])}</text>")
    parts.append(f"<text x='{left + cols * cell / 2:.2f}' y='{height - 6:.2f}' font-size='11' text-anchor='middle' "
                 f"{FONT}>{html.escape(state.axis_names[1])}</text>")
    parts += _colour_bar(state.levels, lut, x=left + cols * cell + 14, y=top, height=rows * cell,
                         title=state.scale_title)
    return parts, width, height


def _message_panel(title: str, message: str, x0: float) -> tuple[list[str], float, float]:
    """A pane with no map: its title and why there is none, wrapped."""
    width = max(MESSAGE_WIDTH, _text_width(title, TITLE_SIZE) + 24)
    lines = textwrap.wrap(message, int((width - 24) / _text_width("x", 11))) or [message]
    parts = [f"<text x='{x0 + 12:.2f}' y='20' font-size='{TITLE_SIZE}' {FONT}>{html.escape(title)}</text>"]
    parts += [f"<text x='{x0 + 12:.2f}' y='{56 + 15 * index}' font-size='11' fill='#555555' {FONT}>"
              f"{html.escape(line)}</text>" for index, line in enumerate(lines)]
    return parts, width, 70.0 + 15 * len(lines)


def without_masks(state: HeatmapState | CompareState) -> HeatmapState | CompareState:
    """``state`` with no cell hatched (the user hid the masks), a comparison's every pane."""
    if isinstance(state, HeatmapState):
        return dataclasses.replace(state, mask=None)
    panes = [pane if pane.state is None else dataclasses.replace(pane, state=without_masks(pane.state))
             for pane in (state.a, state.b, state.diff)]
    return CompareState(*panes)


def heatmap_svg(state: HeatmapState, lut: np.ndarray, caption: Caption | None = None) -> str:
    """The focus heatmap as a standalone SVG figure, with ``caption`` (input, model, output) under it."""
    parts, width, height = _heatmap_panel(state, lut)
    return _document((width, height), body=parts, caption=caption)


def _without_letter(title: str) -> str:
    """A comparison pane's title without its first part, the model's letter (its name heads the pane)."""
    _, _, rest = _plain(title).partition(" · ")
    return rest


def compare_svg(state: CompareState, names: tuple[str, str], luts: tuple[np.ndarray, np.ndarray],
                caption: Caption | None = None) -> str:
    """Model A | model B | B − A side by side, each pane titled with the models' names, the way a single
    heatmap is drawn (``luts``: the maps' colormap and the difference's diverging one)."""
    a, b = names
    body, x0, height = [], 0.0, 0.0
    for pane, name, lut in ((state.a, a, luts[0]), (state.b, b, luts[0]), (state.diff, f"{b} − {a}", luts[1])):
        if pane.state is None:
            parts, width, pane_height = _message_panel(name, pane.message, x0)
        else:
            titled = dataclasses.replace(pane.state, title=_without_letter(pane.state.title))
            parts, width, pane_height = _heatmap_panel(titled, lut, x0=x0, heading=name)
        body += parts
        x0, height = x0 + width + PANE_GAP, max(height, pane_height)
    return _document((x0 - PANE_GAP, height), body=body, caption=caption)


def heads_svg(grid: GridState, title: str, query_labels: list[str], key_labels: list[str], lut: np.ndarray, *,
              levels: tuple[float, float] | None = None, mask: np.ndarray | None = None,
              caption: Caption | None = None, unit: str = "") -> str:
    """Every head of ``grid`` (one row per layer; one layer of many heads in rows of
    ``head_rows.figure_per_row``), titled, with token labels where they fit, one colour bar (``levels``, else the
    grid's own: ± the largest magnitude of signed maps; named ``unit``), and the cells ``mask`` forbids hatched as
    in the focus view."""
    levels = grid.levels if levels is None else levels
    rows, cols = grid.matrices[0].shape if grid.matrices else (1, 1)
    if mask is not None and mask.shape != (rows, cols):  # long inputs: thumbnails, so a block hatched if all masked
        mask = thumbnail(mask.astype(np.float32)) > 0
    cell = max(1.0, min(CELL, 220.0 / max(rows, cols)))
    labelled = cell >= 9
    left = (_label_width(query_labels) if labelled else 0) + 30
    top, gap = 40.0, 14.0
    panel_w, panel_h = cols * cell, rows * cell
    bottom = (_label_width(key_labels) * 0.75 if labelled else 0) + 16
    across = head_rows.figure_per_row(grid.cols, grid.group) if grid.wrap and grid.rows == 1 else grid.cols
    down = -(-len(grid.matrices) // across) if grid.matrices else grid.rows  # a layer of many heads: several rows
    bar = 84 if unit else 60  # the colour bar, its numbers, and its unit
    width = max(left + across * (panel_w + gap) + bar, left + _text_width(_plain(title), TITLE_SIZE) + 12)
    height = top + down * (panel_h + gap + 16) + bottom
    parts = [f"<text x='{left}' y='20' font-size='{TITLE_SIZE}' {FONT}>{html.escape(_plain(title))}</text>"]
    for index, matrix in enumerate(grid.matrices):
        row, col = divmod(index, across)
        x, y = left + col * (panel_w + gap), top + row * (panel_h + gap + 16) + 14
        off = bool(grid.off) and grid.off[index]  # a switched-off head: "off" in its title, crossed out
        colour, mark = (" fill='#c62828'", " · off") if off else ("", "")
        name = f"{grid.row_names[index // grid.cols]} · {grid.col_names[index % grid.cols]}"
        parts.append(f"<text x='{x + panel_w / 2:.2f}' y='{y - 4:.2f}' font-size='11' text-anchor='middle' {FONT}"
                     f"{colour}>{html.escape(name)}{mark}</text>")
        parts += _cells(matrix, mask, levels=levels, lut=lut, x=x, y=y, cell=cell)
        if grid.boundary is not None:  # a decoder-only map: where the prompt ends, on both axes, as in the window
            edge = grid.boundary * cell
            parts.append(f"<path d='M{x + edge:.2f},{y:.2f}v{panel_h:.2f}M{x:.2f},{y + edge:.2f}h{panel_w:.2f}' "
                         f"stroke='{BOUNDARY_COLOUR}' stroke-width='1.5' fill='none'/>")
        if off:
            parts.append(f"<path d='M{x:.2f},{y:.2f} L{x + panel_w:.2f},{y + panel_h:.2f} M{x:.2f},{y + panel_h:.2f} "
                         f"L{x + panel_w:.2f},{y:.2f}' stroke='#e53935' stroke-width='2' fill='none'/>")
        if labelled and col == 0:
            for r in range(rows):
                parts.append(f"<text x='{x - 4}' y='{y + (r + 0.5) * cell + 3.5:.2f}' font-size='9' text-anchor='end' "
                             f"{FONT}>{html.escape(query_labels[r])}</text>")
        if labelled and row == down - 1:
            for c in range(cols):
                cx, cy = x + (c + 0.5) * cell, y + panel_h + 5
                parts.append(f"<text transform='translate({cx:.2f},{cy:.2f}) rotate(-45)' font-size='9' "
                             f"text-anchor='end' {FONT}>{html.escape(key_labels[c])}</text>")
    parts += _colour_bar(levels, lut, x=left + across * (panel_w + gap) + 12, y=top + 14, height=panel_h,
                         title=unit)
    return _document((width, height), body=parts, caption=caption)


CURVE_COLOURS = {"increasing": "#1f77b4", "decreasing": "#d62728", "random": "#7f7f7f"}
CURVE_NAMES = {"increasing": "least important first", "decreasing": "most important first",
               "random": "random order"}
PLOT_WIDTH, PLOT_HEIGHT = 520.0, 300.0


def prune_curve_svg(curves: dict[str, np.ndarray], *, title: str, metric_name: str,
                    caption: Caption | None = None) -> str:
    """The pruning curves as a line chart: the score (y) with the first k heads of each order switched off
    (x: k), one line per order, with a legend; every point has its value as a tooltip."""
    left, top = 64.0, 40.0
    points = max(len(curve) for curve in curves.values())
    values = np.concatenate([np.asarray(curve, dtype=float) for curve in curves.values()])
    low, high = float(values.min()), float(values.max())
    low, high = (low - 0.5, high + 0.5) if high - low < 1e-12 else (low, high)
    x = lambda k: left + PLOT_WIDTH * k / max(points - 1, 1)  # noqa: E731
    y = lambda value: top + PLOT_HEIGHT * (high - value) / (high - low)  # noqa: E731
    parts = [f"<text x='{left}' y='22' font-size='{TITLE_SIZE}' {FONT}>{html.escape(title)}</text>",
             f"<rect x='{left}' y='{top}' width='{PLOT_WIDTH}' height='{PLOT_HEIGHT}' fill='none' stroke='#999999'/>"]
    for fraction in (0.0, 0.25, 0.5, 0.75, 1.0):
        value, k = low + (high - low) * fraction, round((points - 1) * fraction)
        parts += [f"<text x='{left - 6}' y='{y(value) + 4:.2f}' font-size='10' text-anchor='end' {FONT}>"
                  f"{value:.3g}</text>",
                  f"<text x='{x(k):.2f}' y='{top + PLOT_HEIGHT + 14}' font-size='10' text-anchor='middle' {FONT}>"
                  f"{k}</text>"]
    parts += [f"<text x='{left + PLOT_WIDTH / 2}' y='{top + PLOT_HEIGHT + 32}' font-size='11' text-anchor='middle' "
              f"{FONT}>heads switched off</text>",
              f"<text x='16' y='{top + PLOT_HEIGHT / 2}' font-size='11' text-anchor='middle' {FONT} "
              f"transform='rotate(-90 16 {top + PLOT_HEIGHT / 2})'>{html.escape(metric_name)}</text>"]
    for index, (order, curve) in enumerate(curves.items()):
        colour = CURVE_COLOURS.get(order, "#000000")
        path = " ".join(f"{x(k):.2f},{y(value):.2f}" for k, value in enumerate(curve))
        parts.append(f"<polyline points='{path}' fill='none' stroke='{colour}' stroke-width='2'>"
                     f"<title>{html.escape(CURVE_NAMES.get(order, order))}</title></polyline>")
        parts += [f"<circle cx='{x(k):.2f}' cy='{y(value):.2f}' r='2' fill='{colour}'><title>{k} off: {value:.4g}"
                  f"</title></circle>" for k, value in enumerate(curve)]
        legend_y = top + 16 + 16 * index
        parts += [f"<line x1='{left + PLOT_WIDTH + 16}' y1='{legend_y - 4}' x2='{left + PLOT_WIDTH + 36}' "
                  f"y2='{legend_y - 4}' stroke='{colour}' stroke-width='2'/>",
                  f"<text x='{left + PLOT_WIDTH + 42}' y='{legend_y}' font-size='11' {FONT}>"
                  f"{html.escape(CURVE_NAMES.get(order, order))}</text>"]
    return _document((left + PLOT_WIDTH + 190, top + PLOT_HEIGHT + 44), body=parts, caption=caption)


NEURON_ROW = 13.0  # points per key row in the neuron figure
NEURON_NUMBER = 52.0  # points per number column


def _bitmap(rgb: np.ndarray, *, x: float, y: float, width: float, height: float) -> str:
    """An embedded bitmap, each cell a block of pixels (renderers smooth a scaled-up bitmap)."""
    rows, cols, _ = rgb.shape
    factor = max(1, min(8, BITMAP_SIDE // max(rows, cols, 1)))
    blocks = np.repeat(np.repeat(rgb, factor, axis=0), factor, axis=1)
    encoded = base64.b64encode(png_bytes(blocks)).decode("ascii")
    return (f"<image x='{x:.2f}' y='{y:.2f}' width='{width:.2f}' height='{height:.2f}' preserveAspectRatio='none' "
            f"style='image-rendering:pixelated' href='data:image/png;base64,{encoded}'/>")


def neuron_svg(state, caption: Caption | None = None) -> str:
    """The Neuron pane as a figure (attnviz/state/neuron_view.py ``NeuronState``): the title and notes, q over the
    key vectors k, q ⊙ k beside them, then per key q·k, the scale and bias steps and the softmax."""
    from .neuron_view import diverging_rgb

    keys, dims = len(state.key_labels), state.head_dim
    cell = max(2.0, min(6.0, 360.0 / dims))
    lines = [_plain(state.title), *state.notes]
    left = _label_width(state.key_labels) + 12
    top = 20 + TITLE_STEP * len(lines) + 14
    block = dims * cell
    product_x, numbers_x = left + block + 14, left + 2 * block + 28
    parts = [f"<text x='12' y='{20 + TITLE_STEP * index}' font-size='{TITLE_SIZE if index == 0 else 11}' {FONT}>"
             f"{html.escape(line)}</text>" for index, line in enumerate(lines)]
    heading = top - 6
    parts.append(f"<text x='{left:.2f}' y='{heading:.2f}' font-size='10' {FONT}>q, k ({dims} dims"
                 f"{', rotated' if state.rotated else ''})</text>")
    parts.append(f"<text x='{product_x:.2f}' y='{heading:.2f}' font-size='10' {FONT}>q ⊙ k</text>")
    parts.append(_bitmap(diverging_rgb(state.query[None], state.query_limit), x=left, y=top, width=block,
                         height=NEURON_ROW))
    keys_top = top + NEURON_ROW + 4
    parts.append(_bitmap(diverging_rgb(state.keys, state.vector_limit), x=left, y=keys_top, width=block,
                         height=keys * NEURON_ROW))
    parts.append(_bitmap(diverging_rgb(state.products, state.product_limit), x=product_x, y=keys_top, width=block,
                         height=keys * NEURON_ROW))
    parts.append(f"<text x='{left - 4:.2f}' y='{top + NEURON_ROW - 3:.2f}' font-size='10' text-anchor='end' "
                 f"{FONT}>q ‘{html.escape(state.query_label)}’</text>")
    for index, label in enumerate(state.key_labels):
        y = keys_top + (index + 1) * NEURON_ROW - 3
        parts.append(f"<text x='{left - 4:.2f}' y='{y:.2f}' font-size='10' text-anchor='end' {FONT}>"
                     f"{html.escape(label)}</text>")
    parts += _neuron_numbers(state, x=numbers_x, y=keys_top)
    width = numbers_x + NEURON_NUMBER * len(state.columns) + 12
    return _document((width, keys_top + keys * NEURON_ROW + 12), parts, caption)


def _neuron_numbers(state, *, x: float, y: float) -> list[str]:
    parts = []
    for number, column in enumerate(state.columns):
        right = x + (number + 1) * NEURON_NUMBER - 6
        parts.append(f"<text x='{right:.2f}' y='{y - 6:.2f}' font-size='10' text-anchor='end' {FONT}>"
                     f"{html.escape(column.name)}</text>")
        for index, value in enumerate(column.values):
            row_y = y + index * NEURON_ROW
            softmax = column.name == "softmax"
            if softmax:
                shade = int(255 - 150 * float(np.clip(value, 0.0, 1.0)))
                parts.append(f"<rect x='{right - NEURON_NUMBER + 8:.2f}' y='{row_y:.2f}' "
                             f"width='{NEURON_NUMBER - 2:.2f}' height='{NEURON_ROW:.2f}' "
                             f"fill='#{shade:02x}{shade:02x}ff'/>")
            shown = "masked" if not state.allowed[index] and (softmax or column.name == "score") else (
                f"{value:.3f}" if softmax else f"{value:.3g}")
            colour = "#999999" if not state.allowed[index] else "#000000"
            parts.append(f"<text x='{right:.2f}' y='{row_y + NEURON_ROW - 3:.2f}' font-size='10' text-anchor='end' "
                         f"fill='{colour}' {FONT}>{shown}</text>")
    return parts
