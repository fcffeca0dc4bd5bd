"""Writing what the app shows: NPZ (the layout the README documents) and CSV need no Qt; PNG and SVG render widgets.

Qt is imported inside the image functions only, so the headless ``attnviz export`` can use this module.
"""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np

from models.errors import InputError
from models.trace import AttentionTrace, DecodeResult

IMAGE_SUFFIXES = (".png", ".svg")


def trace_arrays(trace: AttentionTrace) -> dict[str, np.ndarray]:
    """``src_tokens``, ``tgt_tokens``, ``{kind}_L{layer}`` ``[heads, q, k]`` float32, ``{kind}_mask`` bool."""
    arrays = {"src_tokens": np.array(trace.src_tokens, dtype=str), "tgt_tokens": np.array(trace.tgt_tokens, dtype=str)}
    for kind in trace.kinds:
        for layer, weights in enumerate(trace.attention[kind]):
            arrays[f"{kind}_L{layer}"] = weights.astype(np.float32)
        arrays[f"{kind}_mask"] = trace.masks[kind].astype(bool)
    return arrays


def write_npz(path: str | Path, result: DecodeResult) -> Path:
    """The trace plus ``output_tokens``, ``translation`` and ``score``."""
    path = Path(path)
    arrays = trace_arrays(result.trace)
    arrays.update(output_tokens=np.array(result.tokens, dtype=str), translation=np.array(result.text),
                  score=np.array(result.score))
    with open(path, "wb") as handle:  # np.savez would append .npz to a name that lacks it
        np.savez_compressed(handle, **arrays)
    return path


def write_csv(path: str | Path, matrix: np.ndarray, query_tokens: list[str], key_tokens: list[str]) -> Path:
    """One heatmap: a header row of key tokens, then one row per query token."""
    path = Path(path)
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["query \\ key", *key_tokens])
        for token, row in zip(query_tokens, matrix):
            writer.writerow([token, *(f"{value:.6g}" for value in row)])
    return path


def check_output(path: str | Path, suffixes: tuple[str, ...]) -> Path:
    path = Path(path)
    if path.suffix.lower() not in suffixes:
        raise InputError(f"{path}: the file name must end in {' or '.join(suffixes)}")
    if not path.parent.exists():
        raise InputError(f"{path}: the folder {path.parent} does not exist")
    return path


def save_widget_image(widget, path: str | Path, scale: float = 2.0) -> Path:
    """PNG at ``scale``× the widget's size (for papers), or SVG (vector) through QSvgGenerator.

    pyqtgraph's own SVG exporter breaks on closed paths (pyqtgraph 0.14), so the widget renders itself.
    """
    from PySide6.QtCore import QPoint, QRect, QSize
    from PySide6.QtGui import QImage, QPainter
    from PySide6.QtSvg import QSvgGenerator
    from PySide6.QtWidgets import QWidget

    path = check_output(path, IMAGE_SUFFIXES)
    size = widget.size()
    if path.suffix.lower() == ".svg":
        generator = QSvgGenerator()
        generator.setFileName(str(path))
        generator.setSize(size)
        generator.setViewBox(QRect(0, 0, size.width(), size.height()))
        generator.setTitle("attnviz")
        painter = QPainter(generator)
        QWidget.render(widget, painter, QPoint(0, 0))  # QWidget's: a QGraphicsView's own render() draws only its scene
        painter.end()
        return path
    image = QImage(QSize(int(size.width() * scale), int(size.height() * scale)), QImage.Format.Format_ARGB32)
    image.fill(widget.palette().window().color())
    painter = QPainter(image)
    painter.setRenderHint(QPainter.RenderHint.Antialiasing)
    painter.scale(scale, scale)
    QWidget.render(widget, painter, QPoint(0, 0))
    painter.end()
    if not image.save(str(path)):
        raise InputError(f"{path}: could not write the image")
    return path


def save_figure(svg: str, path: str | Path, scale: float = 2.0) -> Path:
    """A figure from attnviz/figures.py: the SVG text itself, or a PNG rendered from it at ``scale``×."""
    path = check_output(path, IMAGE_SUFFIXES)
    if path.suffix.lower() == ".svg":
        path.write_text(svg, encoding="utf-8")
        return path
    from PySide6.QtCore import QByteArray
    from PySide6.QtGui import QColor, QImage, QPainter
    from PySide6.QtSvg import QSvgRenderer

    renderer = QSvgRenderer(QByteArray(svg.encode("utf-8")))
    size = renderer.defaultSize() * scale
    image = QImage(size, QImage.Format.Format_ARGB32)
    image.fill(QColor("white"))
    painter = QPainter(image)
    renderer.render(painter)
    painter.end()
    if not image.save(str(path)):
        raise InputError(f"{path}: could not write the image")
    return path
