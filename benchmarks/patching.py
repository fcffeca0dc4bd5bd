"""Activation patching (models/analysis/patching.py) at 40 source tokens: exact patching of every head and every
(layer, position) of both residual streams (batched), and attribution patching alone (one clean forward, one
corrupted forward and backward), on the en-es demo (its greedy output) and on a random-weight base-sized
Transformer (pre-LN, 6 + 6 layers × 8 heads, d_model 512, d_ff 2048, forced on 40 tokens). Goals (2 cores): the demo
exact ≤ 3 s, AtP ≤ 0.3 s; the base-sized model ≤ 10× those. The logit difference is read at the middle step
(decoder positions after it change nothing and are not run) and the NLL at every step.

    python benchmarks/patching.py [--device cuda] [--repeats 3] [--threads N] [--logit-only]
"""

from __future__ import annotations

import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.common import big_transformer, median_times  # noqa: E402
from models.analysis.catalogue import PATCH_LOGIT, PATCH_NLL  # noqa: E402
from models.analysis.patching import activation_patching  # noqa: E402

DEMO = "resources/checkpoints/en-es-transformer.safetensors"
TEXT = ("In the beginning God created the heavens and the earth, and the earth was without form and void, and "
        "darkness was upon the face of the deep, and the Spirit of God moved upon the face of the waters.")
TOKENS = 40


def demo_case(device: str):
    from models.inference.decoding import finish
    from models.inference.translator import Translator
    from models.storage.checkpoint import load_checkpoint

    translator = Translator(load_checkpoint(DEMO, device), device)
    clean = translator.source(TEXT).ids[-TOKENS:]
    assert len(clean) == TOKENS, len(clean)
    corrupt = list(clean)
    corrupt[TOKENS // 2] = translator.source("father").ids[0]  # one word changed, the length kept
    source = translator.source(TEXT)
    source.ids[:] = clean
    output = finish(translator.decode(source, need_weights=False))[0].token_ids
    return translator.model, clean, corrupt, output


def base_case(device: str):
    model = big_transformer(device=device)
    generator = torch.Generator().manual_seed(1)
    clean = torch.randint(4, 8000, (TOKENS,), generator=generator).tolist()
    corrupt = list(clean)
    corrupt[TOKENS // 2] = 5
    output = torch.randint(4, 8000, (TOKENS,), generator=generator).tolist()
    return model, clean, corrupt, output


def measure(name: str, case, repeats: int, metrics) -> None:
    """Wall-clock and CPU seconds (the CPU time of a one-thread run is the steadier number on a busy machine)."""
    model, clean, corrupt, output = case
    step = len(output) // 2
    for metric in metrics:
        kwargs = dict(metric=metric, step=step if metric == PATCH_LOGIT else None)
        exact = median_times(lambda: activation_patching(model, clean, corrupt, output, **kwargs),  # noqa: B023
                             repeats=repeats)
        atp = median_times(lambda: activation_patching(model, clean, corrupt, output, exact=False,  # noqa: B023
                                                       **kwargs), repeats=repeats)
        result = activation_patching(model, clean, corrupt, output, **kwargs)
        print(f"{name}, {len(clean)} + {len(output)} tokens, {metric}: exact and AtP {exact[0]:.2f} s "
              f"(CPU {exact[1]:.2f} s); AtP alone {atp[0] * 1000:.0f} ms (CPU {atp[1] * 1000:.0f} ms); Spearman ρ of "
              f"AtP against exact {result.spearman['all']:.3f}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int)
    parser.add_argument("--logit-only", action="store_true", help="leave out the NLL metric")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    metrics = (PATCH_LOGIT,) if args.logit_only else (PATCH_LOGIT, PATCH_NLL)
    measure("en-es demo", demo_case(args.device), args.repeats, metrics)
    measure("base-sized 6 + 6", base_case(args.device), args.repeats, metrics)


if __name__ == "__main__":
    main()
