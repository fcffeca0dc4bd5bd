"""The logit lens and DecoderLens (models/analysis/lens.py): the traced forward pass they read (``capture_forward``),
the logit lens beyond it (every decoder layer boundary through the output head), and DecoderLens beyond it (every
encoder layer boundary decoded as one batch: a teacher-forced pass for the NLL, then greedy), on the en-es demo with
40-token sentences and on a random-weight 6 + 6-layer base-shaped Transformer (d_model 512, 8 heads, d_ff 2048,
vocabulary 8,000; its end token pushed down, so each of DecoderLens' 7 rows decodes the full 2 × 40 + 10 steps).
Goals (2 cores): the lens ≤ 50 ms beyond the forward, DecoderLens ≤ 1 s on the demo; ≤ 10× those at the base shape.

    python benchmarks/lens.py [--device cuda] [--threads N] [--repeats 5]
"""

from __future__ import annotations

import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.common import big_transformer, median_times  # noqa: E402
from models.analysis.contributions import capture_forward  # noqa: E402
from models.analysis.lens import decoder_lens, logit_lens  # noqa: E402
from models.inference.translator import Translator  # noqa: E402
from models.storage.checkpoint import load_checkpoint  # noqa: E402

DEMO = "resources/checkpoints/en-es-transformer.safetensors"
SENTENCES = [
    "the old man who lived by the sea went every morning to the market, where he bought fresh bread, fish and "
    "fruit for his wife and his three children, and then he walked home slowly along the beach",
    "when the rain stopped, the children ran out of the house into the garden and played with the dog until their "
    "mother called them back for dinner, because the sun was already going down behind the hills",
]


def report(name: str, model, src: list[int], out: list[int], repeats: int) -> None:
    captured = capture_forward(model, src, out)
    forward = median_times(lambda: capture_forward(model, src, out), repeats)
    lens = median_times(lambda: logit_lens(model, src, out, captured=captured), repeats)
    readings = median_times(lambda: decoder_lens(model, src, out, captured=captured), repeats)
    print(f"{name}: {len(src)} source + {len(out)} output tokens; wall (CPU) seconds, medians of {repeats}")
    print(f"  traced forward          {forward[0]:.4f} ({forward[1]:.4f})")
    print(f"  logit lens beyond it    {lens[0]:.4f} ({lens[1]:.4f})   goal ≤ 0.05 on the demo")
    print(f"  DecoderLens beyond it   {readings[0]:.4f} ({readings[1]:.4f})   goal ≤ 1 on the demo", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, help="torch's CPU threads (default: torch's own)")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    translator = Translator(load_checkpoint(DEMO, args.device), args.device)
    for number, text in enumerate(SENTENCES, 1):
        source = translator.source(text)
        src = source.ids[:40]
        result = translator.translate(translator.source_tokenizer.decode(src))
        report(f"en-es demo, sentence {number}", translator.model, translator.source(
            translator.source_tokenizer.decode(src)).ids, result.token_ids, args.repeats)
    model = big_transformer(device=args.device, shape="base")
    generator = torch.Generator().manual_seed(0)
    src = torch.randint(4, 8000, (40,), generator=generator).tolist() + [model.config.eos_id]
    out = torch.randint(4, 8000, (39,), generator=generator).tolist() + [model.config.eos_id]
    report("random base shape (6 + 6 layers)", model, src, out, args.repeats)


if __name__ == "__main__":
    main()
