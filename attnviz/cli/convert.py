"""attnviz convert SRC -o OUT.safetensors [--format F] [--set KEY=VALUE]... [--src-vocab FILE]
[--tgt-vocab FILE] [--trust]: a checkpoint trained with other people's code → an attnviz checkpoint.

--set keys are named as in the source code (nhead, norm_first, n_head, MAX_LENGTH...); a file that lacks
one is refused with the list of what to give. Vocabulary files hold one token a line (line number = id).
Files are read without running code from them; --trust opens whole pickled models (with inert stand-ins
for their classes) and must only be used for files from a source you trust.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from models.importers.formats import FORMAT_NAMES, formats_help
from models.nn.config import parse_settings
from models.errors import InputError

from .common import add_download_option, add_output_option, hub_model_folder


NAME = "convert"
# --help: the docstring with every format of the catalogue (models/importers/formats.py) after its first paragraph.
_FIRST, _REST = __doc__.split("\n\n", 1)
DESCRIPTION = f"{_FIRST}\n\nFormats (auto-detected when --format is omitted):\n{formats_help()}\n\n{_REST}"


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(NAME, help="import a checkpoint trained with other code",
                                   description=DESCRIPTION)
    parser.add_argument("source", metavar="SRC", help="the foreign checkpoint file or folder, or a Hugging Face model "
                                                      "id in the local Hugging Face cache")
    add_output_option(parser, "the attnviz checkpoint to write (.safetensors)")
    parser.add_argument("--format", choices=FORMAT_NAMES, help="the source format (default: detected)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="a hyper-parameter the file lacks, named as in its source code (repeatable)")
    parser.add_argument("--src-lang", metavar="CODE", help="a multilingual model's source language (mBART-50: "
                                                           "en_XX; kept in the checkpoint; same as --set src_lang=)")
    parser.add_argument("--tgt-lang", metavar="CODE",
                        help="its target language, forced as the first output token (default: none)")
    parser.add_argument("--src-vocab", metavar="FILE", help="source vocabulary, one token a line")
    parser.add_argument("--tgt-vocab", metavar="FILE", help="target vocabulary, one token a line")
    parser.add_argument("--trust", action="store_true",
                        help="allow whole pickled models (classes become inert stubs); trusted files only")
    add_download_option(parser)


def run(args: argparse.Namespace) -> int:
    from models.storage.checkpoint import SUFFIX, save_checkpoint
    from models.storage.files import check_output_folder
    from models.importers import convert
    from models.importers.cached import chat_template_entry

    output = Path(args.output)
    if output.suffix != SUFFIX:
        raise InputError(f"{output}: the output file must end in {SUFFIX}")
    check_output_folder(output)  # before the conversion, not after it
    settings = parse_settings(args.set)
    for key, value in (("src_lang", args.src_lang), ("tgt_lang", args.tgt_lang)):
        if value is not None:
            settings[key] = value
    source = args.source if Path(args.source).exists() else hub_model_folder(args.source, download=args.download)
    checkpoint = convert(source, args.format, settings=settings, src_vocab=args.src_vocab,
                         tgt_vocab=args.tgt_vocab, trust=args.trust)
    provenance = {**checkpoint.provenance, "command": _command(args)}
    save_checkpoint(output, checkpoint.model, source_tokenizer=checkpoint.source_tokenizer,
                    target_tokenizer=checkpoint.target_tokenizer, provenance=provenance,
                    chat_template=chat_template_entry(source))
    config = checkpoint.config
    record = checkpoint.provenance.get("imported_from", {})
    print(f"saved {output}: {record.get('format', '?')} → {config.arch}, {checkpoint.model.parameter_count():,} "
          f"parameters", file=sys.stderr)
    return 0


def _command(args: argparse.Namespace) -> str:
    """The command line that made the checkpoint, rebuilt from the parsed arguments."""
    parts = ["attnviz", NAME, shlex.quote(str(args.source)), "-o", shlex.quote(str(args.output))]
    if args.format:
        parts += ["--format", args.format]
    parts += [part for item in args.set for part in ("--set", shlex.quote(item))]
    for option, value in (("--src-lang", args.src_lang), ("--tgt-lang", args.tgt_lang),
                          ("--src-vocab", args.src_vocab), ("--tgt-vocab", args.tgt_vocab)):
        if value:
            parts += [option, shlex.quote(str(value))]
    return " ".join(parts + (["--trust"] if args.trust else []))
