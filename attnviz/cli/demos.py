"""attnviz demos: the bundled demo checkpoints, by the name -c takes."""

from __future__ import annotations

import argparse
import json

from ..state.demos import demo_checkpoints, demo_records

NAME = "demos"


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(NAME, help="list the bundled demo checkpoints", description=__doc__)
    parser.add_argument("--json", action="store_true", help="print one JSON document")


def run(args: argparse.Namespace) -> int:
    records = demo_records()
    demos = [{"name": path.stem, "arch": records.get(path.stem, {}).get("arch", ""), "path": str(path),
              "example": next(iter(records.get(path.stem, {}).get("examples", {})), "")} for path in demo_checkpoints()]
    if args.json:
        print(json.dumps(demos, indent=2, ensure_ascii=False))
        return 0
    width = max((len(demo["name"]) for demo in demos), default=4)
    for demo in demos:
        print(f"{demo['name']:<{width}}  {demo['arch']:<24}  e.g. {demo['example']!r}")
    if demos:
        print(f"\n(files in {demo_checkpoints()[0].parent}; use a name with -c, e.g. "
              f"attnviz translate -c {demos[0]['name']} \"{demos[0]['example']}\")")
    return 0
