"""Shared set-up for the benchmarks: the model sizes the issues name, and a median timer."""

from __future__ import annotations

import statistics
import time
from typing import Callable

import torch

from models import build_model, make_config


def big_transformer(vocab: int = 8000, source_len: int = 512, device: str = "cpu"):
    """6 layers, d_model 512, 8 heads, d_ff 2048 (the "base" size), random weights, in eval mode.

    The end token's logit is pushed down so greedy decoding runs for exactly ``max_len`` steps.
    """
    torch.manual_seed(0)
    config = make_config("transformer-preln", vocab, vocab, d_model=512, heads=8, d_ff=2048,
                         encoder_layers=6, decoder_layers=6, max_len=max(source_len, 512), dropout=0.0)
    model = build_model(config).to(device).eval()
    with torch.no_grad():
        model.output.bias[config.eos_id] = -1e4
    return model


def median_seconds(function: Callable[[], object], repeats: int = 5, warmup: int = 1) -> float:
    for _ in range(warmup):
        function()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        function()
        times.append(time.perf_counter() - start)
    return statistics.median(times)
