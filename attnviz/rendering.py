"""Headless drawing of traces with the app's own views (used by ``attnviz render``)."""

from __future__ import annotations

import sys
from pathlib import Path

from models.aggregate import aggregate
from models.trace import AttentionTrace

from .export import save_widget_image
from .session import AXIS_NAMES, KIND_LABELS


def _application():
    from PySide6.QtWidgets import QApplication

    return QApplication.instance() or QApplication(sys.argv[:1])


def render_trace(trace: AttentionTrace, kind: str, layer: int, head: int | str, output: Path, *,
                 size: tuple[int, int] = (900, 700), colormap: str = "viridis", masks: bool = True) -> Path:
    """Draw one heatmap (``head`` a number or an aggregate) or, for ``head == "all"``, the layer's heads."""
    application = _application()
    from .app import follow_palette
    from .views.heatmap import HeatmapView
    from .views.thumbnails import ThumbnailGrid

    follow_palette()
    if head == "all":
        heads = trace.heads(kind)
        widget = ThumbnailGrid()
        widget.build(1, heads, [f"L{layer}"], [f"H{index}" for index in range(heads)])
        widget.set_images(list(trace.attention[kind][layer]))
    else:
        widget = HeatmapView()
        matrix = trace.attention[kind][layer][head] if isinstance(head, int) else aggregate(trace, kind, layer, head)
        name = f"head {head}" if isinstance(head, int) else head
        widget.show_matrix(matrix, trace.masks[kind], trace.query_tokens(kind), trace.key_tokens(kind),
                           f"<b>{KIND_LABELS[kind]}</b> · layer {layer} · {name}", AXIS_NAMES[kind])
        widget.set_masks_visible(masks)
        widget.readout.hide()
    widget.set_colormap(colormap)
    widget.resize(*size)
    widget.show()  # lay out once so every item has its final geometry before painting
    application.processEvents()
    path = save_widget_image(widget, output)
    widget.close()
    widget.deleteLater()
    application.processEvents()
    return path
