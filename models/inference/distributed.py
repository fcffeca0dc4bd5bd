"""Work spread over the processes ``torchrun`` starts: the one place that joins its process group, says which
share of a corpus this process takes and adds up what the processes computed. Training and the corpus
analyses (head importance, head statistics) use it alike.

Under ``torchrun --nproc_per_node N`` (environment ``WORLD_SIZE`` > 1) each process joins the group torchrun
describes: gloo on the CPU, NCCL on CUDA (process ``LOCAL_RANK`` on its own GPU). Without torchrun
:data:`ONE_PROCESS` stands for the single process and every collective is the identity, so nothing changes.
Sums travel as float64: integer counts below 2**53 and float32 values stay exact, so a quantity only one
process computed (a sentence of its share) arrives unchanged.
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator, Sequence, TypeVar

import numpy as np
import torch
import torch.distributed as dist
from torch import Tensor

from ..errors import ConfigError
from .translator import resolve_device

Item = TypeVar("Item")


def launched_processes() -> int:
    """How many processes torchrun started for this run (1 without torchrun)."""
    return int(os.environ.get("WORLD_SIZE", "1"))


def launched_rank() -> int:
    """This process's rank among them (0 without torchrun), known before the group is joined."""
    return int(os.environ.get("RANK", "0"))


@dataclass(frozen=True)
class Processes:
    """This process's place among the processes of one run: ``rank`` of ``world``, computing on ``device``."""

    device: torch.device = torch.device("cpu")
    rank: int = 0
    world: int = 1
    owns_group: bool = False

    @classmethod
    def join(cls, device: torch.device) -> "Processes":
        """The processes torchrun started (joining their group unless this process already has), or this one
        alone; on CUDA each process takes the GPU of its ``LOCAL_RANK``."""
        if launched_processes() <= 1:
            return cls(device)
        if device.type not in ("cpu", "cuda"):
            raise ConfigError(f"runs over several processes use cpu or cuda, not {device.type}")
        if device.type == "cuda":
            device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
            torch.cuda.set_device(device)
        owns_group = not dist.is_initialized()
        if owns_group:
            dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
        return cls(device, dist.get_rank(), world=dist.get_world_size(), owns_group=owns_group)

    @property
    def main(self) -> bool:
        """Rank 0: the process that prints and writes files."""
        return self.rank == 0

    def shard(self, items: Sequence[Item]) -> list[Item]:
        """This process's share of ``items``: every ``world``-th one from its rank on (shares differ by at most
        one item, and sorted input is spread evenly)."""
        return list(items[self.rank:: self.world])

    def gather_shards(self, share: Sequence[Item]) -> list[Item]:
        """Every process's :meth:`shard` of a list put back together, in the order of the whole list."""
        if self.world == 1:
            return list(share)
        shares: list[list[Item]] = [[] for _ in range(self.world)]
        dist.all_gather_object(shares, list(share))
        whole: list[Item] = [None] * sum(len(part) for part in shares)  # type: ignore[list-item]
        for rank, part in enumerate(shares):
            whole[rank:: self.world] = part
        return whole

    def sum_arrays(self, arrays: Sequence[np.ndarray]) -> list[np.ndarray]:
        """``arrays`` added up over the processes (one collective for all of them), each in its own dtype."""
        if self.world == 1:
            return [np.asarray(array) for array in arrays]
        flat = np.concatenate([np.asarray(array, dtype=np.float64).ravel() for array in arrays] or [np.zeros(0)])
        total = torch.from_numpy(flat).to(self.device)  # NCCL reduces CUDA tensors only
        dist.all_reduce(total)
        values, result, start = total.cpu().numpy(), [], 0
        for array in arrays:
            array = np.asarray(array)
            result.append(values[start: start + array.size].reshape(array.shape).astype(array.dtype))
            start += array.size
        return result

    def sum(self, value: Tensor) -> Tensor:
        """A tensor on ``device`` added up over the processes (a new tensor; ``value`` is left alone)."""
        if self.world > 1:
            value = value.clone()
            dist.all_reduce(value)
        return value

    def gather(self, tensor: Tensor) -> list[Tensor]:
        """Every rank's ``tensor`` (same shape on all), on the CPU."""
        if self.world == 1:
            return [tensor.cpu()]
        local = tensor.to(self.device)  # NCCL moves CUDA tensors only
        parts = [torch.empty_like(local) for _ in range(self.world)]
        dist.all_gather(parts, local)
        return [part.cpu() for part in parts]

    def barrier(self) -> None:
        if self.world > 1:
            dist.barrier()

    def finish(self) -> None:
        """Leave the group this process joined (a group someone else made is theirs to end)."""
        if self.owns_group and dist.is_initialized():
            dist.destroy_process_group()


ONE_PROCESS = Processes()


@contextmanager
def joined(device: str | None) -> Iterator[Processes]:
    """The processes of this run (:meth:`Processes.join`) until the block ends, ``device`` named as ``--device``
    names it (None: the best available)."""
    processes = Processes.join(resolve_device(device))
    try:
        yield processes
    finally:
        processes.finish()
