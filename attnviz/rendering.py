"""Headless drawing of traces with the app's own views (used by ``attnviz render``).

What is drawn comes from the same view-model as the window's (attnviz/viewmodel.py), so a rendered file
shows exactly what the window would.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

from models.trace import AttentionTrace

from . import viewmodel
from .export import save_figure, save_widget_image
from .figures import heads_svg, heatmap_svg
from .session import Selection


def _application():
    from PySide6.QtWidgets import QApplication

    return QApplication.instance() or QApplication(sys.argv[:1])


def render_trace(trace: AttentionTrace, kind: str, layer: int, head: int | str, output: Path, *,
                 size: tuple[int, int] = (900, 700), colormap: str = "viridis", masks: bool = True) -> Path:
    """Draw one heatmap (``head`` a number or an aggregate) or, for ``head == "all"``, the layer's heads.

    Every head of a layer, and any SVG, is a figure from attnviz/figures.py (vector cells, labels as text);
    a PNG of one heatmap is the window's own focus view drawn offscreen.
    """
    _application()
    from .views.style import follow_palette, lookup_table

    follow_palette()
    selection = Selection(kind=kind, layer=layer, head=0 if head == "all" else head)
    lut = lookup_table(colormap)
    if head == "all":
        figure = heads_svg(viewmodel.head_grid(trace, selection), viewmodel.heads_title(kind, layer),
                           query_labels=trace.query_tokens(kind), key_labels=trace.key_tokens(kind), lut=lut)
        return save_figure(figure, output)
    state = viewmodel.heatmap(trace, selection)
    if not masks:
        state = dataclasses.replace(state, mask=None)
    if Path(output).suffix.lower() == ".svg":
        return save_figure(heatmap_svg(state, lut), output)
    return _render_widget(state, output, size=size, colormap=colormap)


def render_compare(a: AttentionTrace, b: AttentionTrace, kind: str, layer: int, head: int | str, output: Path, *,
                   size: tuple[int, int] = (900, 700), colormap: str = "viridis", masks: bool = True) -> Path:
    """Model A | model B | B − A at one selection (``size`` is one pane's), as the window's comparison shows it."""
    application = _application()
    from .views.compare import CompareView
    from .views.style import follow_palette

    follow_palette()
    state = viewmodel.compare_state(a, b, Selection(kind=kind, layer=layer, head=head))
    widget = CompareView()
    widget.show_compare(state)
    widget.set_colormap(colormap)
    widget.set_masks_visible(masks)
    for pane in (widget.a, widget.b, widget.diff):
        pane.readout.hide()
    widget.resize(size[0] * 3, size[1])
    widget.show()
    application.processEvents()
    path = save_widget_image(widget, output)
    widget.close()
    widget.deleteLater()
    application.processEvents()
    return path


def _render_widget(state: viewmodel.HeatmapState, output: Path, *, size: tuple[int, int], colormap: str) -> Path:
    application = _application()
    from .views.heatmap import HeatmapView

    widget = HeatmapView()
    widget.show_matrix(state.matrix, state.mask, query_tokens=state.query_labels, key_tokens=state.key_labels,
                       title=state.title, axis_names=state.axis_names)
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
