"""The ``attnviz`` command (the README's command list is its contract).
Subcommands run headless; only the GUI imports Qt. Answers that need no model (``--help``, ``info``, ``demos``, a
misspelt checkpoint) import no torch either.

    attnviz [CHECKPOINT|FOLDER|DEMO] [--device D] [--dtype T]   open the window (the bundled demo when none is given)
    attnviz gui ...        open the desktop app (the default when no command is given)
    attnviz info           describe a checkpoint
    attnviz translate      translate sentences
    attnviz export         write the attention of one sentence to an .npz or .csv file
    attnviz render         draw one heatmap (or all heads of a layer) to PNG or SVG
    attnviz evaluate       score a checkpoint on held-out pairs
    attnviz importance     the score drop when each attention head is switched off alone
    attnviz contributions  each pair's source contribution (ALTI+), lowest first: likely hallucinations on top
    attnviz lens           the logit lens and DecoderLens: what each layer already predicts
    attnviz patch          which positions and heads carry the difference between two sources (activation patching)
    attnviz stats          what every attention head does over a corpus
    attnviz train          train a model on sentence pairs
    attnviz convert        import a checkpoint trained with other code
    attnviz demos          list the bundled demo checkpoints

Every ``-c`` takes an attnviz checkpoint, a demo's name, a foreign checkpoint (a Hugging Face folder, a
toolkit's file) or a Hugging Face model id in the local Hugging Face cache, converted once and cached (a path that
exists wins over a demo's name, and a demo's name over a model id; ``--download`` fetches a model id the cache
lacks). User errors (bad text, bad files, impossible settings) print one
line on stderr and exit 1; argparse usage errors exit 2. A traceback means a bug.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import warnings
from typing import Sequence

from models.errors import AttnvizError, NumericalWarning, is_out_of_memory
from models.nn.precisions import PRECISIONS

from .. import __version__
from . import (contributions, convert, demos, evaluate, export, importance, info, lens, patch, render, stats, train,
               translate)
from .common import (HelpFormatter, add_download_option, checkpoint_path, error, open_checkpoint_arguments, warn,
                     window_checkpoint)

USAGE = "attnviz [CHECKPOINT|FOLDER|DEMO] [--device D] [--dtype T]\n       attnviz COMMAND [options]"
DESCRIPTION = ("See what the attention of a seq2seq model did.\n\n"
               "attnviz CHECKPOINT|FOLDER|DEMO opens the window on an attnviz checkpoint, a Hugging Face or other\n"
               "toolkit's model folder, a snapshot folder, a session file, a bundled demo's name (attnviz demos) or\n"
               "a Hugging Face model id in the local Hugging Face cache (--download fetches one); with nothing, the\n"
               "bundled demo. COMMAND runs headless; attnviz COMMAND --help says how.")
ANOTHER_RANKS_WAIT = 10.0  # seconds a process other than rank 0 gives rank 0 to say a user error first
COMMANDS = {module.NAME: module for module in (info, translate, export, render, evaluate, importance, contributions,
                                                 lens, patch, stats, train, convert, demos)}


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:  # noqa: PLR0917 (warnings' hook)
    """The core's warnings about the model's numbers as one ``attnviz: warning:`` line; others as usual."""
    if issubclass(category, NumericalWarning):
        warn(str(message))
    else:
        _default_show_warning(message, category, filename, lineno, file, line)


_default_show_warning = warnings.showwarning


def _another_rank() -> bool:
    """A process of a torchrun launch other than rank 0."""
    if "RANK" not in os.environ:  # no torchrun: torch need not load just to ask
        return False
    from models.inference.distributed import launched_rank

    return launched_rank() > 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="attnviz", usage=USAGE, description=DESCRIPTION,
                                     formatter_class=HelpFormatter)
    parser.add_argument("--version", action="version", version=f"attnviz {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    gui = subparsers.add_parser("gui", help="open the desktop app (the default when no command is given)")
    gui.add_argument("checkpoint", nargs="?", type=checkpoint_path,
                     help="a checkpoint, a bundled demo's name (see attnviz demos), another toolkit's checkpoint "
                          "or Hugging Face folder, a Hugging Face model id in the local Hugging Face cache, a snapshot "
                          "folder or a session file to open (default: the bundled demo)")
    gui.add_argument("--device", help="cpu, cuda, cuda:N or mps (default: the best available)")
    gui.add_argument("--dtype", choices=PRECISIONS,
                     help="open models with their weights in this precision (the window's Weights box; bfloat16 or "
                          "float16 halve the memory; default: the box's last choice, at first float32)")
    add_download_option(gui)
    for module in COMMANDS.values():
        module.add_parser(subparsers)
    for command in subparsers.choices.values():  # one help layout everywhere: descriptions as written, defaults shown
        command.formatter_class = HelpFormatter
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or (argv[0] not in COMMANDS and argv[0] not in ("gui", "-h", "--help", "--version")):
        argv = ["gui", *argv]
    args = build_parser().parse_args(argv)
    warnings.showwarning = _show_warning
    try:
        if args.command == "gui":
            checkpoint = window_checkpoint(args.checkpoint, download=args.download)
            from ..gui.app import run_app

            return run_app(checkpoint, args.device, weights=args.dtype)
        open_checkpoint_arguments(args)
        return COMMANDS[args.command].run(args)
    except AttnvizError as failure:
        if _another_rank():
            # Every process checks the whole input, so rank 0 meets the same error and says it; torchrun then
            # ends this process. Only an error of this process alone (a file missing on its host) is said here.
            time.sleep(ANOTHER_RANKS_WAIT)
        error(str(failure))
        return 1
    except KeyboardInterrupt:
        error("interrupted")
        return 130
    except RuntimeError as failure:
        if not is_out_of_memory(failure):
            raise
        error(f"the device ran out of memory ({str(failure).splitlines()[0]}); try --device cpu")
        return 1
    except BrokenPipeError:  # the reader went away (`attnviz ... | head`): stop quietly, like other tools
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141


if __name__ == "__main__":
    sys.exit(main())
