"""Head importance three ways: today's one decode per pair and head scored by chrF (``head_importance``), the
batched NLL ablation (``ablation_importance``) and the gradient (``gradient_importance``).

On the en-es demo (``--pairs`` of its reference pairs, 8 by default) every way runs, and on the post-LN demo
the two new ones; then on a random-weight Marian-base-shaped model (post-LN, 6 + 6 layers × 8 heads,
d_model 512, d_ff 2048, vocabulary 8,000; ``--marian-pairs`` pairs of 20–30 tokens) the two new ones. Each
run is its own process, so its peak RSS is its own; the CPU time of all its threads is given beside the wall
time, for a machine other processes share. Spearman's ρ between the gradient's first-order NLL
rise (−∂L/∂ξ) and the ablation's NLL rise is given per kind, and, for Michel et al.'s E|∂L/∂ξ|, against the
size of the ablation's change. Goals (2 cores): en-es batched ablation ≥ 100× and gradient ≥ 300× faster
than today's run; Marian-base: gradient ≤ 15 s, ablation ≤ 2 min, RSS ≤ 2 GB.

    python benchmarks/importance.py [--device cuda] [--pairs 8] [--marian-pairs 32] [--skip-old] [--threads N]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from models import build_model, make_config
from models.storage.checkpoint import Checkpoint, load_checkpoint
from models.analysis.importance import ablation_importance, gradient_importance, head_importance
from models.text.tokenizers import CharTokenizer
from models.inference.translator import Translator
from attnviz.state.demos import demo_path, demo_reference_pairs

DEMOS = ("en-es-transformer", "en-es-transformer-postln")
MARIAN = "marian-base-random"
FIRST_CHARACTER = 0x4E00  # CJK ideographs: 7,996 distinct characters NFKC leaves alone, one token each


def marian_translator(device: str) -> Translator:
    """Random weights in Marian-base's shape over a character vocabulary of 8,000 tokens (4 specials)."""
    torch.manual_seed(0)
    characters = [chr(FIRST_CHARACTER + index) for index in range(8000 - 4)]
    config = make_config("transformer-postln", 8000, 8000, d_model=512, heads=8, d_ff=2048, encoder_layers=6,
                         decoder_layers=6, max_len=512, dropout=0.0)
    tokenizer = CharTokenizer(characters)
    return Translator(Checkpoint(build_model(config).eval(), tokenizer, tokenizer), device)


def marian_pairs(count: int) -> list[tuple[str, str]]:
    """``count`` pairs whose sides are 20–30 random characters of the vocabulary (seeded)."""
    generator = np.random.default_rng(1)
    def text() -> str:
        return "".join(chr(FIRST_CHARACTER + int(i)) for i in generator.integers(0, 7996, generator.integers(20, 31)))

    return [(text(), text()) for _ in range(count)]


def run_one(model: str, method: str, pairs: int, device: str) -> dict:
    """One way on one model, timed; with this process' peak RSS and the drop tables."""
    if model == MARIAN:
        translator, corpus = marian_translator(device), marian_pairs(pairs)
    else:
        translator = Translator(load_checkpoint(demo_path(model)), device)
        corpus = demo_reference_pairs(demo_path(model))[:pairs]
    started, cpu_started = time.perf_counter(), time.process_time()
    if method == "old":
        importance = head_importance(translator, corpus, metric="chrf")
    elif method == "ablation":
        importance = ablation_importance(translator, corpus)
    else:
        importance = gradient_importance(translator, corpus)
    seconds, cpu = time.perf_counter() - started, time.process_time() - cpu_started
    gpu = torch.cuda.max_memory_allocated() / 2**20 if translator.device.type == "cuda" else None
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # kB on Linux
    return {"seconds": seconds, "cpu_seconds": cpu, "rss_mb": rss, "gpu_mb": gpu, "baseline": importance.baseline,
            "drops": {kind: table.tolist() for kind, table in importance.drops.items()},
            "magnitudes": {kind: table.tolist() for kind, table in importance.magnitudes.items()}}


def in_own_process(args: argparse.Namespace, model: str, method: str, pairs: int) -> dict:
    command = [sys.executable, os.path.abspath(__file__), "--one", model, method, str(pairs), "--device", args.device]
    if args.threads:
        command += ["--threads", str(args.threads)]
    output = subprocess.run(command, check=True, capture_output=True, text=True).stdout
    return json.loads(output.strip().splitlines()[-1])


def spearman(a, b) -> float:
    """Spearman's ρ: Pearson's correlation of the ranks (ties, which real-valued drops do not have, get no
    average rank)."""
    ranks = [np.argsort(np.argsort(np.ravel(values))).astype(float) for values in (a, b)]
    return float(np.corrcoef(*ranks)[0, 1])


def line(name: str, result: dict, reference: dict | None = None) -> str:
    gpu = f", GPU peak {result['gpu_mb']:.0f} MB" if result["gpu_mb"] is not None else ""
    faster = f", {reference['seconds'] / result['seconds']:6.0f}x faster than today's" if reference else ""
    return (f"  {name:<22} {result['seconds']:8.2f} s (CPU time {result['cpu_seconds']:7.2f} s), "
            f"peak RSS {result['rss_mb']:6.0f} MB{gpu}{faster}")


def correlations(ablation: dict, gradient: dict) -> list[str]:
    lines = []
    for kind, drops in ablation["drops"].items():
        rho = spearman(gradient["drops"][kind], drops)
        rho_michel = spearman(gradient["magnitudes"][kind], np.abs(drops))
        lines.append(f"  {kind:<9} Spearman rho: -dL/dxi vs ablation NLL rise {rho:+.2f};  "
                     f"E|dL/dxi| vs |ablation NLL change| {rho_michel:+.2f}")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--pairs", type=int, default=8)
    parser.add_argument("--marian-pairs", type=int, default=32)
    parser.add_argument("--skip-old", action="store_true", help="leave out today's one-by-one run (minutes)")
    parser.add_argument("--threads", type=int, help="torch threads")
    parser.add_argument("--one", nargs=3, metavar=("MODEL", "METHOD", "PAIRS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.one:
        model, method, pairs = args.one
        print(json.dumps(run_one(model, method, int(pairs), args.device)))
        return
    print(f"device {args.device}, torch threads {args.threads or torch.get_num_threads()}")
    for model in DEMOS:
        print(f"{model}, {args.pairs} reference pairs")
        old = None
        if model == DEMOS[0] and not args.skip_old:
            old = in_own_process(args, model, "old", args.pairs)
            print(line("today's (chrF, decode)", old))
        ablation = in_own_process(args, model, "ablation", args.pairs)
        gradient = in_own_process(args, model, "gradient", args.pairs)
        print(line("batched NLL ablation", ablation, old))
        print(line("gradient", gradient, old))
        print("\n".join(correlations(ablation, gradient)))
    print(f"{MARIAN} (6+6 layers x 8 heads, d_model 512, d_ff 2048, vocabulary 8,000), {args.marian_pairs} pairs "
          f"of 20-30 tokens")
    ablation = in_own_process(args, MARIAN, "ablation", args.marian_pairs)
    gradient = in_own_process(args, MARIAN, "gradient", args.marian_pairs)
    print(line("batched NLL ablation", ablation) + "  (goal <= 120 s, 2 GB)")
    print(line("gradient", gradient) + "  (goal <= 15 s, 2 GB)")
    print("\n".join(correlations(ablation, gradient)))


if __name__ == "__main__":
    main()
