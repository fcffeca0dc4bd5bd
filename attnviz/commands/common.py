"""Options and helpers the subcommands share.

The command modules load torch only when a command runs (inside functions), so that `attnviz --help`,
`--version` and the desktop app's first frame do not wait for it.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from ..demos import demo_path

if TYPE_CHECKING:
    from models.trace import DecodeResult
    from models.translator import SourceInput, Translator


def add_model_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-c", "--checkpoint", required=True, type=checkpoint_path,
                        help="an attnviz .safetensors checkpoint, or a bundled demo's name (see attnviz demos)")
    parser.add_argument("--device", help="cpu, cuda, cuda:N or mps (default: the best available)")


def add_decoding_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--beam", type=int, default=1, metavar="K", help="beam width (1 = greedy; default 1)")
    parser.add_argument("--max-len", type=int, metavar="N", help="stop after N output tokens (default: the model's maximum)")
    parser.add_argument("--strict", action="store_true",
                        help="refuse text with characters the vocabulary lacks (default: they become the unknown "
                             "token, with a warning)")
    parser.add_argument("--replace-unknown", action="store_true", help=argparse.SUPPRESS)  # the default now


def checkpoint_path(text: str) -> str:
    """A checkpoint path as given, or the file of the bundled demo called ``text`` when no such file exists."""
    demo = demo_path(text) if not Path(text).exists() else None
    return str(demo) if demo is not None else text


def open_translator(args: argparse.Namespace) -> Translator:
    from models.checkpoint import load_checkpoint
    from models.translator import Translator

    return Translator(load_checkpoint(args.checkpoint), args.device)


def unknown_mode(args: argparse.Namespace) -> str:
    return "error" if getattr(args, "strict", False) else "replace"


def announce_unknown(source: SourceInput, label: str) -> None:
    """Say on stderr which characters became the unknown token (the output line stays clean)."""
    if source.unknown:
        shown = " ".join(repr(character) for character in source.unknown[:10])
        print(f"attnviz: warning: {label}: the model's vocabulary has no token for {shown}; each became its "
              f"unknown token (--strict refuses such text)", file=sys.stderr)


def announce_truncation(source: SourceInput, label: str, limit: int) -> None:
    if source.truncated:
        print(f"attnviz: warning: {label} has {source.original_length} tokens; only the first {limit} are used "
              f"(the model's maximum length)", file=sys.stderr)


def decode_one(args: argparse.Namespace) -> DecodeResult:
    """The best result for ``args.text``: forced to ``args.target`` when given, else greedy or beam."""
    from models.decoding import finish
    from models.translator import decoding_mode

    translator = open_translator(args)
    source = translator.source(args.text, unknown=unknown_mode(args))
    announce_unknown(source, "the text")
    announce_truncation(source, "the text", translator.config.max_len)
    target = translator.target(args.target, unknown=unknown_mode(args)) if args.target is not None else None
    steps = translator.decode(source, mode=decoding_mode(args.beam, target is not None), beam=args.beam,
                              target_ids=target, max_len=args.max_len)
    return finish(steps)[0]
