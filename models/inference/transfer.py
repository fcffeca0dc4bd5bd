"""Everything a decoding step hands the host, copied from the device in one transfer.

On a GPU every read of a device value (``.item()``, ``bool(tensor)``, ``.cpu()``) waits for every kernel queued
before it and pays a copy's latency; a step that read its tokens, scores, flags and each layer's attention one
by one waited a few dozen times. :class:`HostTransfer` packs a step's pieces into one byte buffer on the device,
copies it once (on CUDA asynchronously into pinned memory, then one synchronisation) and splits it into numpy
views on the host.
"""

from __future__ import annotations

import sys
from typing import Hashable, Mapping

import numpy as np
import torch
from torch import Tensor
from torch.overrides import TorchFunctionMode

ALIGN = 8  # each piece starts at a multiple of the largest item size (float64, int64), so its view is aligned

NUMPY_DTYPES = {torch.float64: np.float64, torch.float32: np.float32, torch.float16: np.float16,
                torch.int64: np.int64, torch.int32: np.int32, torch.uint8: np.uint8, torch.bool: np.bool_}

Pieces = Mapping[Hashable, Tensor]
Arrays = dict[Hashable, np.ndarray]


class HostTransfer:
    """One decoding run's transfers to the host; on CUDA a pinned staging buffer is reused from step to step."""

    def __init__(self) -> None:
        self.staging: Tensor | None = None
        self.count = 0  # transfers made so far

    def __call__(self, kept: Pieces, passing: Pieces) -> tuple[Arrays, Arrays]:
        """Copy ``kept`` and ``passing`` to the host at once. ``kept``'s arrays are views of one small block of
        their own (a step's tokens, scores and flags, which live as long as the run); ``passing``'s are views
        of the transfer's buffer, valid until the next call (attention and mask rows, copied on by the caller)."""
        parts, spans = _laid_out(list(kept.values()), 0)
        kept_end = max((end for _, end in spans), default=0)
        passing_parts, passing_spans = _laid_out(list(passing.values()), kept_end + -kept_end % ALIGN)
        if passing_parts and kept_end % ALIGN:
            parts.append(torch.zeros(-kept_end % ALIGN, dtype=torch.uint8, device=passing_parts[0].device))
        host = self._copied(torch.cat(parts + passing_parts))
        self.count += 1
        block = host[:kept_end].copy()  # so the kept arrays do not hold the whole buffer (or a reused one)
        return ({name: _view(block, span, piece) for (name, piece), span in zip(kept.items(), spans)},
                {name: _view(host, span, piece) for (name, piece), span in zip(passing.items(), passing_spans)})

    def _copied(self, packed: Tensor) -> np.ndarray:
        """``packed`` (bytes on the device) as a host array: on the CPU the tensor's own memory."""
        if packed.device.type == "cpu":
            return packed.numpy()
        if packed.device.type != "cuda":
            return packed.to("cpu").numpy()
        if self.staging is None or self.staging.numel() < packed.numel():
            size = max(packed.numel(), 2 * (0 if self.staging is None else self.staging.numel()))
            self.staging = torch.empty(size, dtype=torch.uint8, pin_memory=True)
        staging = self.staging[: packed.numel()]
        staging.copy_(packed, non_blocking=True)
        torch.cuda.current_stream(packed.device).synchronize()  # the step's one wait for the device
        return staging.numpy()


def _laid_out(pieces: list[Tensor], offset: int) -> tuple[list[Tensor], list[tuple[int, int]]]:
    """``pieces`` as bytes placed from ``offset`` on (a multiple of ``ALIGN``), and each one's (start, end).
    Larger items come first, so every piece starts at a multiple of its own item size with no padding."""
    order = sorted(range(len(pieces)), key=lambda index: -pieces[index].element_size())
    parts, spans = [], [(0, 0)] * len(pieces)
    for index in order:
        raw = pieces[index].contiguous().view(-1).view(torch.uint8)
        spans[index] = (offset, offset + raw.numel())
        parts.append(raw)
        offset += raw.numel()
    return parts, spans


def _view(host: np.ndarray, span: tuple[int, int], piece: Tensor) -> np.ndarray:
    start, end = span
    return host[start:end].view(NUMPY_DTYPES[piece.dtype]).reshape(tuple(piece.shape))


# What reads a tensor's values on the host (on a GPU: waits for the device, then copies). ``.cpu()`` is left out:
# the values reach the host through the ``.numpy()`` (or ``.item()``) that follows it.
HOST_READS = frozenset({"numpy", "item", "tolist", "__bool__", "__int__", "__float__", "__index__", "equal"})


class HostReads(TorchFunctionMode):
    """Counts the host reads of tensor values made inside it (``reads``), whatever the device: torch hands
    every tensor method and function to an active mode before it runs. Reads made within a function named in
    ``ignoring`` are not counted (``masked_softmax`` reads a mask only on the CPU, where no device is waited
    for). For tests and benchmarks."""

    def __init__(self, ignoring: tuple[str, ...] = ()) -> None:
        super().__init__()
        self.ignoring = ignoring
        self.reads = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if getattr(func, "__name__", None) in HOST_READS and not called_from(self.ignoring):
            self.reads += 1
        return func(*args, **(kwargs or {}))


def called_from(functions: tuple[str, ...]) -> bool:
    """Whether a function of one of these names is running below the caller in this thread's stack."""
    frame = sys._getframe(1)
    while functions and frame is not None:
        if frame.f_code.co_name in functions:
            return True
        frame = frame.f_back
    return False
