"""attnviz evaluate -c CKPT [--data PAIRS.tsv] [--beam K] [--limit N] [--alignment piglatin]
[--ablate KIND:LAYER:HEAD] [--batch-size N] [--batch-tokens N] [--json]

Exact match, chrF and BLEU on held-out pairs, exact match by source length, and with --alignment piglatin
the share of copied characters whose strongest cross-attention is on the character copied. A bundled demo
is scored on its own reference translations when no --data is given.
"""

from __future__ import annotations

import argparse
import dataclasses
import json

from .common import (
    MAX_OUTPUT_TOKENS, ablation_for, add_ablation_option, add_batching_options, add_beam_option, add_corpus_options,
    add_model_options, batching_of, corpus_pairs, int_range, model_shape, open_translator,
)

NAME = "evaluate"


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(NAME, help="score a checkpoint on held-out pairs", description=__doc__)
    add_model_options(parser, chat=False)
    add_corpus_options(parser)
    add_beam_option(parser)
    parser.add_argument("--max-len", type=int_range(1, MAX_OUTPUT_TOKENS), metavar="N",
                        help="stop outputs after N tokens (default: the model's maximum)")
    parser.add_argument("--alignment", choices=("piglatin",),
                        help="also score the cross-attention alignment (default: not scored)")
    add_ablation_option(parser)
    add_batching_options(parser)
    parser.add_argument("--json", action="store_true", help="print one JSON document")


def run(args: argparse.Namespace) -> int:
    from models.analysis.evaluation import evaluate

    model_shape(args)
    pairs, corpus = corpus_pairs(args)
    copy_sources = None
    if args.alignment == "piglatin":
        from models.text.piglatin import copy_sources
    translator = open_translator(args)
    scores = evaluate(translator, pairs, beam=args.beam, max_len=args.max_len, copy_sources=copy_sources,
                      ablation=ablation_for(args, translator), batching=batching_of(args))
    if args.json:
        print(json.dumps({"corpus": corpus, **dataclasses.asdict(scores)}))
    else:
        print("\n".join([f"corpus: {corpus}", *scores.lines()]))
    return 0
