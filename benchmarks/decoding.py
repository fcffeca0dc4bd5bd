"""Decoding costs on a random-weight 6 + 6-layer Transformer of the base shape (8 heads, d_model 512, FFN 2048,
vocabulary 8,000) or the opus-mt-tc-big shape (16 heads, d_model 1024, FFN 4096, vocabulary 32,000); CPU unless
--device.

1. Trace capture overhead: greedy decoding with every attention row captured (per-head weights copied to
   the host each step) vs the same decoding with ``need_weights=False`` (torch's fused attention), and the
   host reads of device values each step makes (each one waits for the device on a GPU).
2. KV cache: cached incremental decoding vs recomputing the whole prefix every step, at 25/50/100 tokens.

    python benchmarks/decoding.py [--shape base|tc-big] [--device cuda] [--repeats 5] [--threads 1] [--no-cache]
"""

from __future__ import annotations

import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.common import SHAPES, big_transformer, median_seconds, median_times  # noqa: E402
from models.inference.decoding import Capture, finish, greedy
from models.inference.transfer import HostReads


def decode(model, source, steps: int, **options) -> None:
    results = finish(greedy(model, source, Capture(max_len=steps, **options)))
    assert len(results[0].token_ids) == steps


def reads_per_step(model, source, **options) -> float:
    """Host reads of device values per step, past the first steps (the encoder's trace is converted once).
    ``masked_softmax``'s are left out: it reads a mask only on the CPU."""
    counts = []
    for steps in (5, 15):
        with HostReads(ignoring=("masked_softmax",)) as reads:
            decode(model, source, steps, **options)
        counts.append(reads.reads)
    return (counts[1] - counts[0]) / 10


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shape", choices=sorted(SHAPES), default="base")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--source-len", type=int, default=30)
    parser.add_argument("--threads", type=int, help="torch threads (the app leaves one core to the GUI)")
    parser.add_argument("--no-cache", action="store_true", help="skip the KV cache comparison")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    model = big_transformer(device=args.device, shape=args.shape)
    seeded = torch.Generator().manual_seed(1)
    source = torch.randint(4, model.config.src_vocab_size, (args.source_len,), generator=seeded).tolist()
    print(f"shape {args.shape}, device {args.device}, torch threads {torch.get_num_threads()}, "
          f"source {args.source_len} tokens")

    print("\ntrace capture overhead (greedy, KV cache on)")
    reads = reads_per_step(model, source, need_weights=True), reads_per_step(model, source, need_weights=False)
    print(f"  host reads per step: {reads[0]:g} captured, {reads[1]:g} not captured (each waits for a GPU)")
    for steps in (25, 100):
        with_trace = median_times(lambda: decode(model, source, steps, need_weights=True), args.repeats)
        without = median_times(lambda: decode(model, source, steps, need_weights=False), args.repeats)
        print(f"  {steps:4d} tokens: captured {with_trace[0] * 1e3:8.1f} ms, not captured {without[0] * 1e3:8.1f} ms, "
              f"ratio {with_trace[0] / without[0]:.3f}x (goal <= 1.15x); CPU time ratio "
              f"{with_trace[1] / without[1]:.3f}x")
    if args.no_cache:
        return

    print("\nKV cache (greedy, full trace captured)")
    for steps in (25, 50, 100):
        cached = median_seconds(lambda: decode(model, source, steps), args.repeats)
        recomputed = median_seconds(lambda: decode(model, source, steps, use_cache=False), max(1, args.repeats // 2))
        print(f"  {steps:4d} tokens: cached {cached * 1e3:8.1f} ms, recomputed {recomputed * 1e3:8.1f} ms, "
              f"speed-up {recomputed / cached:.1f}x (goal >= 5x at 100)")


if __name__ == "__main__":
    main()
