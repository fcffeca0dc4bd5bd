"""Contributions (models/analysis/contributions.py) on a random-weight base-sized Transformer (pre-LN, 6 + 6 layers × 8
heads, d_model 512, d_ff 2048): the traced forward pass with and without its blocks noted, then ALTI+, value
norms and value zeroing beyond it, at 50 + 50 tokens; input × gradient for every target step in one batched
backward pass against a per-step loop (one forward and backward pass per target token); and the peak memory
ALTI+ adds at 512 + 512 tokens (queries in chunks). Goals (2 cores): ALTI+ ≤ 0.5 s beyond the forward at
50 + 50, gradients ≥ 5× faster than the loop, < 1 GB extra at 512 + 512.

    python benchmarks/contributions.py [--device cuda] [--threads N] [--long 512]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.common import big_transformer, median_seconds  # noqa: E402
from models.analysis.contributions import alti, capture_forward, decoder_input, value_norms, value_zeroing  # noqa: E402
from models.analysis.gradients import embedding_gradients, step_log_probs  # noqa: E402


def sentence(length: int, seed: int) -> list[int]:
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(4, 8000, (length,), generator=generator).tolist()


def plain_forward(model, src: list[int], out: list[int]) -> None:
    device = next(model.parameters()).device
    with torch.inference_mode():
        model(torch.tensor([src], device=device), torch.tensor([decoder_input(model, out)], device=device),
              need_weights=True)


def per_step_gradients(model, src: list[int], out: list[int]) -> None:
    """The loop a tool without batching runs: per target token one forward pass over its prefix and one
    backward pass."""
    device = next(model.parameters()).device
    source, target = torch.tensor([src], device=device), torch.tensor([decoder_input(model, out)], device=device)
    outputs = torch.tensor(out, device=device)
    embeddings = (model.src_embedding.tokens, model.tgt_embedding.tokens)
    for step in range(len(out)):
        kept = []
        hooks = [module.register_forward_hook(lambda m, i, o: kept.append(o.detach().requires_grad_()) or kept[-1])
                 for module in embeddings]
        log_probs = step_log_probs(model, source, target[:, : step + 1], output_ids=outputs[: step + 1])
        for hook in hooks:
            hook.remove()
        torch.autograd.grad(log_probs[step], kept)


def unnoted_cost(model, src: list[int], out: list[int]) -> str:
    """A forward pass as it runs today against one whose sublayers have no ``note_block`` call at all."""
    import models.nn.transformer as transformer

    device = next(model.parameters()).device
    source, target = torch.tensor([src], device=device), torch.tensor([decoder_input(model, out)], device=device)

    def run() -> None:
        with torch.inference_mode():
            model(source, target)

    kept = transformer.note_block
    today = median_seconds(run, repeats=7)
    transformer.note_block = lambda *_args, **_tensors: None
    try:
        without = median_seconds(run, repeats=7)
    finally:
        transformer.note_block = kept
    return f"{today * 1000:.1f} ms; without the noting call {without * 1000:.1f} ms"


def peak_rss_mb() -> float:
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmHWM")) / 1024


def reset_peak() -> None:
    with open("/proc/self/clear_refs", "w") as handle:  # Linux: the peak starts again from the present size
        handle.write("5")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (default: torch's own choice)")
    parser.add_argument("--long", type=int, default=512, help="tokens a side for the memory measurement")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    model = big_transformer(device=args.device)
    for parameter in model.parameters():
        parameter.requires_grad_(False)
    src, out = sentence(50, 1), sentence(50, 2)
    print(f"device {args.device}, {torch.get_num_threads()} threads; "
          "6 + 6 layers × 8 heads, d_model 512; 50 + 50 tokens")
    forward = median_seconds(lambda: plain_forward(model, src, out))
    noted = median_seconds(lambda: capture_forward(model, src, out))
    print(f"forward with weights: {forward * 1000:.1f} ms; with every block noted: {noted * 1000:.1f} ms")
    print(f"plain forward (no weights, as translate runs): {unnoted_cost(model, src, out)}")
    captured = capture_forward(model, src, out)
    for name, method in (("ALTI+", alti), ("value norms", value_norms), ("value zeroing", value_zeroing)):
        seconds = median_seconds(lambda method=method: method(model, src, out, captured=captured), repeats=3)
        print(f"{name} beyond the forward: {seconds * 1000:.1f} ms")
    batched = median_seconds(lambda: embedding_gradients(model, src, out), repeats=3)
    loop = median_seconds(lambda: per_step_gradients(model, src, out), repeats=1, warmup=0)
    print(f"gradients of all 50 steps: batched {batched:.2f} s, per-step loop {loop:.2f} s ({loop / batched:.1f}×)")

    long_src, long_out = sentence(args.long, 3), sentence(args.long, 4)
    del captured
    started = time.perf_counter()
    captured = capture_forward(model, long_src, long_out)
    forward_seconds = time.perf_counter() - started
    if args.device == "cpu":
        reset_peak()
        before = peak_rss_mb()
    started = time.perf_counter()
    alti(model, long_src, long_out, captured=captured)
    seconds = time.perf_counter() - started
    extra = peak_rss_mb() - before if args.device == "cpu" else float("nan")
    if args.device != "cpu":
        extra = torch.cuda.max_memory_allocated() / 2**20
    print(f"{args.long} + {args.long} tokens: noted forward {forward_seconds:.2f} s; ALTI+ {seconds:.2f} s, "
          f"{extra:.0f} MB {'above the noted forward (peak RSS)' if args.device == 'cpu' else 'GPU peak'}")


if __name__ == "__main__":
    main()
