"""``attnviz info CHECKPOINT``: architecture, sizes, vocabularies, provenance."""

from __future__ import annotations

import argparse
import json

from .common import checkpoint_path, terminal_text

NAME = "info"


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(NAME, help="describe a checkpoint", description=__doc__)
    parser.add_argument("checkpoint", type=checkpoint_path,
                        help="an attnviz .safetensors checkpoint, or a bundled demo's name (see attnviz demos)")
    parser.add_argument("--json", action="store_true", help="print one JSON document")


def run(args: argparse.Namespace) -> int:
    from models.checkpoint import describe_checkpoint, load_checkpoint

    summary = describe_checkpoint(load_checkpoint(args.checkpoint))
    if args.json:  # JSON escapes control characters itself; lone surrogates are escaped too (ensure_ascii)
        print(json.dumps(summary, indent=2, ensure_ascii=not _encodable(summary)))
        return 0
    config = summary["config"]
    print(f"file         {terminal_text(summary['file'])}")
    print(f"architecture {summary['arch']}  ({summary['parameters']:,} parameters)")
    print(f"attention    {', '.join(summary['attention_kinds']) or 'none (no attention)'}")
    for side in ("source", "target"):
        tokenizer = summary[f"{side}_tokenizer"]
        characters = f": {tokenizer['characters']!r}" if "characters" in tokenizer else ""
        language = f", language {tokenizer['language'] or 'not chosen'}" if "languages" in tokenizer else ""
        print(terminal_text(f"{side:<12} {tokenizer['kind']} tokenizer, {tokenizer['vocab_size']} tokens"
                            f"{characters}{language}"))
    languages = summary["source_tokenizer"].get("languages") or summary["target_tokenizer"].get("languages")
    if languages:
        shown = ", ".join(languages[:20]) + (f", … ({len(languages)} in all)" if len(languages) > 20 else "")
        print(terminal_text(f"languages    {shown}  (choose with --src-lang/--tgt-lang)"))
    if summary["steps"] is not None:
        print(f"trained      {summary['steps']} steps")
    print("config       " + ", ".join(f"{key}={value}" for key, value in config.items() if key != "arch"))
    for key, value in summary["provenance"].items():
        shown = json.dumps(value, ensure_ascii=False) if isinstance(value, (dict, list)) else str(value)
        print(terminal_text(f"{key:<12} {shown}"))
    return 0


def _encodable(summary: dict) -> bool:
    """Whether the summary is valid Unicode throughout (no lone surrogates), so it prints as UTF-8."""
    try:
        json.dumps(summary, ensure_ascii=False).encode("utf-8")
        return True
    except UnicodeEncodeError:
        return False
