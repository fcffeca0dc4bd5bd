"""attnviz contributions -c CKPT [--data PAIRS.tsv] [--limit N] [--decoded] [--ig] [--ig-steps N] [--json]

Which pairs the model translated without looking at the source (Dale et al. 2023): each pair is forced on its
reference (--decoded: on the model's own greedy output) and scored with ALTI+ (Ferrando et al. 2022), the
share of every output token that comes from the source rather than the target prefix. Pairs are listed lowest
source contribution first, with

  avg_source        the mean over output tokens of their source contribution (0-1; low: a likely hallucination)
  min_source_token  the smallest total contribution any one source token makes to the whole output

--ig (or --ig-steps N) also computes each pair's integrated gradients and says how complete they are: per output
step, |sum of attributions - (log p(x) - log p(baseline))| / |log p(x) - log p(baseline)|, the largest of them
(ig_error) and the steps over 5% (missed).

A bundled demo is scored on its own reference translations when no --data is given. A model without
Transformer blocks (a GRU) is refused in one line. An encoder-only model reads lines of a sentence with masks<TAB>the
filled sentence, or plain sentences (15 % of their tokens masked by a hash): avg_source is then the mean share of the
mask positions' final states that comes from the other tokens rather than the mask itself.
"""

from __future__ import annotations

import argparse
import json

from models.analysis.catalogue import ALTI

from .common import (
    add_corpus_options, add_ig_steps_option, add_model_options, corpus_pairs, model_shape, open_translator,
    say_if_rounded,
)

NAME = "contributions"


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(NAME, help="each pair's source contribution (ALTI+), lowest first: likely "
                                              "hallucinations on top", description=__doc__)
    add_model_options(parser, chat=False)
    add_corpus_options(parser)
    parser.add_argument("--decoded", action="store_true",
                        help="score the model's own greedy output instead of the references")
    parser.add_argument("--ig", action="store_true",
                        help="also each pair's integrated gradients' completeness error per output step")
    add_ig_steps_option(parser)
    parser.add_argument("--json", action="store_true", help="print one JSON document")


def run(args: argparse.Namespace) -> int:
    from models.analysis.contributions import COMPLETENESS_TOLERANCE, corpus_coverage
    from models.analysis.gradients import check_ig_steps, integrated_gradients

    check_ig_steps(args.ig_steps)
    model_shape(args)
    pairs, corpus = corpus_pairs(args)
    translator = open_translator(args)
    say_if_rounded(translator)
    scored = corpus_coverage(translator, pairs, decoded=args.decoded)
    complete = {}
    if args.ig or args.ig_steps is not None:
        complete = {pair.number: integrated_gradients(translator.model, pair.source_ids, pair.output_ids,
                                                      steps=args.ig_steps) for pair in scored}
    run_name = "decoded" if args.decoded else "references"
    if args.json:
        listed = [{**pair.to_json(), **completeness_json(complete.get(pair.number))} for pair in scored]
        ig = {"ig_tolerance": COMPLETENESS_TOLERANCE} if complete else {}
        print(json.dumps({"corpus": corpus, "method": ALTI, "scored": run_name, **ig, "pairs": listed},
                         ensure_ascii=False))
    else:
        masked = not translator.model.decodes  # an encoder-only model: the context share of each line's masks
        print("\n".join(table_lines(scored, corpus=corpus, decoded=args.decoded, complete=complete, masked=masked)))
    return 0


def completeness_json(maps) -> dict:
    """Integrated gradients' completeness of one pair: each output step's relative error and node count, and the
    steps over the tolerance."""
    if maps is None:
        return {}
    return {"ig_completeness": [round(float(error), 6) for error in maps.completeness],
            "ig_steps": [int(count) for count in maps.ig_steps], "ig_missed": maps.incomplete}


def table_lines(scored, *, corpus: str, decoded: bool, complete: dict | None = None,
                masked: bool = False) -> list[str]:
    what = "the model's own greedy outputs" if decoded else "the references"
    complete = complete or {}
    ig_head = f"  {'ig_error':>8}  {'missed':<8}" if complete else ""
    title = (f"{corpus}: avg_source is the share of the masks' final states from the other tokens (ALTI+), lowest "
             "first" if masked else f"{corpus}, forced on {what}, lowest source contribution (ALTI+) first")
    lines = [title,
             f"{'rank':>4}  {'pair':>4}  {'avg_source':>10}  {'min_source_token':>16}{ig_head}  least covered  "
             "source → output"]
    for rank, pair in enumerate(scored, start=1):
        ig = ""
        if pair.number in complete:
            maps = complete[pair.number]
            missed = ",".join(str(step) for step in maps.incomplete) or "-"
            ig = f"  {float(maps.completeness.max()):>8.1%}  {missed:<8}"
        lines.append(f"{rank:>4}  {pair.number:>4}  {pair.coverage.avg_source:>10.3f}  "
                     f"{pair.coverage.min_source_token:>16.3f}{ig}  {pair.least_covered_token:<13}  "
                     f"{pair.source} → {pair.output}")
    if any(maps.incomplete for maps in complete.values()):
        lines.append("missed: output steps (from 0) whose integrated gradients miss completeness by over 5% "
                     "(--ig-steps N sets the step count)")
    return lines


