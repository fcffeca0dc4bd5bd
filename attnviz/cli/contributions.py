"""attnviz contributions -c CKPT [--data PAIRS.tsv] [--limit N] [--decoded] [--json]

Which pairs the model translated without looking at the source (Dale et al. 2023): each pair is forced on its
reference (--decoded: on the model's own greedy output) and scored with ALTI+ (Ferrando et al. 2022), the
share of every output token that comes from the source rather than the target prefix. Pairs are listed lowest
source contribution first, with

  avg_source        the mean over output tokens of their source contribution (0-1; low: a likely hallucination)
  min_source_token  the smallest total contribution any one source token makes to the whole output

A bundled demo is scored on its own reference translations when no --data is given. A model without
Transformer blocks (a GRU) is refused in one line.
"""

from __future__ import annotations

import argparse
import json

from .common import add_corpus_options, add_model_options, corpus_pairs, model_shape, open_translator

NAME = "contributions"


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(NAME, help="each pair's source contribution (ALTI+), lowest first: likely "
                                              "hallucinations on top", description=__doc__)
    add_model_options(parser)
    add_corpus_options(parser)
    parser.add_argument("--decoded", action="store_true",
                        help="score the model's own greedy output instead of the references")
    parser.add_argument("--json", action="store_true", help="print one JSON document")


def run(args: argparse.Namespace) -> int:
    from models.analysis.contributions import corpus_coverage

    model_shape(args)
    pairs, corpus = corpus_pairs(args)
    scored = corpus_coverage(open_translator(args), pairs, decoded=args.decoded)
    run_name = "decoded" if args.decoded else "references"
    if args.json:
        print(json.dumps({"corpus": corpus, "method": "alti", "scored": run_name,
                          "pairs": [pair.to_json() for pair in scored]}, ensure_ascii=False))
    else:
        print("\n".join(table_lines(scored, corpus=corpus, decoded=args.decoded)))
    return 0


def table_lines(scored, *, corpus: str, decoded: bool) -> list[str]:
    what = "the model's own greedy outputs" if decoded else "the references"
    lines = [f"{corpus}, forced on {what}, lowest source contribution (ALTI+) first",
             f"{'rank':>4}  {'pair':>4}  {'avg_source':>10}  {'min_source_token':>16}  least covered  source → output"]
    for rank, pair in enumerate(scored, start=1):
        lines.append(f"{rank:>4}  {pair.number:>4}  {pair.coverage.avg_source:>10.3f}  "
                     f"{pair.coverage.min_source_token:>16.3f}  {pair.least_covered_token:<13}  "
                     f"{pair.source} → {pair.output}")
    return lines
