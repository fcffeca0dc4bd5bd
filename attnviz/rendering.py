"""Headless drawing of traces with the app's own views (used by ``attnviz render``).

What is drawn comes from the same view-model as the window's (attnviz/viewmodel.py), so a rendered file
shows exactly what the window would.
"""

from __future__ import annotations

import sys
from pathlib import Path

from models.trace import AttentionTrace

from . import viewmodel
from .export import save_widget_image
from .session import Selection


def _application():
    from PySide6.QtWidgets import QApplication

    return QApplication.instance() or QApplication(sys.argv[:1])


def render_trace(trace: AttentionTrace, kind: str, layer: int, head: int | str, output: Path, *,
                 size: tuple[int, int] = (900, 700), colormap: str = "viridis", masks: bool = True) -> Path:
    """Draw one heatmap (``head`` a number or an aggregate) or, for ``head == "all"``, the layer's heads."""
    application = _application()
    from .views.heatmap import HeatmapView
    from .views.style import follow_palette
    from .views.thumbnails import ThumbnailGrid

    follow_palette()
    if head == "all":
        widget = ThumbnailGrid()
        widget.show_grid(viewmodel.head_grid(trace, Selection(kind=kind, layer=layer, head=0)))
        widget.select(None, None)  # a figure of every head outlines none
    else:
        widget = HeatmapView()
        state = viewmodel.heatmap(trace, Selection(kind=kind, layer=layer, head=head))
        widget.show_matrix(state.matrix, state.mask, query_tokens=state.query_labels, key_tokens=state.key_labels,
                           title=state.title, axis_names=state.axis_names)
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
