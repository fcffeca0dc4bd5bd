"""attnviz patch -c CKPT --clean A --corrupt B [--target T] [--step N] [--nll] [--json]

Activation patching (docs/ARCHITECTURE.md#activation-patching): which positions and heads carry the difference
between a clean source A and a corrupted source B of the same token length (edit a word). The model is forced on the
clean output (--target, else A's greedy output). The metric is logit(clean token) - logit(corrupted run's token) at
step N (default: the first step where the two greedy outputs differ, else the last), or with --nll the NLL of
the whole clean output. Each cell is the corrupted run with one activation taken from the clean run: a position of
the encoder's or the decoder's residual stream at a layer (emb: the embeddings; Lk: layer k's output), every
position of an encoder layer at once (all), or one head's output before the output projection. Attribution patching
(AtP: one forward and one backward pass) estimates the same cells; its Spearman rho against exact patching is given.

Tables are normalised, (m - m_corrupted) / (m_clean - m_corrupted): 0 is the corrupted run, 1 the clean one. --json
prints one document: metric, clean, corrupt, encoder and decoder [layers + 1][positions], encoder_all [layers + 1],
heads per kind [layers][heads], atp (the same tables estimated), raw (every table unnormalised) and spearman.

A decoder-only model's prompt is the source: its tables are the residual stream over the prompt and continuation,
and its heads; with --chat both prompts are laid out by the model's chat template, as translate --chat lays them. A
recurrent (GRU) model has no residual stream to patch: one line says so.
"""

from __future__ import annotations

import argparse
import json

from models.analysis.catalogue import PATCH_LOGIT, PATCH_NLL

from .common import add_model_options, argument_text, open_translator, prompt_source, say_if_rounded, unknown_mode

NAME = "patch"


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(NAME, help="which positions and heads carry the difference between two sources "
                                              "(activation patching)", description=__doc__)
    add_model_options(parser)
    parser.add_argument("--clean", required=True, metavar="TEXT", help="the clean source")
    parser.add_argument("--corrupt", required=True, metavar="TEXT",
                        help="the corrupted source: the same number of tokens (edit a word)")
    parser.add_argument("--target", metavar="TEXT", help="force this clean output (default: the clean greedy output)")
    parser.add_argument("--step", type=int, metavar="N",
                        help="the output step the logit difference is read at, from 0 (default: where the greedy "
                             "outputs first differ, else the last)")
    parser.add_argument("--nll", action="store_true",
                        help="the metric is the NLL of the whole clean output (default: the logit difference at a "
                             "step)")
    parser.add_argument("--strict", action="store_true", help="refuse characters the vocabulary lacks")
    parser.add_argument("--json", action="store_true", help="print one JSON document")


def run(args: argparse.Namespace) -> int:
    from attnviz.state.patch_view import patch_document, report_for, text_tables
    from models.analysis.patching import PatchingError, check_sources, patch_sources, unavailable

    clean_text = argument_text(args.clean, "--clean")
    corrupt_text = argument_text(args.corrupt, "--corrupt")
    metric = PATCH_NLL if args.nll else PATCH_LOGIT
    if args.step is not None and args.nll:
        raise PatchingError("--step chooses where the logit difference is read: the NLL covers every step")
    translator = open_translator(args)
    say_if_rounded(translator)
    line = unavailable(translator.model)
    if line:
        raise PatchingError(line)
    clean, corrupt = prompt_source(args, translator, clean_text), prompt_source(args, translator, corrupt_text)
    check_sources(clean.ids, corrupt.ids)
    target = translator.target(args.target, unknown=unknown_mode(args)) if args.target is not None else None
    run = patch_sources(translator, clean, corrupt, target_ids=target, step=args.step, metric=metric)
    report = report_for(translator, run, clean=clean, corrupt=corrupt)
    if args.json:
        print(json.dumps(patch_document(report, clean_text=clean_text, corrupt_text=corrupt_text)))
    else:
        print("\n".join(text_tables(report)))
    return 0
