"""attnviz importance -c CKPT [--data PAIRS.tsv] [--limit N] [--kind KIND]... [--metric nll|chrf|exact]
                   [--method ablation|gradient] [--batch-size N] [--batch-tokens N]
                   [--prune-curve [--seed S] [-o FIGURE]] [--beam K] [--max-len N] [--json]

How much each attention head matters: the pairs are scored once as the model is, then once per head with
that head alone switched off (its output zeroed, as --ablate does), and the change is printed as a
layers × heads table per kind. The score is, by default, the references' mean NLL per token under teacher
forcing (--metric nll: no decoding; each head's entry is the NLL with it off minus the NLL with every head on,
many heads in one forward pass). A bundled demo is scored on its own reference translations when no --data is
given. Progress, with the time left, goes to stderr; --json prints one document with every table and the
heads ranked by their change.

--metric chrf or exact decodes every pair again per head and scores the outputs as evaluate does (chrF, or
exact match in % for a model whose target side is characters: the output-level question; slow; decoded in
batches, --batch-size and --batch-tokens as translate takes them).
--method gradient estimates the NLL's change from one forward and backward pass and adds Michel et al.'s
importance |∂L/∂ξ| (--normalize layer: divided by each layer's L2 norm). --prune-curve also switches heads
off cumulatively in three orders and prints (or draws, -o) the score against the number of heads off.

Under torchrun (torchrun --nproc_per_node N -m attnviz importance ...) each process scores its share of the
pairs on its own device, the sums the tables are made of are added up over the processes, and rank 0 alone
prints and draws.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from models.analysis.catalogue import (
    ABLATION, GRADIENT, IMPORTANCE_ESTIMATES, IMPORTANCE_METRICS, NLL, importance_method,
)
from models.trace.records import KINDS

from .common import (
    MAX_OUTPUT_TOKENS, add_batching_options, add_beam_option, add_corpus_options, add_model_options, add_output_option,
    batching_of, corpus_pairs, int_range, model_shape, open_translator, say_if_rounded, warn,
)
from .stats import KIND_NAMES, grid_lines

NAME = "importance"


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(NAME, help="the score drop when each attention head is switched off alone",
                                   description=__doc__)
    add_model_options(parser, chat=False)
    add_corpus_options(parser)
    parser.add_argument("--kind", choices=KINDS, action="append",
                        help="only heads of this kind (repeatable; default: every kind the model has)")
    add_beam_option(parser)
    parser.add_argument("--max-len", type=int_range(1, MAX_OUTPUT_TOKENS), metavar="N",
                        help="stop outputs after N tokens (default: twice the longest reference plus 10)")
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    add_batching_options(parser)  # chrf / exact: the pairs decoded again in batches
    add_importance_options(parser)


def add_importance_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--metric", choices=tuple(IMPORTANCE_METRICS), default=NLL,
                        help="nll (default): the references' mean NLL per token under teacher forcing, many heads "
                             "per forward pass; chrf/exact: decode every pair again per head and score the outputs "
                             "(slow; --beam and --max-len apply)")
    parser.add_argument("--method", choices=IMPORTANCE_ESTIMATES, default=ABLATION,
                        help="ablation (default): switch each head off; gradient (NLL only): one forward and "
                             "backward pass, the first-order NLL change and Michel et al.'s importance |∂L/∂ξ|")
    parser.add_argument("--prune-curve", action="store_true",
                        help="also score the pairs as heads are switched off cumulatively: least important first, "
                             "most important first and in a random order (--seed); the curves are printed, in "
                             "--json, and drawn to -o")
    parser.add_argument("--seed", type=int, default=0, help="the random order of --prune-curve (default: 0)")
    add_output_option(parser, "draw the --prune-curve figure to this .png or .svg file", required=False)
    parser.add_argument("--normalize", choices=("none", "layer"), default="none",
                        help="gradient: the importance table printed, raw or divided by each layer's L2 norm "
                             "(default: none)")


class ProgressReport:
    """The progress lines on stderr: heads done, and the time left from the runs so far. Every run (the
    baseline with every head on, then one per head) scores the same pairs, so each costs about the same."""

    def __init__(self) -> None:
        self.started = time.perf_counter()
        self.first_head = 0.0  # seconds from the start to the first head's score: the baseline and that head
        self.said = 0  # heads done in the last line (a unit is a batch: several come per head)

    def __call__(self, done: int, total: int, head: str) -> None:
        if done == self.said:
            return
        self.said = done
        elapsed = time.perf_counter() - self.started
        if done == 1:
            self.first_head = elapsed
        left = (total - done) * elapsed / (done + 1)
        print(f"attnviz: importance: {done}/{total} heads ({head}), about {duration(left)} left",
              file=sys.stderr, flush=True)

    def baseline_seconds(self, total: int, seconds: float) -> float:
        """The baseline run's own time: the time to the first head's score less one head's average."""
        if total < 2:
            return self.first_head / 2
        return max(0.0, self.first_head - (seconds - self.first_head) / (total - 1))


def duration(seconds: float) -> str:
    seconds = round(seconds)
    return f"{seconds // 60} min {seconds % 60:02d} s" if seconds >= 60 else f"{seconds} s"


def run(args: argparse.Namespace) -> int:
    from models.analysis.importance import ImportanceError
    from models.inference.distributed import joined

    if importance_method(args.method, args.metric) is None:  # a gradient of a score that decodes
        raise ImportanceError(f"--method gradient differentiates the NLL: it cannot score {args.metric}")
    if args.output is not None:
        if not args.prune_curve:
            raise ImportanceError("-o draws the pruning curves: add --prune-curve")
        from ..state.export import IMAGE_SUFFIXES, check_output

        check_output(args.output, IMAGE_SUFFIXES)
    shape = model_shape(args)
    pairs, corpus = corpus_pairs(args)
    with joined(args.device) as processes:
        args.device = str(processes.device)  # under torchrun on CUDA: this process's own GPU
        scored = score(args, pairs, corpus=corpus, shape=shape, processes=processes)
        if processes.main:  # the other processes' shares are in its sums
            report(args, scored, corpus=corpus)
    return 0


def score(args: argparse.Namespace, pairs, *, corpus: str, shape, processes):
    """The importance, its baseline run's seconds and the pruning curves; only the main process reports on the
    way."""
    translator = open_translator(args)
    if processes.main:
        say_if_rounded(translator)
    heads = sum(layers * count for kind, (layers, count) in shape.items() if not args.kind or kind in args.kind)
    # Decoding again per head, the first progress line comes after two runs: say what is under way. (The NLL's
    # passes report at once, and a reference too long for them must stay a one-line error.)
    decodes = importance_method(args.method, args.metric).decodes
    if processes.main and decodes and heads and all(kind in shape for kind in args.kind or ()):
        print(f"attnviz: importance: scoring {corpus} with every head on, then with each of {heads} heads off",
              file=sys.stderr, flush=True)
    progress = ProgressReport()
    importance = score_heads(args, translator, pairs, progress=progress if processes.main else None,
                             processes=processes)
    # Decoding again per head, the run with every head on is a run of its own; the NLL's passes share it.
    baseline = progress.baseline_seconds(heads, importance.seconds) if decodes else None
    curves = (prune_curves_for(args, translator, pairs, importance=importance, processes=processes)
              if args.prune_curve else None)
    return importance, baseline, curves


def report(args: argparse.Namespace, scored, *, corpus: str) -> None:
    """The tables (or ``--json``) on stdout and the curves' figure to ``-o``."""
    importance, baseline, curves = scored
    if args.json:
        timing = {} if baseline is None else {"baseline_seconds": round(baseline, 3)}
        extra = {} if curves is None else {"prune_curve": curves.to_json()}
        print(json.dumps({"corpus": corpus, **timing, **importance.to_json(), **extra}))
    else:
        lines = table_lines(importance, corpus=corpus, baseline_seconds=baseline, normalize=args.normalize)
        print("\n".join(lines + (curve_lines(curves) if curves is not None else [])))
    if curves is not None and args.output is not None:
        draw_curves(args, curves, corpus=corpus)


def prune_curves_for(args: argparse.Namespace, translator, pairs, *, importance, processes):
    from models.analysis.pruning import prune_curves

    if processes.main:
        print(f"attnviz: importance: pruning curves, "
              f"{3 * (sum(table.size for table in importance.drops.values()) + 1)} scorings", file=sys.stderr,
              flush=True)
    return prune_curves(translator, pairs, importance, seed=args.seed, beam=args.beam, max_len=args.max_len,
                        batching=batching_of(args), processes=processes)


def curve_lines(curves) -> list[str]:
    """Each order's score at 0, ¼, ½, ¾ and every head switched off."""
    heads = len(next(iter(curves.curves.values()))) - 1
    marks = sorted({round(heads * fraction) for fraction in (0, 0.25, 0.5, 0.75, 1)})
    lines = ["", f"pruning curves: {IMPORTANCE_METRICS[curves.metric]} with the first k heads off "
                 f"({curves.seconds:.1f} s)",
             "k".rjust(24) + "".join(f"{mark:>9d}" for mark in marks)]
    names = {"increasing": "least important first", "decreasing": "most important first",
             "random": f"random (seed {curves.seed})"}
    for order, curve in curves.curves.items():
        lines.append(names[order].rjust(24) + "".join(f"{curve[mark]:9.3f}" for mark in marks))
    return lines


def draw_curves(args: argparse.Namespace, curves, *, corpus: str) -> None:
    """The figure (SVG as is; PNG drawn by Qt, loaded only now)."""
    from pathlib import Path

    from ..state.figures import prune_curve_svg

    svg = prune_curve_svg(curves.curves, title=f"Heads switched off cumulatively: {Path(args.checkpoint).stem}",
                          metric_name=IMPORTANCE_METRICS[curves.metric])
    if "DISPLAY" not in os.environ and "WAYLAND_DISPLAY" not in os.environ:
        os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from ..gui.rendering import render_figure

    output = render_figure(svg, args.output)
    print(f"wrote {output} ({corpus})", file=sys.stderr)


def score_heads(args: argparse.Namespace, translator, pairs, progress, *, processes):
    """The importance ``--metric`` and ``--method`` ask for."""
    from models.analysis.importance_methods import importance_steps
    from models.analysis.steps import drive

    method = importance_method(args.method, args.metric)  # run() refused a pair no method computes
    importance = drive(importance_steps(translator, pairs, method.name, metric=args.metric, kinds=args.kind,
                                        beam=args.beam, max_len=args.max_len, batching=batching_of(args),
                                        processes=processes), progress)
    if importance.unknown_pairs and processes.main:
        warn(f"{importance.unknown_pairs} of {importance.examples} pairs have characters the vocabulary lacks; each "
             "was scored as its unknown token")
    return importance


def table_lines(importance, *, corpus: str, baseline_seconds: float | None, normalize: str = "none") -> list[str]:
    """The baseline, one drop table per kind (and, for gradients, one importance table), and the five heads
    whose loss costs most."""
    name = IMPORTANCE_METRICS[importance.metric]
    timing = (f"that run ≈{baseline_seconds:.1f} s; all {importance.seconds:.1f} s" if baseline_seconds is not None
              else f"{importance.seconds:.1f} s")
    lines = [f"{importance.examples} sentences ({corpus}), {name} {importance.baseline:.2f} with every head on "
             f"({timing})"]
    change = "rise" if importance.metric == NLL else "drop"
    estimated = "first-order estimate of the " if importance.method == GRADIENT else ""
    magnitudes = importance.normalized() if normalize == "layer" else importance.magnitudes
    for kind, table in importance.drops.items():
        lines += ["", f"{KIND_NAMES[kind]}: {estimated}{name} {change} with the head off (positive = the head helps)"]
        lines += grid_lines(table)
        if kind in magnitudes:
            scale = ", each layer divided by its L2 norm" if normalize == "layer" else ""
            lines += ["", f"{KIND_NAMES[kind]}: importance |∂L/∂ξ| (Michel et al.{scale})"]
            lines += grid_lines(magnitudes[kind])
    lines += ["", "most important: " + ", ".join(f"{kind}:{layer}:{head} ({drop:+.2f})"
                                                 for kind, layer, head, drop in importance.ranking()[:5])]
    return lines
