"""``attnviz importance -c CKPT --data PAIRS.tsv [--limit N] [--kind KIND]... [--beam K] [--max-len N] [--json]``

How much each attention head matters: the pairs are scored once as the model is, then once per head with
that head alone switched off (its output zeroed, as ``--ablate`` does), and the drop is printed as a
layers × heads table per kind. The score is evaluate's: chrF, or exact match (in %) for a model whose
target side is characters. Progress goes to stderr; ``--json`` prints one document with every table and
the heads ranked by drop.
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


def run(args: argparse.Namespace) -> int:
    from models.data.pairs import read_pairs
    from models.importance import head_importance

    pairs = read_pairs(args.data)[: args.limit]
    translator = open_translator(args)

    def progress(done: int, total: int, head: str) -> None:
        print(f"attnviz: importance: {done}/{total} heads ({head})", file=sys.stderr, flush=True)

    importance = head_importance(translator, pairs, kinds=args.kind, beam=args.beam, max_len=args.max_len,
                                 progress=progress)
    print(json.dumps(importance.to_json()) if args.json else "\n".join(table_lines(importance)))
    return 0


def table_lines(importance) -> list[str]:
    """The baseline, one drop table per kind, and the five heads whose loss costs most."""
    from models.importance import METRICS

    name = METRICS[importance.metric]
    lines = [f"{importance.examples} sentences, {name} {importance.baseline:.2f} with every head on "
             f"({importance.seconds:.1f} s)"]
    for kind, table in importance.drops.items():
        lines += ["", f"{KIND_NAMES[kind]}: {name} drop with the head off (positive = the head helps)"]
        lines += grid_lines(table)
    lines += ["", "most important: " + ", ".join(f"{kind}:{layer}:{head} ({drop:+.2f})"
                                                 for kind, layer, head, drop in importance.ranking()[:5])]
    return lines
