"""Decoding costs on a 6-layer × 8-head, d_model 512 Transformer (random weights, CPU unless --device).

1. Trace capture overhead: greedy decoding with every attention row captured (per-head weights copied to
   the host each step) vs the same decoding with ``need_weights=False`` (torch's fused attention).
2. KV cache: cached incremental decoding vs recomputing the whole prefix every step, at 25/50/100 tokens.

    python benchmarks/decoding.py [--device cuda] [--repeats 5] [--threads 1]
"""

from __future__ import annotations

import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.common import big_transformer, median_seconds  # noqa: E402
from models.inference.decoding import finish, greedy


def decode(model, source, steps: int, **options) -> None:
    results = finish(greedy(model, source, max_len=steps, **options))
    assert len(results[0].token_ids) == steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--source-len", type=int, default=30)
    parser.add_argument("--threads", type=int, help="torch threads (the app leaves one core to the GUI)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    model = big_transformer(device=args.device)
    source = list(torch.randint(4, 8000, (args.source_len,), generator=torch.Generator().manual_seed(1)).tolist())
    print(f"device {args.device}, torch threads {torch.get_num_threads()}, source {args.source_len} tokens")

    print("\ntrace capture overhead (greedy, KV cache on)")
    for steps in (25, 100):
        with_trace = median_seconds(lambda: decode(model, source, steps, need_weights=True), args.repeats)
        without = median_seconds(lambda: decode(model, source, steps, need_weights=False), args.repeats)
        print(f"  {steps:4d} tokens: captured {with_trace * 1e3:8.1f} ms, not captured {without * 1e3:8.1f} ms, "
              f"ratio {with_trace / without:.3f}x (goal <= 1.15x)")

    print("\nKV cache (greedy, full trace captured)")
    for steps in (25, 50, 100):
        cached = median_seconds(lambda: decode(model, source, steps), args.repeats)
        recomputed = median_seconds(lambda: decode(model, source, steps, use_cache=False), max(1, args.repeats // 2))
        print(f"  {steps:4d} tokens: cached {cached * 1e3:8.1f} ms, recomputed {recomputed * 1e3:8.1f} ms, "
              f"speed-up {recomputed / cached:.1f}x (goal >= 5x at 100)")


if __name__ == "__main__":
    main()
