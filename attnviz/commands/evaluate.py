"""``attnviz evaluate -c CKPT --data PAIRS.tsv [--beam K] [--limit N] [--alignment piglatin] [--ablate KIND:LAYER:HEAD] [--json]``

Exact match, chrF and BLEU on held-out pairs, exact match by source length, and with ``--alignment
piglatin`` the share of copied characters whose strongest cross-attention is on the character copied.
"""

from __future__ import annotations

import argparse
import dataclasses
import json

from .common import MAX_BEAM, MAX_OUTPUT_TOKENS, ablation_for, add_ablation_option, add_model_options, int_range, open_translator

NAME = "evaluate"


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(NAME, help="score a checkpoint on held-out pairs", description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
    add_model_options(parser)
    parser.add_argument("--data", required=True, help="pairs, source<TAB>target per line")
    parser.add_argument("--beam", type=int_range(1, MAX_BEAM), default=1, metavar="K")
    parser.add_argument("--max-len", type=int_range(1, MAX_OUTPUT_TOKENS), metavar="N")
    parser.add_argument("--limit", type=int_range(1), metavar="N", help="only the first N pairs")
    parser.add_argument("--alignment", choices=("piglatin",), help="also score the cross-attention alignment")
    add_ablation_option(parser)
    parser.add_argument("--json", action="store_true", help="print one JSON document")


def run(args: argparse.Namespace) -> int:
    from models.data.pairs import read_pairs
    from models.evaluation import evaluate

    pairs = read_pairs(args.data)[: args.limit]
    copy_sources = None
    if args.alignment == "piglatin":
        from models.data.piglatin import copy_sources
    translator = open_translator(args)
    scores = evaluate(translator, pairs, beam=args.beam, max_len=args.max_len, copy_sources=copy_sources,
                      ablation=ablation_for(args, translator))
    print(json.dumps(dataclasses.asdict(scores)) if args.json else "\n".join(scores.lines()))
    return 0
