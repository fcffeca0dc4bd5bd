"""Writing what the app shows, every file atomically (models/files.py): NPZ (the layout the README documents) and CSV need no Qt; PNG and SVG are figures (attnviz/figures.py).

Qt is imported inside the image functions only, so the headless ``attnviz export`` can use this module.
"""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np

from models.errors import InputError
from models.files import WriteError, atomic_output, check_output_folder, write_bytes, write_text
from models.trace import AttentionTrace, DecodeResult

IMAGE_SUFFIXES = (".png", ".svg")


def trace_arrays(trace: AttentionTrace) -> dict[str, np.ndarray]:
    """``src_tokens``, ``tgt_tokens``, ``{kind}_L{layer}`` ``[heads, q, k]`` float32, ``{kind}_mask`` bool, and
    ``ablated``: the heads switched off in the run as ``KIND:LAYER:HEAD`` strings (empty when none was)."""
    arrays = {"src_tokens": np.array(trace.src_tokens, dtype=str), "tgt_tokens": np.array(trace.tgt_tokens, dtype=str),
              "ablated": np.array([f"{kind}:{layer}:{head}" for kind, layer, head in trace.ablated], dtype=str)}
    for kind in trace.kinds:
        for layer, weights in enumerate(trace.attention[kind]):
            arrays[f"{kind}_L{layer}"] = weights.astype(np.float32)
        arrays[f"{kind}_mask"] = trace.masks[kind].astype(bool)
    return arrays


def write_npz(path: str | Path, result: DecodeResult, extra: dict[str, np.ndarray] | None = None) -> Path:
    """The trace plus ``output_tokens``, ``translation``, ``score`` and the ``extra`` arrays (contributions)."""
    arrays = {**trace_arrays(result.trace), **(extra or {})}
    arrays.update(output_tokens=np.array(result.tokens, dtype=str), translation=np.array(result.text),
                  score=np.array(result.score))
    with atomic_output(path) as temporary, open(temporary, "wb") as handle:  # np.savez would append .npz
        np.savez_compressed(handle, **arrays)
    return Path(path)


def write_csv(path: str | Path, matrix: np.ndarray, query_tokens: list[str], key_tokens: list[str]) -> Path:
    """One heatmap: a header row of key tokens, then one row per query token."""
    with atomic_output(path) as temporary, open(temporary, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["query \\ key", *key_tokens])
        for token, row in zip(query_tokens, matrix):
            writer.writerow([token, *(f"{value:.6g}" for value in row)])
    return Path(path)


def check_output(path: str | Path, suffixes: tuple[str, ...]) -> Path:
    path = Path(path)
    if path.suffix.lower() not in suffixes:
        raise InputError(f"{path}: the file name must end in {' or '.join(suffixes)}")
    return check_output_folder(path)


def _save_png(image, path: Path) -> None:
    """Encode in memory, then write atomically: a disk error is then ours to report, in one line."""
    from PySide6.QtCore import QBuffer, QByteArray, QIODevice

    data = QByteArray()
    buffer = QBuffer(data)
    buffer.open(QIODevice.OpenModeFlag.WriteOnly)
    if not image.save(buffer, "PNG"):
        raise WriteError(f"{path}: could not encode the image")
    write_bytes(path, bytes(data.data()))


def figure_image(svg: str, scale: float = 2.0, size: tuple[int, int] | None = None):
    """A QImage of a figure from attnviz/figures.py on white: its own size at ``scale``×, or ``size`` points
    at ``scale``× with the figure as large as fits, centred, its proportions kept."""
    from PySide6.QtCore import QByteArray, QRectF, QSize
    from PySide6.QtGui import QColor, QImage, QPainter
    from PySide6.QtSvg import QSvgRenderer

    renderer = QSvgRenderer(QByteArray(svg.encode("utf-8")))
    natural = renderer.defaultSize()
    width, height = size if size is not None else (natural.width(), natural.height())
    image = QImage(QSize(round(width * scale), round(height * scale)), QImage.Format.Format_ARGB32)
    image.fill(QColor("white"))
    fit = min(image.width() / natural.width(), image.height() / natural.height())
    drawn_width, drawn_height = natural.width() * fit, natural.height() * fit
    painter = QPainter(image)
    painter.setRenderHint(QPainter.RenderHint.Antialiasing)
    renderer.render(painter, QRectF((image.width() - drawn_width) / 2, (image.height() - drawn_height) / 2,
                                    drawn_width, drawn_height))
    painter.end()
    return image


def save_figure(svg: str, path: str | Path, scale: float = 2.0, size: tuple[int, int] | None = None) -> Path:
    """A figure from attnviz/figures.py: the SVG text itself, or a PNG of it (:func:`figure_image`)."""
    path = check_output(path, IMAGE_SUFFIXES)
    if path.suffix.lower() == ".svg":
        return write_text(path, svg)
    _save_png(figure_image(svg, scale, size=size), path)
    return path
