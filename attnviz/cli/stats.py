"""attnviz stats -c CKPT [--data PAIRS.tsv] [--limit N] [--batch-size B] [--decode] [--json] [-o OUT.npz]

What every attention head does over a corpus: per kind, a layers × heads table of each statistic, over the
corpus forced on its references (and with --decode also forced on the model's own greedy output); a bundled
demo's own reference translations when no --data is given:

  entropy     mean entropy of an attention row, in nats (0: all weight on one key)
  confidence  mean largest weight of a row
  eos         weight on the source's </s>              bos       weight on the decoder's <s>
  same        weight on the query's own position       previous  weight on the position before it
  diagonal    cross-attention weight within max(1, 0.1·S) positions of the length-scaled diagonal
  padding     weight on padding: always 0 (checked; printed only if it is not)

Padded rows and keys never count. --json prints one document (with each head's most and least typical
sentences); -o writes an NPZ with one [layers, heads] float32 array per {run}.{kind}.{statistic}.

Under torchrun (torchrun --nproc_per_node N -m attnviz stats ...) each process runs its share of the corpus
on its own device, the per-sentence sums are put together, and rank 0 alone prints and writes.
"""

from __future__ import annotations

import argparse
import json

import numpy as np

from models.errors import InputError

from ..state.export import check_output, write_arrays
from .common import (
    add_corpus_options, add_model_options, add_output_option, corpus_pairs, model_shape, open_translator,
    warn,
)

NAME = "stats"
KIND_NAMES = {"enc_self": "encoder self-attention", "dec_self": "decoder self-attention", "cross": "cross-attention"}


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(NAME, help="what every attention head does over a corpus", description=__doc__)
    add_model_options(parser, chat=False)
    add_corpus_options(parser)
    parser.add_argument("--batch-size", type=int, default=32, metavar="B", help="sentences per forward pass")
    parser.add_argument("--decode", action="store_true", help="also run forced on the model's own greedy output")
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    add_output_option(parser, "also write the tables to this .npz file (default: none written)", required=False)


def run(args: argparse.Namespace) -> int:
    from models.analysis.head_stats import corpus_head_stats
    from models.inference.distributed import joined

    if args.batch_size < 1:
        raise InputError(f"--batch-size must be at least 1; got {args.batch_size}")
    output = check_output(args.output, (".npz",)) if args.output else None
    model_shape(args)
    pairs, corpus = corpus_pairs(args)
    with joined(args.device) as processes:
        args.device = str(processes.device)  # under torchrun on CUDA: this process's own GPU
        stats = corpus_head_stats(open_translator(args), pairs, batch_size=args.batch_size, decode=args.decode,
                                  processes=processes)
    if processes.main:  # the other processes' sentences are in its sums
        report(stats, corpus=corpus, output=output, as_json=args.json)
    return 0


def report(stats, *, corpus: str, output, as_json: bool) -> None:
    """The tables (or one JSON document) on stdout, the NPZ file, and a warning when a mask is broken."""
    if output is not None:
        write_arrays(output, stats.arrays())
    print(json.dumps({"corpus": corpus, **stats.to_json()}) if as_json else "\n".join(table_lines(stats, corpus)))
    if stats.max_padding() > 0:
        warn(f"a head puts weight {stats.max_padding():.3g} on padding: a mask is broken")


def table_lines(stats, corpus: str) -> list[str]:
    """Every run, kind and statistic as a readable layers × heads table (padding only when it is not 0)."""
    from models.trace.head_summary import STATISTICS

    lines = [f"{len(stats.pairs)} sentences ({corpus})"]
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
    return [header] + [f"{f'L{layer}':<6}" + "".join(f"{value:7.3f}" for value in row)
                       for layer, row in enumerate(values)]
