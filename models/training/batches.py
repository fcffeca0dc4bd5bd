"""Training's data order: global batches of pair indices, seeded per epoch and bucketed by length."""

from __future__ import annotations

import math

import torch

from ..text.splits import derived_seed

BUCKET_BATCHES = 32  # batches' worth of pairs sorted by length together


class BatchStream:
    """Global batches, each exactly ``batch_size`` pair indices (an epoch's last batch wraps around to its
    start). Epoch e: a permutation seeded by ``(seed, e)``, sorted by length within buckets of
    ``BUCKET_BATCHES`` batches, cut into batches, batches shuffled."""

    def __init__(self, lengths: list[int], batch_size: int, seed: int, epoch: int = 0, index: int = 0):
        self.lengths, self.batch_size, self.seed = lengths, batch_size, seed
        self.epoch, self.index = epoch, index
        self._batches = self._epoch_batches(epoch)

    def next(self) -> list[int]:
        if self.index == len(self._batches):
            self.epoch, self.index = self.epoch + 1, 0
            self._batches = self._epoch_batches(self.epoch)
        self.index += 1
        return self._batches[self.index - 1]

    def position(self) -> dict[str, int]:
        return {"epoch": self.epoch, "index": self.index}

    def _epoch_batches(self, epoch: int) -> list[list[int]]:
        generator = torch.Generator().manual_seed(derived_seed(self.seed, "data", epoch))
        order = torch.randperm(len(self.lengths), generator=generator).tolist()
        needed = math.ceil(len(order) / self.batch_size) * self.batch_size
        order = (order * math.ceil(needed / len(order)))[:needed]
        batches = []
        for start in range(0, needed, self.batch_size * BUCKET_BATCHES):
            bucket = sorted(order[start: start + self.batch_size * BUCKET_BATCHES], key=self.lengths.__getitem__)
            batches += [bucket[i: i + self.batch_size] for i in range(0, len(bucket), self.batch_size)]
        return [batches[i] for i in torch.randperm(len(batches), generator=generator).tolist()]
