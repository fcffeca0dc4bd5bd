"""``attnviz info CHECKPOINT``: architecture, sizes, vocabularies, provenance."""

from __future__ import annotations

import argparse
import dataclasses
import json


from .common import checkpoint_path

from .common import terminal_text

NAME = "info"


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(NAME, help="describe a checkpoint", description=__doc__)
    parser.add_argument("checkpoint", type=checkpoint_path,
                        help="an attnviz .safetensors checkpoint, or a bundled demo's name (see attnviz demos)")
    parser.add_argument("--json", action="store_true", help="print one JSON document")


def describe(checkpoint) -> dict:
    model = checkpoint.model
    return {
        "file": str(checkpoint.path),
        "arch": model.config.arch,
        "parameters": model.parameter_count(),
        "attention_kinds": list(model.kinds),
        "config": dataclasses.asdict(model.config),
        "source_tokenizer": {"kind": checkpoint.source_tokenizer.kind, "vocab_size": checkpoint.source_tokenizer.vocab_size},
        "target_tokenizer": {"kind": checkpoint.target_tokenizer.kind, "vocab_size": checkpoint.target_tokenizer.vocab_size},
        "provenance": checkpoint.provenance,
    }


def run(args: argparse.Namespace) -> int:
    from models.checkpoint import load_checkpoint

    summary = describe(load_checkpoint(args.checkpoint))
    if args.json:  # JSON escapes control characters itself; lone surrogates are escaped too (ensure_ascii)
        print(json.dumps(summary, indent=2, ensure_ascii=not _encodable(summary)))
        return 0
    config = summary["config"]
    print(f"file         {terminal_text(summary['file'])}")
    print(f"architecture {summary['arch']}  ({summary['parameters']:,} parameters)")
    print(f"attention    {', '.join(summary['attention_kinds']) or 'none (no attention)'}")
    for side in ("source", "target"):
        tokenizer = summary[f"{side}_tokenizer"]
        print(f"{side:<12} {tokenizer['kind']} tokenizer, {tokenizer['vocab_size']} tokens")
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
