"""Options and helpers the subcommands share.

The command modules load torch only when a command runs (inside functions), so that `attnviz --help`,
`--version` and the desktop app's first frame do not wait for it.
"""

from __future__ import annotations

import argparse
import codecs
import contextlib
import difflib
import math
import os
import shutil
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from models.errors import AttnvizError, CheckpointError, InputError
from models.nn.precisions import EXACT, PRECISIONS
from models.inference.modes import MAX_BEAM, MIN_BEAM, decoding_mode

from ..state.demos import demo_checkpoints, demo_name, demo_path, demo_reference_pairs

if TYPE_CHECKING:
    from models.nn.ablation import Ablation
    from models.trace.records import DecodeResult
    from models.inference.translator import SourceInput, Translator

MAX_OUTPUT_TOKENS = 100_000
CHECKPOINT_HELP = ("an attnviz .safetensors checkpoint, a bundled demo's name (see attnviz demos), another "
                   "toolkit's checkpoint or Hugging Face folder, or a Hugging Face model id such as "
                   "Helsinki-NLP/opus-mt-en-de found in the local Hugging Face cache (converted once, then read from "
                   "attnviz's cache)")
DOWNLOAD_HELP = ("fetch a Hugging Face model id that the local Hugging Face cache lacks from the Hub (its config, "
                 "weights and tokenizer files, with a progress bar; default: never download)")


def error(message: str) -> None:
    """A user error's one line on stderr (the command then exits 1)."""
    print(f"attnviz: error: {message}", file=sys.stderr)


def note(message: str) -> None:
    """A note's one line on stderr: what the command is doing that takes a while (downloading, converting)."""
    print(f"attnviz: note: {message}", file=sys.stderr)


def warn(message: str) -> None:
    """A warning's one line on stderr: the command goes on (every command's warnings take this form)."""
    print(f"attnviz: warning: {message}", file=sys.stderr)


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Descriptions as written (their tables and lists line up), and every option's default at the end of
    its help unless the help already says what happens without it."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        default = action.default
        if (not action.option_strings or "default" in text or default is None or default is False
                or default is argparse.SUPPRESS or default == []):
            return text
        return text + " (default: %(default)s)"


def add_output_option(parser: argparse.ArgumentParser, help: str, *, required: bool = True,
                      old_spelling: str | None = None) -> None:
    """``-o/--output``, the one spelling of "the file to write"; ``old_spelling`` stays accepted, unlisted."""
    group = parser.add_mutually_exclusive_group(required=required)
    group.add_argument("-o", "--output", metavar="PATH", help=help)
    if old_spelling:
        group.add_argument(old_spelling, dest="output", default=argparse.SUPPRESS, help=argparse.SUPPRESS)


def int_range(low: int, high: int | None = None):
    """An argparse ``type`` for an integer in ``[low, high]``: out of range is a usage error naming it."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not an integer: {text[:40]!r}") from None
        if value < low or (high is not None and value > high):
            wanted = f"at least {low}" if high is None else f"between {low} and {high}"
            raise argparse.ArgumentTypeError(f"must be {wanted}; got {value}")
        return value
    return parse


def finite_float(text: str) -> float:
    """An argparse ``type`` for a finite number (``nan`` and ``inf`` are refused)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text[:40]!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be a finite number; got {text[:40]!r}")
    return value


def encoding_name(text: str) -> str:
    """An argparse ``type`` for a text encoding Python knows (utf-8, latin-1, utf-16...)."""
    try:
        return codecs.lookup(text).name
    except LookupError:
        raise argparse.ArgumentTypeError(f"unknown text encoding {text[:40]!r}") from None


def argument_text(text: str, label: str) -> str:
    """``text`` from the command line, refused with its position if it is not valid UTF-8 (Python hands
    undecodable argv bytes over as lone surrogates, which no tokenizer or terminal can take)."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError as error:
        try:
            os.fsencode(text).decode("utf-8")
        except UnicodeEncodeError:  # a surrogate that did not come from bytes
            raise InputError(f"{label}: a lone surrogate U+{ord(text[error.start]):04X} at character "
                             f"{error.start + 1}, not text") from None
        except UnicodeDecodeError as bad:
            raise InputError(f"{label}: not UTF-8 text (byte 0x{bad.object[bad.start]:02x} at byte offset "
                             f"{bad.start})") from None
    return text


def input_lines(encoding: str) -> list[str]:
    """The lines of standard input (``\\n`` or ``\\r\\n`` ends), decoded with ``encoding``; bad bytes are one
    error naming the line and column."""
    from models.text.pairs import decode_lines

    lines = decode_lines(sys.stdin.buffer.read(), "standard input", encoding)
    if lines and lines[-1] == "":  # the text ended with a line end
        lines.pop()
    return lines


def each_input_line(encoding: str) -> tuple[list[str | None], dict[int, str]]:
    """The lines of standard input as :func:`input_lines` reads them, but a line with bytes that are not UTF-8 is
    None, its one-line error kept by line number (models/text/pairs.py ``decode_each_line``)."""
    from models.text.pairs import decode_each_line

    lines, bad = decode_each_line(sys.stdin.buffer.read(), "standard input", encoding)
    if lines and lines[-1] == "":  # the text ended with a line end
        lines.pop()
    return lines, bad


class _Lines:
    """Where a command's output lines go when no progress bar is shown: straight to stdout."""

    @staticmethod
    def write(text: str) -> None:
        print(text, flush=True)

    def update(self, count: int = 1) -> None:
        pass


@contextlib.contextmanager
def progress_bar(total: int, *, enabled: bool = True, unit: str = "line"):
    """A progress bar on stderr (tqdm) for a job of ``total`` items longer than the terminal has lines, when stderr
    is a terminal and ``enabled``; yields what takes the output lines (``write``) and the progress (``update``):
    lines written through it go to stdout above the bar."""
    if not (enabled and sys.stderr.isatty() and total > shutil.get_terminal_size().lines):
        yield _Lines()
        return
    from tqdm import tqdm

    with tqdm(total=total, file=sys.stderr, unit=unit, leave=False, dynamic_ncols=True) as bar:
        yield _Bar(bar)


class _Bar:
    """Output lines written above a tqdm bar (on stdout), and the bar's progress."""

    def __init__(self, bar) -> None:
        self.bar = bar

    def write(self, text: str) -> None:
        self.bar.write(text, file=sys.stdout)

    def update(self, count: int = 1) -> None:
        self.bar.update(count)


def add_batching_options(parser: argparse.ArgumentParser) -> None:
    """``--batch-size`` and ``--batch-tokens``: how many inputs are decoded at once (models/inference/corpus.py)."""
    from models.inference.batch_sizes import DEFAULT_BATCH_SIZE, DEFAULT_BATCH_TOKENS

    parser.add_argument("--batch-size", type=int_range(1), default=DEFAULT_BATCH_SIZE, metavar="N",
                        help="decode at most N inputs at once (1: one at a time)")
    parser.add_argument("--batch-tokens", type=int_range(1), default=DEFAULT_BATCH_TOKENS, metavar="N",
                        help="at most N tokens a batch: its inputs, times the beam, times the longest of them")


def batching_of(args: argparse.Namespace):
    """The ``Batching`` (models/inference/corpus.py) ``--batch-size`` and ``--batch-tokens`` ask for."""
    from models.inference.corpus import Batching

    return Batching(tokens=args.batch_tokens, size=args.batch_size)


def announce_unknown_inputs(sources: list, *, verbose: bool) -> None:
    """Say on stderr which inputs had characters the vocabulary lacks: one line for them all, each input's own
    line with ``verbose`` (or when there is one input). ``sources``: each input's ``SourceInput``, or None."""
    present = [(number, source) for number, source in enumerate(sources, 1) if source is not None]
    lacking = [(number, source) for number, source in present if source.unknown]
    if verbose or len(sources) == 1:
        for number, source in lacking:
            announce_unknown(source, f"input {number}")
        return
    if not lacking:
        return
    characters = list(dict.fromkeys(character for _, source in lacking for character in source.unknown))
    shown = " ".join(repr(character) for character in characters[:10]) + (" …" if len(characters) > 10 else "")
    warn(f"{len(lacking)} of {len(present)} inputs had characters the vocabulary lacks: {shown}; each became its "
         f"unknown token (--verbose names the inputs; --strict refuses such text)")


def terminal_text(text: str) -> str:
    """``text`` safe to print: control characters (escape sequences that clear the screen or set the
    title) and lone surrogates shown as escapes, everything else as is."""
    return "".join(char if char.isprintable() or char == " " else repr(char)[1:-1] for char in text)


def add_model_options(parser: argparse.ArgumentParser, *, required: bool = True, chat: bool = True) -> None:
    """The options that open a model; ``chat``: the command reads a prompt, so ``--chat``/``--system`` lay it out with
    a chat-tuned model's chat template (``prompt_source``)."""
    parser.add_argument("-c", "--checkpoint", required=required, type=checkpoint_path, help=CHECKPOINT_HELP)
    add_download_option(parser)
    parser.add_argument("--device", help="cpu, cuda, cuda:N or mps (default: the best available)")
    parser.add_argument("--src-lang", metavar="CODE", help="source language of a multilingual model (e.g. en_XX, "
                                                           "eng_Latn; default: the one chosen when it was converted)")
    parser.add_argument("--tgt-lang", metavar="CODE", help="target language of a multilingual model")
    parser.add_argument("--dtype", choices=PRECISIONS, default=EXACT,
                        help="keep the weights in this precision: bfloat16 or float16 halve the memory a large model "
                             "needs (attention is still traced and written as float32; default: float32)")
    parser.add_argument("--tf32", action="store_true",
                        help="on a GPU, let float32 use TF32: faster, numbers about 1e-4 to 1e-3 apart from the "
                             "CPU's (default: exact, unless the environment sets ATTNVIZ_TF32=1)")
    if chat:
        parser.add_argument("--chat", action="store_true",
                            help="a chat-tuned language model: the text is the user's message, laid out by the "
                                 "model's chat template up to where the assistant's answer begins")
        parser.add_argument("--system", metavar="TEXT", help="with --chat: the system message before the user's")


def add_download_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--download", action="store_true", help=DOWNLOAD_HELP)


def add_ig_steps_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--ig-steps", type=int, metavar="N",
                        help="integrated gradients with exactly N Gauss-Legendre steps, 1-1024 (default: 16, doubled "
                             "for the output steps whose attributions miss log p(x) - log p(baseline) by over 5%%, "
                             "up to 128)")


def add_beam_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--beam", type=int_range(MIN_BEAM, MAX_BEAM), default=MIN_BEAM, metavar="K",
                        help=f"beam width (1 = greedy; default 1; at most {MAX_BEAM})")


def add_decoding_options(parser: argparse.ArgumentParser) -> None:
    add_beam_option(parser)
    parser.add_argument("--max-len", type=int_range(1, MAX_OUTPUT_TOKENS), metavar="N",
                        help="stop after N output tokens (default: the model's maximum)")
    parser.add_argument("--strict", action="store_true",
                        help="refuse text with characters the vocabulary lacks (default: they become the unknown "
                             "token, with a warning)")
    parser.add_argument("--replace-unknown", action="store_true", help=argparse.SUPPRESS)  # the default now
    add_ablation_option(parser)


def add_ablation_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--ablate", action="append", default=[], metavar="KIND:LAYER:HEAD",
                        help="switch a head off (its output zeroed) before decoding, e.g. cross:0:1; HEAD * = the "
                             "whole layer; repeatable. KIND: enc_self, dec_self or cross; layers and heads count "
                             "from 0")


def ablation_for(args: argparse.Namespace, translator: Translator) -> Ablation:
    """The ``--ablate`` specs, checked against the translator's model (one line naming a head it lacks)."""
    from models.nn.ablation import Ablation

    return Ablation.parse(getattr(args, "ablate", None) or []).validate(translator.model.attention_shape())


def checkpoint_path(text: str) -> str:
    """A checkpoint path as given, or the file of the bundled demo called ``text`` when no such file exists."""
    demo = demo_path(text) if not Path(text).exists() else None
    return str(demo) if demo is not None else text


def unknown_checkpoint(text: str) -> InputError:
    """What a ``-c`` that is neither a file nor a demo's name gets: the demos' names, the nearest first."""
    names = [path.stem for path in demo_checkpoints()]
    nearest = difflib.get_close_matches(text, names, n=1, cutoff=0.5)
    guess = f"did you mean {nearest[0]}? " if nearest else ""
    return InputError(f"{text}: no such file, nor a bundled demo's name, nor a model in the local Hugging Face cache "
                      f"(--download fetches one); {guess}(demos: {', '.join(names)})")


def model_shape(args: argparse.Namespace) -> dict[str, tuple[int, int]]:
    """``args.checkpoint`` checked, and per attention kind its ``(layers, heads)``, from the file's header
    alone (no weight is read, no torch), with ``--ablate`` checked against it: mistakes are answered before the
    seconds a model takes to load."""
    from models.nn.ablation import Ablation
    from models.nn.config import attention_shape, config_from_dict
    from models.storage.metadata import read_metadata

    path = Path(model_file(args.checkpoint))
    document = read_metadata(path)
    try:
        config = config_from_dict(document["config"])
    except AttnvizError as error:
        raise CheckpointError(path, f"bad metadata: {error}") from None
    shape = attention_shape(config)
    Ablation.parse(getattr(args, "ablate", None) or []).validate(shape)
    if getattr(args, "system", None) is not None and not getattr(args, "chat", False):
        raise InputError("--system is the system message of a chat prompt: add --chat")
    return shape


CHECKPOINT_ARGUMENTS = ("checkpoint", "path", "compare")  # what names a model to open: -c, info's path, --compare


def open_checkpoint_arguments(args: argparse.Namespace) -> None:
    """Each checkpoint a command was given (``CHECKPOINT_ARGUMENTS``) made the attnviz checkpoint to open:
    a misspelt name is one line with the demos' names (no torch imported for it); a Hugging Face folder,
    a Hugging Face model id or another toolkit's file is converted once and read from the cache after that
    (``model_file``)."""
    for name in CHECKPOINT_ARGUMENTS:
        value = getattr(args, name, None)
        if isinstance(value, str):
            setattr(args, name, model_file(value, download=getattr(args, "download", False)))


def model_file(text: str, *, download: bool = False) -> str:
    """The attnviz checkpoint ``text`` names, in this order: a file or folder of that name (an attnviz checkpoint
    or a demo's file as it is; a foreign one, a Hugging Face folder or a toolkit's file, converted once into the
    cache folder ``converted_cache``, as the window opens it); a bundled demo's name (``checkpoint_path`` has
    made it the demo's file already); a Hugging Face model id in the local Hugging Face cache (converted once
    too), or, with ``download``, fetched into that cache first. Anything else is one line (the nearest demo's
    name when it looks like one)."""
    from models.storage.metadata import is_native

    path = Path(text)
    if not path.exists():
        return hub_model_file(text, download=download)
    if is_native(path):
        return text
    from models.storage.snapshots import is_series

    if is_series(path):  # the window opens these whole; a command reads one model
        last = sorted(path.glob("*.safetensors"))[-1]
        raise CheckpointError(path, f"a folder of snapshots (attnviz checkpoints): give one of them, e.g. {last}; "
                                    f"attnviz render --snapshots {text} draws every one")
    return converted_model_file(path, text)


def hub_model_file(text: str, *, download: bool) -> str:
    """The attnviz checkpoint made once from the Hugging Face model id ``text`` (``hub_model_folder``)."""
    folder = hub_model_folder(text, download=download)
    return converted_model_file(folder, text, name=text.rsplit("/", 1)[-1], origin={"model_id": text})


def hub_model_folder(text: str, *, download: bool) -> Path:
    """The model folder of the Hugging Face model id ``text`` (``models/storage/hub.py``): found in the local Hugging
    Face cache, or downloaded with ``download``. ``text`` that is no model id, or one the cache lacks without
    ``download``, is one line."""
    from models.storage.hub import is_model_id, looks_like_file, model_folder, not_cached_reason

    bare = "/" not in text and os.sep not in text
    if is_model_id(text) and not looks_like_file(text):
        folder = model_folder(text, download=download, announce=note)
        if folder is not None:
            return folder
        if not bare:
            raise CheckpointError(text, f"no such file, and {not_cached_reason(text)}")
    if bare and Path(text).suffix == "":  # a bare name is more often a misspelt demo than a model of the Hub
        raise unknown_checkpoint(text)
    raise CheckpointError(text, "no such file")  # the words scripts match, as every missing file gets


def window_checkpoint(text: str | None, *, download: bool = False) -> str | None:
    """What the window opens for ``attnviz CHECKPOINT``: ``text`` as it is (a file, a folder, a demo's file, a
    session), unless it names nothing here and is a Hugging Face model id in the local Hugging Face cache (or to be
    downloaded): then the attnviz checkpoint converted from it once, as every command opens it (``model_file``)."""
    if text is None or Path(text).exists():
        return text
    from models.storage.hub import cached_model_folder, is_model_id, looks_like_file

    if not is_model_id(text) or looks_like_file(text):
        return text  # the window says what is wrong with it
    if "/" not in text and not download and cached_model_folder(text) is None:
        return text
    return model_file(text, download=download)


def converted_model_file(path: Path, text: str, *, name: str | None = None,
                         origin: dict[str, str] | None = None) -> str:
    """The attnviz checkpoint converted from the foreign checkpoint ``path`` (given as ``text``): from the cache
    without torch when it was converted before, else converted now and kept."""
    from models.storage.converted import cached_path

    cached = cached_path(path, converted_cache(), name=name)
    if cached.is_file():  # converted before: no torch until the model loads
        return str(cached)
    from models.importers.cached import converted_file

    try:
        return str(converted_file(path, converted_cache(), name=name, origin=origin))
    except CheckpointError as failure:
        if "attnviz convert" in failure.reason:
            raise
        raise CheckpointError(failure.path, f"not an attnviz checkpoint, nor one attnviz converts by itself "
                                            f"({failure.reason}); attnviz convert {text} -o MODEL.safetensors "
                                            "takes --format, --set and vocabularies") from None


def converted_cache() -> Path:
    """Where foreign checkpoints converted for ``-c`` are kept: ``$XDG_CACHE_HOME/attnviz/converted`` (by default
    ``~/.cache/attnviz/converted``); deleting it costs only a conversion the next time."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "attnviz" / "converted"


def selection_problem(shape: dict[str, tuple[int, int]], kind: str, layer: int, *, head: int | str) -> str:
    """Why a model of attention ``shape`` has no heatmap at ``kind``/``layer``/``head`` ('' when it has one)."""
    from models.trace.records import KINDS

    if kind not in shape:
        have = ", ".join(name for name in KINDS if name in shape) or "no attention at all"
        return f"this model has no {kind} attention (it has {have})"
    layers, heads = shape[kind]
    if not 0 <= layer < layers:
        return f"--layer must be below {layers} for {kind}; got {layer}"
    if isinstance(head, int) and not 0 <= head < heads:
        return f"--head must be below {heads} for {kind}; got {head}"
    return ""


def add_corpus_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data", metavar="PAIRS.tsv", help="pairs, source<TAB>target per line (default: the "
                                                            "reference translations of a bundled demo given to -c)")
    parser.add_argument("--limit", type=int_range(1), metavar="N", help="only the first N pairs (default: all)")


def corpus_pairs(args: argparse.Namespace) -> tuple[list[tuple[str, str]], str]:
    """The pairs to score (``--data``, else the demo's own references, each cut to ``--limit``) and what they
    are, for the output."""
    from models.text.pairs import read_pairs

    if args.data is not None and set(model_shape(args)) == {"enc_self"}:  # lines with masks or plain sentences
        from models.analysis.encoder_only import masked_corpus
        from models.text.pairs import _read_lines

        pairs = masked_corpus(_read_lines(Path(args.data)))[: args.limit]
        if not pairs:
            raise InputError(f"{args.data}: no sentences")
        return pairs, f"{len(pairs)} sentences from {args.data}"
    if args.data is not None:
        pairs = read_pairs(args.data)[: args.limit]
        return pairs, f"{len(pairs)} pairs from {args.data}"
    pairs = demo_reference_pairs(args.checkpoint)[: args.limit]
    if not pairs:
        raise InputError("--data is required for a checkpoint that is not a bundled demo")
    return pairs, f"{len(pairs)} reference pairs of the bundled demo {demo_name(args.checkpoint)}"


def open_translator(args: argparse.Namespace) -> Translator:
    model_shape(args)  # mistakes answered before torch is imported
    from models.storage.checkpoint import WEIGHT_DTYPES, load_checkpoint
    from models.inference.translator import Translator, resolve_device, use_idle_cores

    use_idle_cores()
    checkpoint = load_checkpoint(args.checkpoint, resolve_device(args.device),  # each tensor read straight there
                                 dtype=WEIGHT_DTYPES[getattr(args, "dtype", "float32")])
    translator = Translator(checkpoint, args.device, tf32=True if getattr(args, "tf32", False) else None)
    translator.set_languages(getattr(args, "src_lang", None), getattr(args, "tgt_lang", None))
    return translator


def say_if_rounded(translator: Translator) -> None:
    """On stderr, the one line saying that what follows comes from weights rounded to 16 bits (``--dtype``)."""
    from models.nn.precisions import rounded_weights_notice
    from models.storage.checkpoint import weights_name

    notice = rounded_weights_notice(weights_name(translator.model))
    if notice:
        print(f"attnviz: note: {notice}", file=sys.stderr)


def unknown_mode(args: argparse.Namespace) -> str:
    return "error" if getattr(args, "strict", False) else "replace"


def prompt_source(args: argparse.Namespace, translator: Translator, text: str | None = None) -> SourceInput:
    """``text`` (default ``args.text``) encoded as the arguments say: with ``--chat`` the user's turn laid out by the
    model's chat template after ``--system``'s message (one line when the model has no template), else as it is;
    ``--strict`` refuses characters the vocabulary lacks. Every command that reads a prompt encodes it here."""
    text = args.text if text is None else text
    if getattr(args, "chat", False):
        return translator.chat_source(text, args.system, unknown=unknown_mode(args))
    return translator.source(text, unknown=unknown_mode(args))


def announce_unknown(source: SourceInput, label: str) -> None:
    """Say on stderr which characters became the unknown token (the output line stays clean)."""
    if source.unknown:
        warn(f"{label}: {source.unknown_notice()} (--strict refuses such text)")


def announce_truncation(source: SourceInput, label: str, limit: int) -> None:
    if source.truncated:
        warn(f"{label} {source.truncation_notice(limit)}")


def fill_one(args: argparse.Namespace, translator: Translator | None = None):
    """An encoder-only model's run on ``args.text`` (models/inference/fill_mask.py's ``FillResult``: each mask's top
    5, the enc_self trace); what there was not to fill is a note on stderr. ``--target`` is refused in one line."""
    from models.inference.fill_mask import fill_masks

    if getattr(args, "target", None) is not None:
        raise InputError("an encoder-only model has no output to force: leave out --target")
    translator = translator or open_translator(args)
    source = prompt_source(args, translator)
    announce_unknown(source, "the text")
    announce_truncation(source, "the text", translator.config.max_len)
    result = fill_masks(translator, source, ablation=ablation_for(args, translator))
    if result.note:
        note(result.note)
    return result


def decode_one(args: argparse.Namespace, translator: Translator | None = None) -> DecodeResult:
    """The best result for ``args.text``: forced to ``args.target`` when given, else greedy or beam (with
    ``translator``, else the one ``args`` opens)."""
    from models.inference.decoding import finish

    translator = translator or open_translator(args)
    ablation = ablation_for(args, translator)
    source = prompt_source(args, translator)
    announce_unknown(source, "the text")
    announce_truncation(source, "the text", translator.config.max_len)
    target = translator.target(args.target, unknown=unknown_mode(args)) if args.target is not None else None
    mode = decoding_mode(args.beam, target is not None)
    # its float32 trace, checked as the window checks a run: one line rather than a process killed part way
    translator.check_room_for(translator.trace_size(source, mode=mode, beam=args.beam, target_ids=target,
                                                    max_len=args.max_len))
    steps = translator.decode(source, mode=mode, beam=args.beam, target_ids=target, max_len=args.max_len,
                              ablation=ablation)
    return finish(steps)[0]


def add_contrast_options(parser: argparse.ArgumentParser) -> None:
    """--contrast TOKEN and --contrast-step N: the gradient methods and ALTI-Logit explain logit(y) − logit(TOKEN)."""
    parser.add_argument("--contrast", metavar="TOKEN",
                        help="explain why the output token and not TOKEN (Yin & Neubig 2022): the gradient methods "
                             "and ALTI-Logit explain logit(y) - logit(TOKEN) instead of the token's own score; TOKEN "
                             "as the output's tokens are labelled, or a text the target vocabulary encodes as one "
                             "token (default: no contrast)")
    parser.add_argument("--contrast-step", type=int, metavar="N",
                        help="the output step, from 0, that --contrast explains (default: every step)")


def contrast_for(args: argparse.Namespace, translator: Translator, steps: int) -> tuple[int | None, ...] | None:
    """The contrast ``--contrast`` and ``--contrast-step`` ask for, per output step of an output of ``steps`` tokens
    (models/analysis/contrast.py), or None; a token the target vocabulary lacks or a step beyond the output: one
    line."""
    if getattr(args, "contrast", None) is None:
        if getattr(args, "contrast_step", None) is not None:
            raise InputError("--contrast-step says which step --contrast TOKEN explains: give --contrast too")
        return None
    from models.analysis.contrast import every_step, one_step

    token = contrast_token(translator.target_tokenizer, args.contrast)
    if args.contrast_step is None:
        return every_step(steps, token)
    return one_step(steps, args.contrast_step, token)


def contrast_token(tokenizer, text: str) -> int:
    """The id of the output token labelled ``text`` (as the window and the heatmaps label it), else of the one
    token the vocabulary encodes ``text`` as; anything else is one line."""
    framing = {tokenizer.bos_id, tokenizer.eos_id}
    labelled = next((token_id for token_id in range(tokenizer.vocab_size) if tokenizer.token(token_id) == text), None)
    if labelled is not None:
        return labelled
    try:
        ids = [token_id for token_id in tokenizer.encode(text) if token_id not in framing]
    except InputError:  # characters the vocabulary lacks, or no text
        ids = []
    if len(ids) == 1 and ids[0] != tokenizer.unk_id:
        return ids[0]
    spelt = f": it is {len(ids)} tokens ({' '.join(tokenizer.tokens(ids))})" if len(ids) > 1 else ""
    raise InputError(f"contrast token {text!r} is not in the model's target vocabulary{spelt}")
