"""``attnviz render -c CKPT TEXT --kind {enc_self,dec_self,cross} [--layer L] [--head H|mean|max|rollout|all] -o OUT.png|.svg``

Draws the same heatmap as the app's focus view (``--head all``: every head of the layer, as the head
grid) without a window, as the window exports it: a white figure with the sentence, the model and its output
as a caption. PNGs are written at 2× for print.

``attnviz render --snapshots FOLDER TEXT --kind K ... -o FRAMES/`` draws the same view for every snapshot of
a series (``attnviz train --snapshots N``), in step order: ``FRAMES/step-000250.png`` … (or ``.svg`` with
``--format svg``), for slides.
``--compare B``: the same input (and mode, target, limits) decoded by checkpoint B too, drawn as the window's
comparison: model A | model B | B − A (the difference only where both have the same tokens; forced decoding
with ``--target`` makes the outputs agree).
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from models.aggregate import AGGREGATES
from models.errors import InputError
from models.files import check_output_folder
from models.trace import KINDS

from ..export import IMAGE_SUFFIXES, check_output
from .common import add_decoding_options, add_model_options, checkpoint_path, decode_one

NAME = "render"


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(NAME, help="draw one heatmap (or all heads of a layer) to PNG or SVG",
                                   description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_model_options(parser, required=False)
    parser.add_argument("--snapshots", metavar="FOLDER",
                        help="a snapshot series (train --snapshots N): one frame per snapshot, -o is a folder")
    parser.add_argument("--format", choices=("png", "svg"), default="png", help="the frames' format (--snapshots)")
    add_decoding_options(parser)
    parser.add_argument("text", help="the source sentence")
    parser.add_argument("--target", help="force decoding to this target text")
    parser.add_argument("--kind", required=True, choices=KINDS)
    parser.add_argument("--layer", type=int, default=0)
    parser.add_argument("--head", default="0", help="a head number, mean, max, rollout, or all (default 0)")
    parser.add_argument("--colormap", default="viridis")
    parser.add_argument("--no-masks", action="store_true", help="do not hatch masked cells")
    parser.add_argument("--size", default="900x700", help="WIDTHxHEIGHT in points (default 900x700)")
    parser.add_argument("--compare", metavar="CKPT", type=checkpoint_path,
                        help="a second checkpoint (or demo): draw A | B | B − A at the same selection")
    parser.add_argument("-o", "--output", required=True, help=".png or .svg")


def parse_head(text: str) -> int | str:
    if text.isdigit():
        return int(text)
    if text in AGGREGATES or text == "all":
        return text
    raise InputError(f"--head must be a head number, {', '.join(AGGREGATES)} or all; got {text!r}")


def parse_size(text: str) -> tuple[int, int]:
    width, _, height = text.partition("x")
    if not (width.isdigit() and height.isdigit()) or int(width) < 100 or int(height) < 100:
        raise InputError(f"--size must be WIDTHxHEIGHT, each at least 100; got {text!r}")
    return int(width), int(height)


def check_selection(trace, kind: str, layer: int, head: int | str) -> None:
    if kind not in trace.attention:
        have = ", ".join(trace.kinds) or "no attention at all"
        raise InputError(f"this model has no {kind} attention (it has {have})")
    if not 0 <= layer < trace.layers(kind):
        raise InputError(f"--layer must be below {trace.layers(kind)} for {kind}; got {layer}")
    if isinstance(head, int) and not 0 <= head < trace.heads(kind):
        raise InputError(f"--head must be below {trace.heads(kind)} for {kind}; got {head}")


def run(args: argparse.Namespace) -> int:
    if (args.checkpoint is None) == (args.snapshots is None):
        raise InputError("give either -c CHECKPOINT or --snapshots FOLDER")
    head, size = parse_head(args.head), parse_size(args.size)
    if args.snapshots is not None:
        return render_series(args, head, size)
    output = check_output(args.output, IMAGE_SUFFIXES)
    result = decode_one(args)
    if args.compare is not None:
        return run_compare(args, result, head=head, size=size, output=output)
    check_selection(result.trace, args.kind, args.layer, head=head)
    draw(args, result, head=head, size=size, output=output)
    print(output)
    return 0


def draw(args: argparse.Namespace, result, head: int | str, size: tuple[int, int], output) -> None:
    if "DISPLAY" not in os.environ and "WAYLAND_DISPLAY" not in os.environ:
        os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from ..rendering import render_trace  # Qt loads only now

    render_trace(result.trace, args.kind, args.layer, head=head, output=output, size=size, colormap=args.colormap,
                 masks=not args.no_masks, caption=caption(args.text, (model_name(args.checkpoint), result)))


def model_name(checkpoint: str) -> str:
    return Path(checkpoint).stem


def caption(text: str, *outputs):
    """The figure's caption: the input, then each ``(model name, result)``'s output."""
    from ..figures import Caption

    return Caption(text, tuple((name, result.text) for name, result in outputs))


def render_series(args: argparse.Namespace, head: int | str, size: tuple[int, int]) -> int:
    """One frame per snapshot of the series, the same sentence and view each, named by step."""
    from models.snapshots import load_series

    series = load_series(args.snapshots)  # every file checked before the first frame is drawn
    frames = Path(args.output)
    if frames.exists() and not frames.is_dir():
        raise InputError(f"{frames}: with --snapshots, -o names a folder for the frames")
    frames.mkdir(parents=True, exist_ok=True)
    for snapshot in series.snapshots:
        args.checkpoint = str(snapshot.path)
        result = decode_one(args)
        check_selection(result.trace, args.kind, args.layer, head=head)
        output = check_output_folder(frames / f"step-{snapshot.step:06d}.{args.format}")
        draw(args, result, head=head, size=size, output=output)
        print(f"{output}  step {snapshot.step}: {result.text}")
    return 0


def run_compare(args: argparse.Namespace, result, *, head: int | str, size: tuple[int, int], output) -> int:
    """A | B | B − A; a kind, layer or head one model lacks is said in its pane (the other must have it)."""
    if head == "all":
        raise InputError("--head all cannot be compared; choose a head number or an aggregate")
    trace = result.trace
    other_result = decode_one(argparse.Namespace(**{**vars(args), "checkpoint": args.compare, "ablate": []}))
    other = other_result.trace
    missing = [error for error in (_selection_error(trace, args, head), _selection_error(other, args, head)) if error]
    if len(missing) == 2:
        raise InputError(f"neither model can show this: {missing[0]}")
    if "DISPLAY" not in os.environ and "WAYLAND_DISPLAY" not in os.environ:
        os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from ..rendering import render_compare  # Qt loads only now

    names = (model_name(args.checkpoint), model_name(args.compare))
    render_compare(trace, other, kind=args.kind, layer=args.layer, head=head, output=output, size=size,
                   colormap=args.colormap, masks=not args.no_masks, names=names,
                   caption=caption(args.text, (names[0], result), (names[1], other_result)))
    print(output)
    return 0


def _selection_error(trace, args: argparse.Namespace, head: int | str) -> str:
    try:
        check_selection(trace, args.kind, args.layer, head=head)
    except InputError as error:
        return str(error)
    return ""
