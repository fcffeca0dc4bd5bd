"""The checks a GPU session owes: one run, no Qt needed (a GPU machine's image has torch, not PySide6).

    python benchmarks/gpu_checks.py [--device cuda] [--quick]

1. Same outputs: every bundled demo decoded greedy, beam 4 and forced on the CPU and on the device: equal
   tokens, and the largest difference of any attention weight and of any step's probability (TF32 off, as
   attnviz runs float32; ATTNVIZ_TF32=1 measures what TF32 costs).
2. Device waits per decoding step: ``torch.cuda.set_sync_debug_mode`` counts every synchronising call torch
   makes while a tc-big-shaped model decodes greedily (the decode loop's goal: one per step, its one transfer).
3. Trace capture and the KV cache at the tc-big shape (``benchmarks/decoding.py --shape tc-big``): capture
   overhead against an uncaptured decode (goal ≤ 1.15×) and the cached step against the recomputed one at 100
   tokens (goal ≥ 5×).

Each part prints its own lines and a verdict; a part that fails to run says why and the others still run.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import traceback
import warnings

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.common import big_transformer  # noqa: E402
from models.inference.decoding import Capture, beam_search, finish, forced, greedy  # noqa: E402
from models.inference.translator import float32_precision  # noqa: E402
from models.storage.checkpoint import load_checkpoint  # noqa: E402

DEMOS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "resources", "checkpoints")
SENTENCES = {"en-es": "The Lord is my shepherd; I shall not want.", "piglatin": "the quick brown fox jumps"}


def decodings(checkpoint, sentence: str, device: str) -> dict[str, object]:
    """The best result of greedy, beam 4 and forced decoding of ``sentence`` on ``device``, float32 placed as
    attnviz places it (models/inference/translator.py ``float32_precision``: exact unless ATTNVIZ_TF32=1)."""
    float32_precision()
    model = checkpoint.model.to(device)
    source = checkpoint.source_tokenizer.encode(sentence)
    label = checkpoint.target_tokenizer.token
    best = finish(greedy(model, source, Capture(label=label, max_len=60)))[0]
    results = {"greedy": best, "beam": finish(beam_search(model, source, Capture(label=label, max_len=60), beam=4))[0],
               "forced": finish(forced(model, source, best.token_ids[:-1], Capture(label=label)))[0]}
    checkpoint.model.to("cpu")
    return results


def largest_difference(ours, theirs) -> tuple[float, float]:
    """The largest difference of any attention weight, and of any step's chosen-token probability."""
    weights = 0.0
    for kind, layers in ours.trace.attention.items():
        for mine, other in zip(layers, theirs.trace.attention[kind]):
            weights = max(weights, float(np.abs(mine.astype(np.float64) - other).max()))
    probabilities = max(float(np.abs(a.probabilities - b.probabilities).max())
                        for a, b in zip(ours.steps, theirs.steps))
    return weights, probabilities


def same_outputs(device: str) -> bool:
    print("\n1. the same outputs on the CPU and on", device)
    agreed = True
    for name in sorted(os.listdir(DEMOS)):
        if not name.endswith(".safetensors"):
            continue
        checkpoint = load_checkpoint(os.path.join(DEMOS, name))
        sentence = SENTENCES["en-es" if name.startswith("en-es") else "piglatin"]
        on_cpu, on_device = decodings(checkpoint, sentence, "cpu"), decodings(checkpoint, sentence, device)
        for mode, result in on_cpu.items():
            other = on_device[mode]
            same = result.token_ids == other.token_ids
            weights, probabilities = largest_difference(result, other) if same else (float("nan"),) * 2
            agreed &= same and weights < 1e-4 and probabilities < 1e-4
            print(f"  {name:45s} {mode:6s} tokens {'equal' if same else 'DIFFER'}, attention ≤ {weights:.1e}, "
                  f"probabilities ≤ {probabilities:.1e}")
    print("  verdict:", "equal" if agreed else "DIFFERENT")
    return agreed


def waits_per_step(device: str, steps: int = 20) -> bool:
    print(f"\n2. device waits per greedy step (tc-big shape, {steps} steps, trace captured)")
    if not device.startswith("cuda"):
        print("  skipped: torch counts synchronising calls on CUDA only")
        return True
    model = big_transformer(device=device, shape="tc-big")
    source = list(range(4, 34))
    finish(greedy(model, source, Capture(max_len=2)))  # kernels loaded and the caching allocator warm
    counts = {}
    for max_len in (steps, 2 * steps):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            torch.cuda.set_sync_debug_mode("warn")
            try:
                finish(greedy(model, source, Capture(max_len=max_len)))
            finally:
                torch.cuda.set_sync_debug_mode("default")
        counts[max_len] = sum("synchroniz" in str(warning.message) for warning in caught)
    per_step = (counts[2 * steps] - counts[steps]) / steps  # the encoder's and the trace's own waits cancel
    print(f"  {counts[steps]} waits in {steps} steps, {counts[2 * steps]} in {2 * steps}: {per_step:.2f} per step "
          "(goal: 1)")
    return per_step <= 1.0


def decoding_benchmark(device: str, quick: bool) -> bool:
    print("\n3. benchmarks/decoding.py --shape tc-big --device", device)
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "decoding.py")
    command = [sys.executable, script, "--shape", "tc-big", "--device", device, "--repeats", "3" if quick else "5"]
    return subprocess.run(command, check=False).returncode == 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--quick", action="store_true", help="fewer repeats in the timing part")
    args = parser.parse_args()
    name = torch.cuda.get_device_name(0) if args.device.startswith("cuda") else "CPU"
    print(f"device {args.device} ({name}), torch {torch.__version__}")
    verdicts = []
    for part in (lambda: same_outputs(args.device), lambda: waits_per_step(args.device),
                 lambda: decoding_benchmark(args.device, args.quick)):
        try:
            verdicts.append(part())
        except Exception:  # one part's failure is reported; the others still run
            traceback.print_exc()
            verdicts.append(False)
    print("\nall checks passed" if all(verdicts) else "\nSOME CHECKS FAILED")
    return 0 if all(verdicts) else 1


if __name__ == "__main__":
    sys.exit(main())
