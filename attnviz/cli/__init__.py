"""The ``attnviz`` command (the README's command list is its contract).
Subcommands run headless; only the GUI imports Qt.

    attnviz [CHECKPOINT]            open the GUI (the bundled demo when none is given)
    attnviz info|translate|export|train ...

User errors (bad text, bad files, impossible settings) print one line on stderr and exit 1; argparse
usage errors exit 2. A traceback means a bug.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import warnings
from typing import Sequence

from models.errors import AttnvizError, NumericalWarning

from .. import __version__
from . import contributions, convert, demos, evaluate, export, importance, info, render, stats, train, translate
from .common import HelpFormatter, checkpoint_path, open_checkpoint_arguments

ANOTHER_RANKS_WAIT = 10.0  # seconds a process other than rank 0 gives rank 0 to say a user error first
COMMANDS = {module.NAME: module for module in (info, translate, export, render, evaluate, importance, contributions,
                                                 stats, train, convert, demos)}


def error(message: str) -> None:
    print(f"attnviz: error: {message}", file=sys.stderr)


def warn(message: str) -> None:
    print(f"attnviz: warning: {message}", file=sys.stderr)


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
    parser = argparse.ArgumentParser(prog="attnviz", description="See what the attention of a seq2seq model did.",
                                     formatter_class=HelpFormatter)
    parser.add_argument("--version", action="version", version=f"attnviz {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    gui = subparsers.add_parser("gui", help="open the desktop app (the default when no command is given)")
    gui.add_argument("checkpoint", nargs="?", type=checkpoint_path,
                     help="a checkpoint, a bundled demo's name (see attnviz demos), a snapshot folder or a session "
                          "file to open (default: the bundled demo)")
    gui.add_argument("--device", help="cpu, cuda, cuda:N or mps (default: the best available)")
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
            from ..gui.app import run_app

            return run_app(args.checkpoint, args.device)
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
        if "out of memory" not in str(failure).lower():
            raise
        error(f"the device ran out of memory ({str(failure).splitlines()[0]}); try --device cpu")
        return 1
    except BrokenPipeError:  # the reader went away (`attnviz ... | head`): stop quietly, like other tools
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141


if __name__ == "__main__":
    sys.exit(main())
