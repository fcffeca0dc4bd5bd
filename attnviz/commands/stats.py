"""``attnviz stats -c CKPT --data PAIRS.tsv [--limit N] [--batch-size B] [--decode] [--json] [-o OUT.npz]``

What every attention head does over a corpus: per kind, a layers × heads table of each statistic, over the
corpus forced on its references (and with ``--decode`` also forced on the model's own greedy output):

  entropy     mean entropy of an attention row, in nats (0: all weight on one key)
  confidence  mean largest weight of a row
  eos         weight on the source's </s>              bos       weight on the decoder's <s>
  same        weight on the query's own position       previous  weight on the position before it
  diagonal    cross-attention weight within max(1, 0.1·S) positions of the length-scaled diagonal
  padding     weight on padding: always 0 (checked; printed only if it is not)

Padded rows and keys never count. ``--json`` prints one document (with each head's most and least typical
sentences); ``-o`` writes an NPZ with one ``[layers, heads]`` float32 array per ``{run}.{kind}.{statistic}``.
"""

from __future__ import annotations

import argparse
import json
import sys

import numpy as np

from models.errors import InputError

from ..export import check_output
from .common import add_model_options, open_translator

NAME = "stats"
KIND_NAMES = {"enc_self": "encoder self-attention", "dec_self": "decoder self-attention", "cross": "cross-attention"}


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(NAME, help="what every attention head does over a corpus", description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
    add_model_options(parser)
    parser.add_argument("--data", required=True, help="pairs, source<TAB>target per line")
    parser.add_argument("--limit", type=int, metavar="N", help="only the first N pairs")
    parser.add_argument("--batch-size", type=int, default=32, metavar="B", help="sentences per forward pass (default 32)")
    parser.add_argument("--decode", action="store_true", help="also run forced on the model's own greedy output")
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    parser.add_argument("-o", "--output", help="write the tables to this .npz file")


def run(args: argparse.Namespace) -> int:
    from models.data.pairs import read_pairs
    from models.head_stats import corpus_head_stats

    for option, value in (("--limit", args.limit), ("--batch-size", args.batch_size)):
        if value is not None and value < 1:
            raise InputError(f"{option} must be at least 1; got {value}")
    output = check_output(args.output, (".npz",)) if args.output else None
    pairs = read_pairs(args.data)[: args.limit]
    stats = corpus_head_stats(open_translator(args), pairs, batch_size=args.batch_size, decode=args.decode)
    if output is not None:
        try:
            with open(output, "wb") as handle:  # np.savez would append .npz to a name that lacks it
                np.savez_compressed(handle, **stats.arrays())
        except OSError as failure:
            raise InputError(f"{output}: cannot be written ({failure.strerror or failure})") from None
    print(json.dumps(stats.to_json()) if args.json else "\n".join(table_lines(stats)))
    if stats.max_padding() > 0:
        print(f"attnviz: warning: a head puts weight {stats.max_padding():.3g} on padding: a mask is broken",
              file=sys.stderr)
    return 0


def table_lines(stats) -> list[str]:
    """Every run, kind and statistic as a readable layers × heads table (padding only when it is not 0)."""
    from models.head_summary import STATISTICS

    lines = [f"{len(stats.pairs)} sentences"]
    for name, run in stats.runs.items():
        for kind, table in run.tables().items():
            for statistic, values in table.items():
                if statistic == "padding" and not values.any():
                    continue
                lines += ["", f"{name} · {KIND_NAMES[kind]} · {statistic}: {STATISTICS[statistic][1]}"]
                lines += grid_lines(values)
    if stats.max_padding() == 0:
        lines += ["", "padding: no weight on any padded key (checked on every head)"]
    return lines


def grid_lines(values: np.ndarray) -> list[str]:
    header = "      " + "".join(f"{f'H{head}':>7}" for head in range(values.shape[1]))
    return [header] + [f"{f'L{layer}':<6}" + "".join(f"{value:7.3f}" for value in row) for layer, row in enumerate(values)]
