"""Corpus head statistics vs a plain batched forward over the same corpus, on a 6-layer × 8-head, d_model 512
Transformer (random weights, CPU unless --device).

Both go through the same length-sorted batches; the plain forward runs with ``need_weights=False`` (torch's
fused attention) and computes nothing else. Each is timed as its best of ``--repeats`` runs, the two taking
turns. The ratio is the statistics' throughput over the plain forward's (goal ≥ 0.8×).

    python benchmarks/head_stats.py [--device cuda] [--sentences 256] [--batch-size 32] [--repeats 5] [--threads 1]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.common import big_transformer  # noqa: E402
from models.inference.batches import collate
from models.analysis.head_stats import example_stats, length_batches


def random_corpus(sentences: int, vocab: int, seed: int = 1) -> list[tuple[list[int], list[int]]]:
    """Sources of 10–40 tokens ending in the end token, targets of 0.8–1.2× their source's length."""
    generator = torch.Generator().manual_seed(seed)
    corpus = []
    for _ in range(sentences):
        length = int(torch.randint(10, 41, (1,), generator=generator))
        target_length = max(1, int(length * (0.8 + 0.4 * float(torch.rand(1, generator=generator)))))
        source = torch.randint(4, vocab, (length - 1,), generator=generator).tolist() + [3]
        corpus.append((source, torch.randint(4, vocab, (target_length,), generator=generator).tolist()))
    return corpus


def plain_forward(model, corpus, batch_size: int) -> None:
    device = next(model.parameters()).device
    with torch.inference_mode():
        for indices in length_batches(corpus, batch_size):
            batch = collate([corpus[i] for i in indices], model.config, device)
            logits, _ = model(batch.src, batch.tgt_in, need_weights=False)
            logits.sum().item()  # wait for the device, as the statistics do when they copy their sums


def alternating_best(functions, repeats: int) -> list[float]:
    """Each function's best time of ``repeats`` runs, the functions taking turns (after one warm-up run each), so
    that load from other processes on the machine falls on both alike and the best run is the least disturbed."""
    for function in functions:
        function()
    best = [float("inf")] * len(functions)
    for _ in range(repeats):
        for index, function in enumerate(functions):
            start = time.perf_counter()
            function()
            best[index] = min(best[index], time.perf_counter() - start)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--sentences", type=int, default=256)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, help="torch threads (the app leaves one core to the GUI)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    model = big_transformer(device=args.device)
    corpus = random_corpus(args.sentences, model.config.src_vocab_size)
    print(f"device {args.device}, torch threads {torch.get_num_threads()}, {args.sentences} sentences of 10-40 tokens, "
          f"batches of {args.batch_size}")
    plain, stats = alternating_best([lambda: plain_forward(model, corpus, args.batch_size),
                                     lambda: example_stats(model, corpus, args.batch_size)], args.repeats)
    print(f"  plain forward (need_weights=False): {plain:7.2f} s, {args.sentences / plain:7.1f} sentences/s")
    print(f"  head statistics:                    {stats:7.2f} s, {args.sentences / stats:7.1f} sentences/s")
    print(f"  throughput ratio {plain / stats:.2f}x (goal >= 0.8x)")


if __name__ == "__main__":
    main()
