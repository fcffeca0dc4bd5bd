"""attnviz importance -c CKPT [--data PAIRS.tsv] [--limit N] [--kind KIND]... [--beam K] [--max-len N] [--json]

How much each attention head matters: the pairs are scored once as the model is, then once per head with
that head alone switched off (its output zeroed, as --ablate does), and the drop is printed as a
layers × heads table per kind. The score is evaluate's: chrF, or exact match (in %) for a model whose
target side is characters. A bundled demo is scored on its own reference translations when no --data is
given. Progress, with the time left, goes to stderr; --json prints one document with every table and the
heads ranked by drop.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from models.trace import KINDS

from .common import (MAX_BEAM, MAX_OUTPUT_TOKENS, add_corpus_options, add_model_options, corpus_pairs, int_range,
                     model_shape, open_translator)
from .stats import KIND_NAMES, grid_lines

NAME = "importance"


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(NAME, help="the score drop when each attention head is switched off alone",
                                   description=__doc__)
    add_model_options(parser)
    add_corpus_options(parser)
    parser.add_argument("--kind", choices=KINDS, action="append",
                        help="only heads of this kind (repeatable; default: every kind the model has)")
    parser.add_argument("--beam", type=int_range(1, MAX_BEAM), default=1, metavar="K", help="beam width (1 = greedy)")
    parser.add_argument("--max-len", type=int_range(1, MAX_OUTPUT_TOKENS), metavar="N",
                        help="stop outputs after N tokens (default: twice the longest reference plus 10)")
    parser.add_argument("--json", action="store_true", help="print one JSON document")


class ProgressReport:
    """The progress lines on stderr: heads done, and the time left from the runs so far. Every run (the
    baseline with every head on, then one per head) scores the same pairs, so each costs about the same."""

    def __init__(self) -> None:
        self.started = time.perf_counter()
        self.first_head = 0.0  # seconds from the start to the first head's score: the baseline and that head

    def __call__(self, done: int, total: int, head: str) -> None:
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
    from models.importance import head_importance

    shape = model_shape(args)
    pairs, corpus = corpus_pairs(args)
    translator = open_translator(args)
    heads = sum(layers * count for kind, (layers, count) in shape.items() if not args.kind or kind in args.kind)
    if heads and all(kind in shape for kind in args.kind or ()):  # else head_importance says what is missing
        print(f"attnviz: importance: scoring {corpus} with every head on, then with each of {heads} heads off",
              file=sys.stderr, flush=True)
    report = ProgressReport()
    importance = head_importance(translator, pairs, kinds=args.kind, beam=args.beam, max_len=args.max_len,
                                 progress=report)
    baseline = report.baseline_seconds(heads, importance.seconds)
    if args.json:
        print(json.dumps({"corpus": corpus, "baseline_seconds": round(baseline, 3), **importance.to_json()}))
    else:
        print("\n".join(table_lines(importance, corpus=corpus, baseline_seconds=baseline)))
    return 0


def table_lines(importance, *, corpus: str, baseline_seconds: float) -> list[str]:
    """The baseline, one drop table per kind, and the five heads whose loss costs most."""
    from models.importance import METRICS

    name = METRICS[importance.metric]
    lines = [f"{importance.examples} sentences ({corpus}), {name} {importance.baseline:.2f} with every head on "
             f"(that run ≈{baseline_seconds:.1f} s; all {importance.seconds:.1f} s)"]
    for kind, table in importance.drops.items():
        lines += ["", f"{KIND_NAMES[kind]}: {name} drop with the head off (positive = the head helps)"]
        lines += grid_lines(table)
    lines += ["", "most important: " + ", ".join(f"{kind}:{layer}:{head} ({drop:+.2f})"
                                                 for kind, layer, head, drop in importance.ranking()[:5])]
    return lines
