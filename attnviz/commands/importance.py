"""``attnviz importance -c CKPT --data PAIRS.tsv [--limit N] [--kind KIND]... [--beam K] [--max-len N] [--json]``

How much each attention head matters: the pairs are scored once as the model is, then once per head with
that head alone switched off (its output zeroed, as ``--ablate`` does), and the drop is printed as a
layers × heads table per kind. The score is evaluate's: chrF, or exact match (in %) for a model whose
target side is characters. Progress goes to stderr; ``--json`` prints one document with every table and
the heads ranked by drop.

``--metric nll`` (the default) asks the question without decoding: the references' mean NLL per token under
teacher forcing, each head's entry being the NLL with it off minus the NLL with every head on, many heads
in one forward pass. ``--method gradient`` estimates the same from one forward and backward pass and adds
Michel et al.'s importance |∂L/∂ξ| (``--normalize layer``: divided by each layer's L2 norm).
"""

from __future__ import annotations

import argparse
import json
import sys

from models.trace import KINDS

from .common import MAX_BEAM, MAX_OUTPUT_TOKENS, add_model_options, int_range, open_translator
from .stats import KIND_NAMES, grid_lines

NAME = "importance"


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(NAME, help="the score drop when each attention head is switched off alone",
                                   description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_model_options(parser)
    parser.add_argument("--data", required=True, help="pairs, source<TAB>target per line")
    parser.add_argument("--limit", type=int_range(1), metavar="N", help="only the first N pairs")
    parser.add_argument("--kind", choices=KINDS, action="append",
                        help="only heads of this kind (repeatable; default: every kind the model has)")
    parser.add_argument("--beam", type=int_range(1, MAX_BEAM), default=1, metavar="K", help="beam width (default 1)")
    parser.add_argument("--max-len", type=int_range(1, MAX_OUTPUT_TOKENS), metavar="N",
                        help="stop outputs after N tokens (default: twice the longest reference plus 10)")
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    add_importance_options(parser)


def add_importance_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--metric", choices=("nll", "chrf", "exact"), default="nll",
                        help="nll (default): the references' mean NLL per token under teacher forcing, many heads "
                             "per forward pass; chrf/exact: decode every pair again per head and score the outputs "
                             "(slow; --beam and --max-len apply)")
    parser.add_argument("--method", choices=("ablation", "gradient"), default="ablation",
                        help="ablation (default): switch each head off; gradient (NLL only): one forward and "
                             "backward pass, the first-order NLL change and Michel et al.'s importance |∂L/∂ξ|")
    parser.add_argument("--normalize", choices=("none", "layer"), default="none",
                        help="gradient: the importance table printed, raw or divided by each layer's L2 norm")


def run(args: argparse.Namespace) -> int:
    from models.data.pairs import read_pairs
    from models.importance import head_importance

    pairs = read_pairs(args.data)[: args.limit]
    translator = open_translator(args)

    def progress(done: int, total: int, head: str) -> None:
        print(f"attnviz: importance: {done}/{total} heads ({head})", file=sys.stderr, flush=True)

    importance = score_heads(args, translator, pairs, progress=progress)
    print(json.dumps(importance.to_json()) if args.json else "\n".join(table_lines(importance, args.normalize)))
    return 0


def score_heads(args: argparse.Namespace, translator, pairs, progress):
    """The importance ``--metric`` and ``--method`` ask for; one line where they do not go together."""
    from models.importance import ImportanceError, ablation_importance, gradient_importance, head_importance

    if args.method == "gradient":
        if args.metric != "nll":
            raise ImportanceError(f"--method gradient differentiates the NLL: it cannot score {args.metric}")
        importance = gradient_importance(translator, pairs, kinds=args.kind)
    elif args.metric == "nll":
        importance = ablation_importance(translator, pairs, kinds=args.kind, progress=progress)
    else:
        importance = head_importance(translator, pairs, kinds=args.kind, beam=args.beam, max_len=args.max_len,
                                     progress=progress, metric=args.metric)
    if importance.unknown_pairs:
        print(f"attnviz: warning: {importance.unknown_pairs} of {importance.examples} pairs have characters the "
              f"vocabulary lacks; each was scored as its unknown token", file=sys.stderr)
    return importance


def table_lines(importance, normalize: str = "none") -> list[str]:
    """The baseline, one drop table per kind (and, for gradients, one importance table), and the five heads
    whose loss costs most."""
    from models.importance import METRICS

    name = METRICS[importance.metric]
    lines = [f"{importance.examples} sentences, {name} {importance.baseline:.2f} with every head on "
             f"({importance.seconds:.1f} s)"]
    change = "rise" if importance.metric == "nll" else "drop"
    estimated = "first-order estimate of the " if importance.method == "gradient" else ""
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
