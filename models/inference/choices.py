"""What a decoding step reports of its choices: each chosen token's probability and rank among all the tokens, and
the ``top_k`` most likely alternatives, computed on the device (``on_device``, read in the step's one transfer to
the host) and labelled on the host (``labelled``): the choice fields of ``DecodeStep`` (models/trace/records.py)."""

from __future__ import annotations

from typing import Callable

import numpy as np
import torch
from torch import Tensor


class Choices:
    """The choices of one run: ``label`` names a token id, ``top_k`` alternatives are reported per row."""

    def __init__(self, label: Callable[[int], str], top_k: int):
        self.label, self.top_k = label, top_k

    def on_device(self, log_probs: Tensor, tokens: Tensor, frozen: Tensor | None = None) -> dict[str, Tensor]:
        """Per row of ``log_probs`` ``[N, V]``, on the device: the chosen token's probability and rank, and
        the top-k (see :meth:`labelled` for the host's side).

        Rows are a beam's hypotheses at one step, or all the steps of one forced pass.
        """
        chosen = log_probs.gather(1, tokens[:, None])[:, 0]  # [N]
        # counted in int32 (a vocabulary fits), twice as fast over [N, V] as a count in int64
        ranks = (log_probs > chosen[:, None]).sum(dim=1, dtype=torch.int32).long()
        if frozen is not None:
            chosen, ranks = chosen.masked_fill(frozen, 0.0), ranks.masked_fill(frozen, 0)
        top = log_probs.topk(min(self.top_k, log_probs.shape[1]), dim=1)
        return dict(token_ids=tokens, probabilities=chosen.exp(), ranks=ranks, top_ids=top.indices,
                    top_probs=top.values.exp())

    def labelled(self, host: dict[str, np.ndarray]) -> dict:
        """The host arrays of :meth:`on_device` with their tokens' labels: ``DecodeStep``'s choice fields."""
        token_ids, top_ids = host["token_ids"], host["top_ids"]
        return dict(token_ids=token_ids, tokens=[self.label(int(t)) for t in token_ids],
                    probabilities=host["probabilities"], ranks=host["ranks"], top_ids=top_ids,
                    top_tokens=[[self.label(int(t)) for t in row] for row in top_ids], top_probs=host["top_probs"])


def without_nan(log_probs: Tensor) -> tuple[Tensor, Tensor]:
    """``log_probs`` ``[N, V]`` with NaN as -inf (never chosen; the rest untouched), and which rows held NaN
    ``[N]``: both on the device, so the host learns of NaN from the step's one transfer. A row's maximum is NaN
    exactly where the row holds NaN, so neither pass over ``[N, V]`` writes a mask of it."""
    inf = float("inf")
    return log_probs.nan_to_num(nan=-inf, posinf=inf, neginf=-inf), torch.isnan(log_probs.amax(dim=-1))
