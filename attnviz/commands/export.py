"""``attnviz export -c CKPT [--beam K] [--target TEXT] TEXT -o OUT.npz``: the attention as arrays.

The NPZ holds ``src_tokens``, ``tgt_tokens`` (starting with the start token fed to the decoder), and for
each attention kind ``{kind}_L{layer}`` ``[heads, query_len, key_len]`` float32 and ``{kind}_mask``
``[query_len, key_len]`` bool (True = may attend); also ``output_tokens``, ``translation``, ``score``, and
``ablated``: the heads ``--ablate`` switched off, as ``KIND:LAYER:HEAD`` strings (their weights are still
the ones they computed).
"""

from __future__ import annotations

import argparse

from ..export import check_output, write_npz
from .common import add_decoding_options, add_model_options, decode_one

NAME = "export"


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(NAME, help="write the attention of one sentence to an .npz file", description=__doc__)
    add_model_options(parser)
    add_decoding_options(parser)
    parser.add_argument("--target", help="force decoding to this target text instead of searching")
    parser.add_argument("text", help="the source sentence")
    parser.add_argument("-o", "--output", required=True, help="the .npz file to write")


def run(args: argparse.Namespace) -> int:
    output = check_output(args.output, (".npz",))
    write_npz(output, decode_one(args))
    return 0
