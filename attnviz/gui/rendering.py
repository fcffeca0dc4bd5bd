"""Headless drawing of traces as the window exports them (used by ``attnviz render``).

What is drawn comes from the same view-model as the window's (attnviz/state/viewmodel.py) and the same figures
as its image exports (attnviz/state/figures.py), so a rendered file is what the window would export. No widget is
shown: an offscreen platform warns about every window it is asked to show.
"""

from __future__ import annotations

import sys
from pathlib import Path

from models.errors import InputError
from models.storage.files import WriteError, write_bytes, write_text
from models.trace.records import AttentionTrace

from ..state import compare_view, viewmodel
from ..state.contributions import contribution_grid, contribution_heatmap, lacking, shown_unit
from ..state.export import IMAGE_SUFFIXES, check_output
from ..state.figures import Caption, compare_svg, heads_svg, heatmap_svg, without_masks
from ..state.session import Selection


def _application():
    from PySide6.QtWidgets import QApplication

    return QApplication.instance() or QApplication(sys.argv[:1])


def render_trace(trace: AttentionTrace, kind: str, layer: int, head: int | str, output: Path, *,
                 size: tuple[int, int] = (900, 700), colormap: str = "viridis", masks: bool = True,
                 caption: Caption | None = None, contribution: tuple | None = None,
                 kv_groups: tuple[int, ...] = ()) -> Path:
    """Draw one heatmap (``head`` a number or an aggregate) or, for ``head == "all"``, the layer's heads; a
    PNG of one heatmap is ``size`` points at 2×, the figure as large as fits. ``contribution``: ``(maps,
    choice)`` or ``(maps, choice, the contrast token's label)``, a contributions method's maps
    (attnviz/state/contributions.py) shown instead of the weights; ``kv_groups``: a decoder-only model's key/value
    head of each query head (the heads named and laid out in whole groups, as the window's export does)."""
    _application()  # text in a figure needs Qt's fonts
    from .views.style import lookup_table

    selection = Selection(kind=kind, layer=layer, head=0 if head == "all" else head)
    lut = lookup_table(colormap)
    if head == "all":
        figure = heads_figure(trace, selection, lut=lut, mask=trace.masks[kind] if masks else None, caption=caption,
                              contribution=contribution, kv_groups=kv_groups)
        return save_figure(figure, output)
    state = viewmodel.heatmap(trace, selection)
    if contribution is not None:
        state = contribution_heatmap(trace, contribution[0], selection, choice=contribution[1],
                                     contrast=contribution[2] if len(contribution) > 2 else "")
        if isinstance(state, str):
            raise InputError(state)
    if not masks:
        state = without_masks(state)
    lut = lookup_table(state.colormap) if state.colormap else lut  # a signed map's diverging colormap
    return save_figure(heatmap_svg(state, lut, caption=caption), output, size=size)


def heads_figure(trace: AttentionTrace, selection: Selection, *, lut, mask=None, caption: Caption | None = None,
                 contribution: tuple | None = None, kv_groups: tuple[int, ...] = ()) -> str:
    """Every head of the selected layer as a figure: the weights through ``lut``, or ``contribution`` ``(maps,
    choice, …)``'s grid (as the window's "Heads of this layer" draws it: a signed method on the diverging colormap,
    ± the largest magnitude across the heads, its colour bar in the method's unit)."""
    from .views.style import lookup_table

    kind, layer = selection.kind, selection.layer
    grid = viewmodel.head_grid(trace, selection, kv_groups=kv_groups)
    title, unit = viewmodel.heads_title(kind, layer), ""
    if contribution is not None:
        maps, choice = contribution[0], contribution[1]
        grid = contribution_grid(trace, maps, selection, choice=choice, whole_kind=False)
        if grid is None:
            raise InputError(lacking(trace, maps, kind, choice=choice))
        title += f" · <b>{choice.label}</b>"
        unit = shown_unit(choice, maps) if choice.bounded or choice.signed else ""  # else: shares of the largest
    lut = lookup_table(grid.colormap) if grid.colormap else lut
    return heads_svg(grid, title, query_labels=trace.query_tokens(kind), key_labels=trace.key_tokens(kind), lut=lut,
                     mask=mask, caption=caption, unit=unit)


def render_compare(a: AttentionTrace, b: AttentionTrace, kind: str, *, layer: int, head: int | str, output: Path,
                   size: tuple[int, int] = (900, 700), colormap: str = "viridis", masks: bool = True,
                   names: tuple[str, str] = ("A", "B"), caption: Caption | None = None) -> Path:
    """Model A | model B | B − A at one selection (``size`` is one pane's), as the window's comparison
    exports it, the panes titled with the models' ``names``."""
    _application()
    from .views.style import lookup_table

    state = compare_view.compare_state(a, b, Selection(kind=kind, layer=layer, head=head))
    if not masks:
        state = without_masks(state)
    figure = compare_svg(state, names, luts=(lookup_table(colormap), lookup_table(compare_view.DIVERGING_COLORMAP)),
                         caption=caption)
    # Three panes side by side are far wider than tall: as large as fits three ``size`` boxes, cut to the figure
    # (in the boxes themselves it was 39 % white margin).
    return save_figure(figure, output, size=(size[0] * 3, size[1]), tight=True)



def render_figure(svg: str, output: Path) -> Path:
    """A figure from attnviz/state/figures.py written to ``output``: the SVG as it is, or a PNG at 2× drawn by Qt."""
    _application()
    return save_figure(svg, output)


def _save_png(image, path: Path) -> None:
    """Encode in memory, then write atomically: a disk error is then ours to report, in one line."""
    from PySide6.QtCore import QBuffer, QByteArray, QIODevice

    data = QByteArray()
    buffer = QBuffer(data)
    buffer.open(QIODevice.OpenModeFlag.WriteOnly)
    if not image.save(buffer, "PNG"):
        raise WriteError(f"{path}: could not encode the image")
    write_bytes(path, bytes(data.data()))


def figure_image(svg: str, scale: float = 2.0, size: tuple[int, int] | None = None, *, tight: bool = False):
    """A QImage of a figure from attnviz/state/figures.py on white: its own size at ``scale``×, or ``size`` points
    at ``scale``× with the figure as large as fits, centred, its proportions kept (``tight``: the image cut to the
    figure, no white band beside it)."""
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
    if tight:
        image = QImage(QSize(round(drawn_width), round(drawn_height)), QImage.Format.Format_ARGB32)
        image.fill(QColor("white"))
    painter = QPainter(image)
    painter.setRenderHint(QPainter.RenderHint.Antialiasing)
    renderer.render(painter, QRectF((image.width() - drawn_width) / 2, (image.height() - drawn_height) / 2,
                                    drawn_width, drawn_height))
    painter.end()
    return image


def save_figure(svg: str, path: str | Path, scale: float = 2.0, size: tuple[int, int] | None = None, *,
                tight: bool = False) -> Path:
    """A figure from attnviz/state/figures.py: the SVG text itself, or a PNG of it (:func:`figure_image`)."""
    path = check_output(path, IMAGE_SUFFIXES)
    if path.suffix.lower() == ".svg":
        return write_text(path, svg)
    _save_png(figure_image(svg, scale, size=size, tight=tight), path)
    return path
