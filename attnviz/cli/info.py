"""attnviz info -c CHECKPOINT: architecture, sizes, vocabularies, how it was trained, its config and provenance
(a decoder-only language model: its heads and key/value heads, its context, its tokenizer and end tokens).

The checkpoint may also be given alone: attnviz info CHECKPOINT.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from models.errors import InputError
from models.nn.config import DECODER_ARCHS

from ..state.fields import FieldRow, field_rows, tokenizer_lines
from .common import CHECKPOINT_HELP, add_download_option, checkpoint_path, model_shape, terminal_text

NAME = "info"
SUMMARISED = ("steps", "snapshot")  # provenance entries the "trained" line already says


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(NAME, help="describe a checkpoint", description=__doc__)
    parser.add_argument("-c", "--checkpoint", type=checkpoint_path, help=CHECKPOINT_HELP)
    parser.add_argument("path", nargs="?", type=checkpoint_path, help=argparse.SUPPRESS)
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    add_download_option(parser)


def run(args: argparse.Namespace) -> int:
    from models.storage.metadata import describe_file

    if args.checkpoint is not None and args.path is not None and args.checkpoint != args.path:
        raise InputError("give the checkpoint once: -c CHECKPOINT (or the path alone)")
    args.checkpoint = args.checkpoint or args.path
    if args.checkpoint is None:
        raise InputError("which checkpoint? give -c CHECKPOINT (a file, or a demo's name: see attnviz demos)")
    model_shape(args)
    summary = describe_file(args.checkpoint)  # the header only: no weight is read
    if args.json:  # JSON escapes control characters itself; lone surrogates are escaped too (ensure_ascii)
        print(json.dumps(summary, indent=2, ensure_ascii=not _encodable(summary)))
        return 0
    for line in summary_lines(summary):
        print(terminal_text(line))
    return 0


def summary_lines(summary: dict[str, Any]) -> list[str]:
    lines = [row("file", summary["file"]),
             row("architecture", f"{summary['arch']}  ({summary['parameters']:,} parameters)"),
             row("attention", ", ".join(summary["attention_kinds"]) or "none (no attention)")]
    if summary["arch"] in DECODER_ARCHS:
        return lines + decoder_only_lines(summary)
    lines += [row(label, text) for label, text in tokenizer_lines(
        summary["arch"], *(tokenizer_text(summary[f"{side}_tokenizer"]) for side in ("source", "target")))]
    languages = summary["source_tokenizer"].get("languages") or summary["target_tokenizer"].get("languages")
    if languages:
        shown = ", ".join(languages[:20]) + (f", … ({len(languages)} in all)" if len(languages) > 20 else "")
        lines.append(row("languages", f"{shown}  (choose with --src-lang/--tgt-lang)"))
    trained = trained_text(summary["provenance"])
    if trained:
        lines.append(row("trained", trained))
    config = {key: value for key, value in summary["config"].items() if key != "arch"}
    lines += ["", "config"] + field_lines(config)
    provenance = {key: value for key, value in summary["provenance"].items() if key not in SUMMARISED}
    if provenance:
        lines += ["", "provenance"] + field_lines(provenance)
    return lines


def decoder_only_lines(summary: dict[str, Any]) -> list[str]:
    """A decoder-only language model's: its heads, its context, its one tokenizer, its end tokens, then its config
    and provenance."""
    config = summary["config"]
    heads, kv_heads = config.get("heads"), config.get("kv_heads") or config.get("heads")
    grouped = f", {kv_heads} key/value heads (each read by {heads // kv_heads})" if kv_heads != heads else ""
    tokenizer = summary["source_tokenizer"]
    ends = [config.get("eos_id"), *(config.get("stop_ids") or [])]
    lines = [row("model", f"a language model continuing a prompt: {config.get('layers')} layers of {heads} "
                          f"heads{grouped}"),
             row("context", f"{config.get('max_len')} positions, prompt and continuation together"),
             *(row(label, text) for label, text in tokenizer_lines(summary["arch"], tokenizer_text(tokenizer), "")),
             row("ends", f"token {', '.join(str(end) for end in ends)}")]
    lines += ["", "config"] + field_lines({key: value for key, value in config.items() if key != "arch"})
    provenance = {key: value for key, value in summary["provenance"].items() if key not in SUMMARISED}
    if provenance:
        lines += ["", "provenance"] + field_lines(provenance)
    return lines


def tokenizer_text(tokenizer: dict[str, Any]) -> str:
    """One tokenizer as ``attnviz info`` names it: its kind, its vocabulary, its characters and language."""
    characters = f": {tokenizer['characters']!r}" if "characters" in tokenizer else ""
    language = f", language {tokenizer['language'] or 'not chosen'}" if "languages" in tokenizer else ""
    return f"{tokenizer['kind']} tokenizer, {tokenizer['vocab_size']} tokens{characters}{language}"


def row(label: str, value: str) -> str:
    return f"{label:<12} {value}"


def trained_text(provenance: dict[str, Any]) -> str:
    """How far training went, against what was planned: a run stopped at 3,000 of 20,000 steps says so
    ('' for a checkpoint that records no steps, e.g. an imported one)."""
    steps = provenance.get("steps")
    if not _is_count(steps):
        return ""
    training = provenance.get("training")
    planned = training.get("steps") if isinstance(training, dict) else None
    text = f"{steps:,} steps"
    if _is_count(planned) and planned != steps:
        text = f"{steps:,} of {planned:,} planned steps"
        if isinstance(provenance.get("snapshot"), dict):
            text += " (a snapshot taken during the run)"
        elif steps < planned:
            text += " (stopped early)"
    return text


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def field_lines(fields: dict[str, Any], indent: str = "  ") -> list[str]:
    """``key: value`` lines with each map's values aligned; a nested map as its own indented block, an empty one
    not at all (a format with nothing of its own to say prints no ``details: {}``; ``--json`` keeps every key)."""
    rows = field_rows(fields)
    lines = []
    for index, entry in enumerate(rows):
        margin = indent * (entry.depth + 1)
        if entry.value is None:
            lines.append(f"{margin}{entry.key}:")
            continue
        width = max(len(other.key) for other in _siblings(rows, index)) + 1
        lines.append(f"{margin}{entry.key + ':':<{width}} {entry.value}")
    return lines


def _siblings(rows: list[FieldRow], index: int) -> list[FieldRow]:
    """The rows of the map row ``index`` lies in (its own entries, not those of maps nested in it)."""
    depth = rows[index].depth
    start = index
    while start > 0 and rows[start - 1].depth >= depth:
        start -= 1
    end = index
    while end + 1 < len(rows) and rows[end + 1].depth >= depth:
        end += 1
    return [row for row in rows[start: end + 1] if row.depth == depth]


def _encodable(summary: dict) -> bool:
    """Whether the summary is valid Unicode throughout (no lone surrogates), so it prints as UTF-8."""
    try:
        json.dumps(summary, ensure_ascii=False).encode("utf-8")
        return True
    except UnicodeEncodeError:
        return False
