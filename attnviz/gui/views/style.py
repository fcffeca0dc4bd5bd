"""Colours and colormaps shared by the views."""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg

# Perceptually uniform; viridis and cividis are also colour-blind safe (cividis most of all).
COLORMAPS = ("viridis", "cividis", "magma", "inferno", "CET-L1")
DEFAULT_COLORMAP = "viridis"
MASK_RGBA = (235, 235, 235)  # hatching drawn over masked cells: brighter than any low weight
HIGHLIGHT = "#ff5a36"  # the current decoding step, the chosen token: far from every colormap above


def lookup_table(name: str) -> np.ndarray:
    return pg.colormap.get(name).getLookupTable(0.0, 1.0, 256)


def hatch(mask: np.ndarray, max_pixels: int = 2048) -> np.ndarray:
    """An RGBA image ``[q·f, k·f, 4]`` with diagonal stripes over cells where ``mask`` is False.

    ``f`` (cells' size in pixels) shrinks on long sequences so the overlay stays a few MB.
    """
    rows, cols = mask.shape
    factor = int(max(1, min(8, max_pixels // max(rows, cols, 1))))
    blocked = np.repeat(np.repeat(~mask, factor, axis=0), factor, axis=1)
    period = max(factor, 2)  # the stripes' phase per row and column as bytes: no [q·f, k·f] of int64 indices
    y = (np.arange(blocked.shape[0]) % period).astype(np.ubyte)[:, None]
    x = (np.arange(blocked.shape[1]) % period).astype(np.ubyte)[None, :]
    stripe = ((x + y) % period) < max(1, factor // 3)
    image = np.zeros(blocked.shape + (4,), dtype=np.ubyte)
    image[..., :3] = MASK_RGBA
    image[..., 3] = np.where(stripe, np.ubyte(230), np.ubyte(90)) * blocked
    return image


def follow_palette() -> None:
    """Plots take the system palette's colours, so they follow light and dark themes."""
    from PySide6.QtGui import QPalette
    from PySide6.QtWidgets import QApplication

    palette = QApplication.palette()
    pg.setConfigOptions(background=palette.color(QPalette.ColorRole.Base),
                        foreground=palette.color(QPalette.ColorRole.Text), antialias=True)
