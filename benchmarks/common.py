"""Shared set-up for the benchmarks: the model sizes the issues name, and a median timer."""

from __future__ import annotations

import statistics
import time
from typing import Callable

import torch

from models import build_model, make_config


# The sizes the issues name: the opus-mt base and tc-big shapes (6 + 6 layers each).
SHAPES = {"base": dict(d_model=512, heads=8, d_ff=2048, vocab=8000),
          "tc-big": dict(d_model=1024, heads=16, d_ff=4096, vocab=32000)}


def big_transformer(vocab: int | None = None, source_len: int = 512, device: str = "cpu", shape: str = "base"):
    """6 + 6 layers of a ``SHAPES`` size (base: d_model 512, 8 heads, d_ff 2048, vocabulary 8,000; tc-big:
    1024, 16, 4096, 32,000), random weights, in eval mode.

    The end token's logit is pushed down so greedy decoding runs for exactly ``max_len`` steps.
    """
    sizes = dict(SHAPES[shape])
    shape_vocab = sizes.pop("vocab")
    vocab = vocab or shape_vocab
    torch.manual_seed(0)
    config = make_config("transformer-preln", vocab, vocab, **sizes, encoder_layers=6, decoder_layers=6,
                         max_len=max(source_len, 512), dropout=0.0)
    model = build_model(config).to(device).eval()
    with torch.no_grad():
        model.output.bias[config.eos_id] = -1e4
    return model


def median_seconds(function: Callable[[], object], repeats: int = 5, warmup: int = 1) -> float:
    return median_times(function, repeats, warmup)[0]


def median_times(function: Callable[[], object], repeats: int = 5, warmup: int = 1) -> tuple[float, float]:
    """The median wall-clock and CPU seconds (this process' threads) of ``function``: on a busy machine the CPU
    time of a one-thread run is the steadier measure."""
    for _ in range(warmup):
        function()
    walls, cpus = [], []
    for _ in range(repeats):
        start, start_cpu = time.perf_counter(), time.process_time()
        function()
        walls.append(time.perf_counter() - start)
        cpus.append(time.process_time() - start_cpu)
    return statistics.median(walls), statistics.median(cpus)
