"""``attnviz translate -c CKPT [--beam K] [--device D] TEXT...``: one output line per input.

With no TEXT, each line of standard input is one input.
"""

from __future__ import annotations

import argparse
import sys

from models.errors import InputError

from .common import (add_decoding_options, add_model_options, announce_truncation, announce_unknown, open_translator,
                     unknown_mode)

NAME = "translate"


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(NAME, help="translate sentences", description=__doc__)
    add_model_options(parser)
    add_decoding_options(parser)
    parser.add_argument("--length-penalty", type=float, default=0.6, help="beam length penalty α (default 0.6)")
    parser.add_argument("text", nargs="*", help="sentences to translate (default: lines of standard input)")


def run(args: argparse.Namespace) -> int:
    texts = args.text or [line.rstrip("\n") for line in sys.stdin]
    if not texts:
        raise InputError("nothing to translate: give TEXT arguments or lines on standard input")
    if args.beam < 1:
        raise InputError(f"--beam must be at least 1; got {args.beam}")
    from models.decoding import finish
    from models.translator import decoding_mode

    translator = open_translator(args)
    sources = []
    for number, text in enumerate(texts, 1):  # check every input before spending time on any
        try:
            sources.append(translator.source(text, unknown=unknown_mode(args)))
        except InputError as failure:
            raise InputError(f"input {number}: {failure}") from None
    for number, source in enumerate(sources, 1):
        announce_unknown(source, f"input {number}")
        announce_truncation(source, f"input {number}", translator.config.max_len)
        best = finish(translator.decode(source, mode=decoding_mode(args.beam), beam=args.beam, length_penalty=args.length_penalty,
                                        max_len=args.max_len, need_weights=False))[0]
        print(best.text, flush=True)
    return 0
