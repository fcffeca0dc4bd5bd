"""Slide-ready figures as SVG text, from the view-model's states (no Qt, no torch).

A heatmap figure has the title, token labels on both axes, hatched masked cells, the current step's
row outlined and a colour bar. Up to ``VECTOR_LIMIT`` cells a side every cell is a vector rectangle;
beyond that the cells are one embedded PNG image (the file says so in a comment), which keeps files small.
The heads figure shows every head of a layer with one shared colour bar. PNG exports render these SVGs.
"""

from __future__ import annotations

import base64
import html
import re
import struct
import zlib

import numpy as np

from .viewmodel import GridState, HeatmapState

XML = "<?xml version='1.0' encoding='UTF-8'?>"
VECTOR_LIMIT = 64
CELL = 18.0  # points per cell in a vector figure
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


def _cells(matrix: np.ndarray, mask: np.ndarray | None, levels, lut, x: float, y: float, cell: float) -> list[str]:
    rows, cols = matrix.shape
    colours = _colours(matrix, levels, lut)
    parts = []
    if rows <= VECTOR_LIMIT and cols <= VECTOR_LIMIT:
        for r in range(rows):
            for c in range(cols):
                red, green, blue = colours[r, c]
                parts.append(f"<rect x='{x + c * cell:.2f}' y='{y + r * cell:.2f}' width='{cell:.2f}' height='{cell:.2f}' "
                             f"fill='#{red:02x}{green:02x}{blue:02x}'><title>{matrix[r, c]:.4f}</title></rect>")
    else:
        encoded = base64.b64encode(png_bytes(colours)).decode("ascii")
        parts.append(f"<!-- {rows}×{cols} cells: drawn as one embedded bitmap (vector cells up to "
                     f"{VECTOR_LIMIT}×{VECTOR_LIMIT}) -->")
        parts.append(f"<image x='{x}' y='{y}' width='{cols * cell:.2f}' height='{rows * cell:.2f}' "
                     f"preserveAspectRatio='none' style='image-rendering:pixelated' "
                     f"href='data:image/png;base64,{encoded}'/>")
    if mask is not None and mask.shape == matrix.shape and not mask.all():
        for r, c in zip(*np.nonzero(~mask)):
            parts.append(f"<rect x='{x + c * cell:.2f}' y='{y + r * cell:.2f}' width='{cell:.2f}' height='{cell:.2f}' "
                         "fill='url(#masked)'/>")
    return parts


def _colour_bar(levels, lut, x: float, y: float, height: float) -> list[str]:
    steps = 64
    parts = []
    for index in range(steps):
        value = levels[1] - (levels[1] - levels[0]) * index / (steps - 1)
        red, green, blue = _colours(np.array([value]), levels, lut)[0]
        parts.append(f"<rect x='{x}' y='{y + index * height / steps:.2f}' width='12' height='{height / steps + 0.5:.2f}' "
                     f"fill='#{red:02x}{green:02x}{blue:02x}'/>")
    for fraction in (0.0, 0.5, 1.0):
        value = levels[0] + (levels[1] - levels[0]) * fraction
        parts.append(f"<text x='{x + 16}' y='{y + height * (1 - fraction) + 4:.2f}' font-size='10' {FONT}>{value:.3g}</text>")
    return parts


def _label_width(labels: list[str]) -> float:
    return 6.5 * max((len(label) for label in labels), default=1) + 8


def heatmap_svg(state: HeatmapState, lut: np.ndarray) -> str:
    """The focus heatmap as a standalone SVG figure."""
    rows, cols = state.matrix.shape
    cell = CELL if max(rows, cols) <= VECTOR_LIMIT else max(2.0, 900.0 / max(rows, cols))
    label_every = max(1, int(np.ceil(11 / cell)))  # labels 11 points apart at least
    left, top = _label_width(state.query_labels) + 18, 34.0
    bottom = _label_width(state.key_labels) * 0.75 + 24
    width, height = left + cols * cell + 70, top + rows * cell + bottom
    parts = [XML, f"<svg xmlns='http://www.w3.org/2000/svg' width='{width:.0f}' height='{height:.0f}' "
             f"viewBox='0 0 {width:.0f} {height:.0f}'>", f"<defs>{HATCH}</defs>",
             "<rect width='100%' height='100%' fill='white'/>",
             f"<text x='{left}' y='20' font-size='14' {FONT}>{html.escape(_plain(state.title))}</text>"]
    parts += _cells(state.matrix, state.mask, levels=state.levels, lut=lut, x=left, y=top, cell=cell)
    if state.step_row is not None and 0 <= state.step_row < rows:
        parts.append(f"<rect x='{left}' y='{top + state.step_row * cell:.2f}' width='{cols * cell:.2f}' height='{cell:.2f}' "
                     "fill='none' stroke='#ff5a36' stroke-width='1.5'/>")
    for r in range(0, rows, label_every):
        parts.append(f"<text x='{left - 4}' y='{top + (r + 0.5) * cell + 4:.2f}' font-size='10' text-anchor='end' "
                     f"{FONT}>{html.escape(state.query_labels[r])}</text>")
    for c in range(0, cols, label_every):
        cx, cy = left + (c + 0.5) * cell, top + rows * cell + 6
        parts.append(f"<text transform='translate({cx:.2f},{cy:.2f}) rotate(-45)' font-size='10' text-anchor='end' "
                     f"{FONT}>{html.escape(state.key_labels[c])}</text>")
    parts.append(f"<text x='12' y='{top + rows * cell / 2:.2f}' font-size='11' text-anchor='middle' {FONT} "
                 f"transform='rotate(-90 12 {top + rows * cell / 2:.2f})'>{html.escape(state.axis_names[0])}</text>")
    parts.append(f"<text x='{left + cols * cell / 2:.2f}' y='{height - 6:.2f}' font-size='11' text-anchor='middle' "
                 f"{FONT}>{html.escape(state.axis_names[1])}</text>")
    parts += _colour_bar(state.levels, lut, x=left + cols * cell + 14, y=top, height=rows * cell)
    parts.append("</svg>")
    return "\n".join(parts)


def heads_svg(grid: GridState, title: str, query_labels: list[str], key_labels: list[str], lut: np.ndarray,
              levels: tuple[float, float] = (0.0, 1.0)) -> str:
    """Every head of ``grid`` (one row per layer), titled, with token labels where they fit and one colour bar."""
    rows, cols = grid.matrices[0].shape if grid.matrices else (1, 1)
    cell = max(1.0, min(CELL, 220.0 / max(rows, cols)))
    labelled = cell >= 9
    left = (_label_width(query_labels) if labelled else 0) + 30
    top, gap = 40.0, 14.0
    panel_w, panel_h = cols * cell, rows * cell
    bottom = (_label_width(key_labels) * 0.75 if labelled else 0) + 16
    width = left + grid.cols * (panel_w + gap) + 60
    height = top + grid.rows * (panel_h + gap + 16) + bottom
    parts = [XML, f"<svg xmlns='http://www.w3.org/2000/svg' width='{width:.0f}' height='{height:.0f}' "
             f"viewBox='0 0 {width:.0f} {height:.0f}'>", f"<defs>{HATCH}</defs>",
             "<rect width='100%' height='100%' fill='white'/>",
             f"<text x='{left}' y='20' font-size='14' {FONT}>{html.escape(_plain(title))}</text>"]
    for index, matrix in enumerate(grid.matrices):
        row, col = divmod(index, grid.cols)
        x, y = left + col * (panel_w + gap), top + row * (panel_h + gap + 16) + 14
        off = bool(grid.off) and grid.off[index]  # a switched-off head: "off" in its title, crossed out
        colour, mark = (" fill='#c62828'", " · off") if off else ("", "")
        parts.append(f"<text x='{x + panel_w / 2:.2f}' y='{y - 4:.2f}' font-size='11' text-anchor='middle' {FONT}"
                     f"{colour}>{html.escape(grid.row_names[row])} · {html.escape(grid.col_names[col])}{mark}</text>")
        parts += _cells(matrix, None, levels=levels, lut=lut, x=x, y=y, cell=cell)
        if off:
            parts.append(f"<path d='M{x:.2f},{y:.2f} L{x + panel_w:.2f},{y + panel_h:.2f} M{x:.2f},{y + panel_h:.2f} "
                         f"L{x + panel_w:.2f},{y:.2f}' stroke='#e53935' stroke-width='2' fill='none'/>")
        if labelled and col == 0:
            for r in range(rows):
                parts.append(f"<text x='{x - 4}' y='{y + (r + 0.5) * cell + 3.5:.2f}' font-size='9' text-anchor='end' "
                             f"{FONT}>{html.escape(query_labels[r])}</text>")
        if labelled and row == grid.rows - 1:
            for c in range(cols):
                cx, cy = x + (c + 0.5) * cell, y + panel_h + 5
                parts.append(f"<text transform='translate({cx:.2f},{cy:.2f}) rotate(-45)' font-size='9' "
                             f"text-anchor='end' {FONT}>{html.escape(key_labels[c])}</text>")
    parts += _colour_bar(levels, lut, x=width - 48, y=top + 14, height=panel_h)
    parts.append("</svg>")
    return "\n".join(parts)
