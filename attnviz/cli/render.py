"""attnviz render -c CKPT TEXT --kind {enc_self,dec_self,cross} [--layer L] [--head H|mean|max|rollout|all]
[--show METHOD] -o OUT.png|.svg

Draws the same heatmap as the app's focus view (--head all: every head of the layer, as the head grid)
without a window, as the window exports it: a white figure with the sentence, the model and its output as a
caption. PNGs are written at 2× for print.

attnviz render --snapshots FOLDER TEXT --kind K ... -o FRAMES/ draws the same view for every snapshot of a
series (attnviz train --snapshots N), in step order: FRAMES/step-000250.png … (or .svg with
--frame-format svg), for slides.
--compare B: the same input (and mode, target, limits) decoded by checkpoint B too, drawn as the window's
comparison: model A | model B | B − A (the difference only where both have the same tokens; forced decoding
with --target makes the outputs agree).
--show METHOD: a contributions method's map instead of the weights (value_norms, alti, value_zeroing,
input_x_gradient, integrated_gradients, alti_logit: models/analysis/methods.py), titled with the method; with
--head all every head's, as the window's head grid draws them (signed ones on the diverging colormap).
--contrast TOKEN [--contrast-step N]: the gradient methods and ALTI-Logit explain logit(y) - logit(TOKEN) at
every step (or step N alone), why the output token and not TOKEN; the title says so.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from models.analysis.catalogue import CONTRIBUTION_NAMES, WEIGHTS
from models.trace.aggregate import AGGREGATES
from models.errors import InputError
from models.storage.files import check_output_folder
from models.trace.records import KINDS

from ..state.export import IMAGE_SUFFIXES, check_output
from .common import (
    add_contrast_options, add_decoding_options, add_ig_steps_option, add_model_options, add_output_option,
    checkpoint_path, contrast_for, decode_one, fill_one, model_shape, open_translator, prompt_source, say_if_rounded,
    selection_problem,
)

NAME = "render"


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(NAME, help="draw one heatmap (or all heads of a layer) to PNG or SVG",
                                   description=__doc__)
    add_model_options(parser, required=False)
    parser.add_argument("--snapshots", metavar="FOLDER",
                        help="a snapshot series (train --snapshots N): one frame per snapshot, -o is a folder "
                             "(default: one image of -c)")
    frame_format = parser.add_mutually_exclusive_group()
    frame_format.add_argument("--frame-format", choices=("png", "svg"), default="png",
                              help="the frames' format with --snapshots")
    frame_format.add_argument("--format", choices=("png", "svg"), dest="frame_format", default=argparse.SUPPRESS,
                              help=argparse.SUPPRESS)
    add_decoding_options(parser)
    parser.add_argument("text", help="the source sentence")
    parser.add_argument("--target", help="force decoding to this target text (default: the model's own output)")
    add_selection_options(parser, required=True)
    parser.add_argument("--show", default=WEIGHTS, metavar="METHOD",
                        help=f"what the map shows: {', '.join(CONTRIBUTION_NAMES[:-1])} or {CONTRIBUTION_NAMES[-1]} "
                             "(default: %(default)s)")
    add_ig_steps_option(parser)
    add_contrast_options(parser)
    parser.add_argument("--colormap", default="viridis",
                        help="the colour map: viridis, cividis, magma, inferno or CET-L1")
    parser.add_argument("--no-masks", action="store_true", help="do not hatch masked cells")
    parser.add_argument("--size", default="900x700", help="WIDTHxHEIGHT in points")
    parser.add_argument("--compare", metavar="CKPT", type=checkpoint_path,
                        help="a second checkpoint (or demo): draw A | B | B − A at the same selection (default: "
                             "one model)")
    add_output_option(parser, "the image to write, .png or .svg (with --snapshots: a folder)")


def add_selection_options(parser: argparse.ArgumentParser, *, required: bool) -> None:
    """--kind, --layer and --head: which heatmap, as in the window (render draws it, export writes it as CSV)."""
    parser.add_argument("--kind", required=required, choices=KINDS,
                        help="the attention kind" + ("" if required else " (required for a .csv)"))
    parser.add_argument("--layer", type=int, default=0, help="the layer, from 0")
    parser.add_argument("--head", default="0", help="a head number from 0, mean, max, rollout, or all")


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


def check_selection(args: argparse.Namespace, head: int | str) -> None:
    """The asked heatmap exists in the model of ``args.checkpoint``: answered from its header, before any
    weight loads."""
    problem = selection_problem(model_shape(args), args.kind, args.layer, head=head)
    if problem:
        raise InputError(problem)


def run(args: argparse.Namespace) -> int:
    if (args.checkpoint is None) == (args.snapshots is None):
        raise InputError("give either -c CHECKPOINT or --snapshots FOLDER")
    head, size = parse_head(args.head), parse_size(args.size)
    if args.snapshots is not None and args.show != WEIGHTS:
        raise InputError("--show draws one heatmap of one checkpoint: not with --snapshots")
    if args.show == WEIGHTS and (args.contrast is not None or args.contrast_step is not None):
        raise InputError("--contrast explains a contribution method's map: add --show input_x_gradient, "
                         "integrated_gradients or alti_logit")
    if args.snapshots is not None:
        return render_series(args, head, size)
    output = check_output(args.output, IMAGE_SUFFIXES)
    if args.show != WEIGHTS:
        return run_contribution(args, head=head, size=size, output=output)
    if args.compare is not None:
        return run_compare(args, head=head, size=size, output=output)
    check_selection(args, head)
    translator = open_translator(args)
    # an encoder-only model's sentence is encoded and its masks filled (docs/architectures.md#encoder-only)
    result = (fill_one if set(model_shape(args)) == {"enc_self"} else decode_one)(args, translator)
    draw(args, result, head=head, size=size, output=output, kv_groups=key_value_groups(translator))
    print(output)
    return 0


def run_contribution(args: argparse.Namespace, *, head: int | str, size: tuple[int, int], output) -> int:
    """One heatmap of a contributions method (models/analysis/contributions.py) instead of the weights."""
    from models.analysis.contributions import CONTRIBUTION_METHODS, ContributionError
    from models.analysis.gradients import check_ig_steps
    from models.analysis.methods import contributions

    from ..state.contributions import show_choice

    if args.compare is not None:
        raise InputError("--show draws one model's maps: not with --compare")
    if args.show not in CONTRIBUTION_METHODS:
        raise ContributionError(f"--show must be one of {', '.join(CONTRIBUTION_METHODS)}; got {args.show!r}")
    check_selection(args, head)
    check_ig_steps(args.ig_steps)
    translator = open_translator(args)
    say_if_rounded(translator)
    result = decode_one(args, translator)
    CONTRIBUTION_METHODS[args.show].check(translator.model)
    source = prompt_source(args, translator)
    contrast = contrast_for(args, translator, len(result.token_ids))
    maps = contributions(args.show, translator.model, source.ids, output_ids=result.token_ids, ig_steps=args.ig_steps,
                         contrast=contrast)
    if maps.completeness is not None:
        print(maps.completeness_line(result.tokens), file=sys.stderr)
    choice = show_choice(CONTRIBUTION_METHODS[args.show])
    foil = "" if contrast is None else args.contrast
    draw(args, result, head=head, size=size, output=output, contribution=(maps, choice, foil))
    print(output)
    return 0


def draw(args: argparse.Namespace, result, head: int | str, size: tuple[int, int], output, *,
         contribution: tuple | None = None, kv_groups: tuple[int, ...] = ()) -> None:
    """``result``'s trace drawn as the window exports it (``kv_groups``: a decoder-only model's key/value head of
    each query head, which names and groups the heads of ``--head all`` as in the window)."""
    if "DISPLAY" not in os.environ and "WAYLAND_DISPLAY" not in os.environ:
        os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from ..gui.rendering import render_trace

    render_trace(result.trace, args.kind, args.layer, head=head, output=output, size=size, colormap=args.colormap,
                 masks=not args.no_masks, caption=caption(args.text, (model_name(args.checkpoint), result)),
                 contribution=contribution, kv_groups=kv_groups)


def key_value_groups(translator) -> tuple[int, ...]:
    """The open model's key/value head of each query head, as the window holds it (empty: not decoder-only)."""
    from ..gui.work import decoder_only_shape

    return decoder_only_shape(translator.model).get("kv_groups", ())


def model_name(checkpoint: str) -> str:
    return Path(checkpoint).stem


def caption(text: str, *outputs):
    """The figure's caption: the input, then each ``(model name, result)``'s output."""
    from ..state.figures import Caption

    return Caption(text, tuple((name, result.text) for name, result in outputs))


def render_series(args: argparse.Namespace, head: int | str, size: tuple[int, int]) -> int:
    """One frame per snapshot of the series, the same sentence and view each, named by step."""

    from models.storage.snapshots import load_series

    series = load_series(args.snapshots)  # every file checked before the first frame is drawn
    frames = Path(args.output)
    if frames.exists() and not frames.is_dir():
        raise InputError(f"{frames}: with --snapshots, -o names a folder for the frames")
    args.checkpoint = str(series.snapshots[0].path)  # a series is one model: its first file's header says it all
    check_selection(args, head)
    frames.mkdir(parents=True, exist_ok=True)
    for snapshot in series.snapshots:
        args.checkpoint = str(snapshot.path)
        translator = open_translator(args)
        result = decode_one(args, translator)
        output = check_output_folder(frames / f"step-{snapshot.step:06d}.{args.frame_format}")
        draw(args, result, head=head, size=size, output=output, kv_groups=key_value_groups(translator))
        print(f"{output}  step {snapshot.step}: {result.text}")
    return 0


def run_compare(args: argparse.Namespace, *, head: int | str, size: tuple[int, int], output) -> int:
    """A | B | B − A; a kind, layer or head one model lacks is said in its pane (the other must have it)."""
    if head == "all":
        raise InputError("--head all cannot be compared; choose a head number or an aggregate")
    partner = argparse.Namespace(**{**vars(args), "checkpoint": args.compare, "ablate": []})
    problems = [selection_problem(model_shape(model), args.kind, args.layer, head=head) for model in (args, partner)]
    missing = [problem for problem in problems if problem]
    if len(missing) == 2:
        raise InputError(f"neither model can show this: {missing[0]}")
    result = decode_one(args)
    try:
        other_result = decode_one(partner)
    except InputError as failure:  # what model B cannot read (no chat template, characters it lacks) says it is B's
        raise InputError(f"--compare {model_name(args.compare)}: {failure}") from None
    trace, other = result.trace, other_result.trace
    if "DISPLAY" not in os.environ and "WAYLAND_DISPLAY" not in os.environ:
        os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from ..gui.rendering import render_compare

    names = (model_name(args.checkpoint), model_name(args.compare))
    render_compare(trace, other, kind=args.kind, layer=args.layer, head=head, output=output, size=size,
                   colormap=args.colormap, masks=not args.no_masks, names=names,
                   caption=caption(args.text, (names[0], result), (names[1], other_result)))
    print(output)
    return 0
