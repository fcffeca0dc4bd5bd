"""Pruning curves: the score as heads are switched off cumulatively in three orders of a head-importance ranking
(least important first, most important first, seeded random), for the NLL one teacher-forced pass per group of
points (copy ``c`` of a pass gates its own prefix of the order), for chrF / exact match the pairs decoded again at
each point (``attnviz importance --prune-curve``, the Head importance panel's "Pruning curve")."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
import torch
from torch import Tensor

from ..inference.distributed import ONE_PROCESS, Processes
from ..inference.translator import Translator
from ..nn.ablation import Ablation, HeadGates
from .importance import (
    IMPORTANCE_METRICS, NLL, TOKENS_PER_PASS, ForcedPairs, Head, HeadImportance, PointSteps, Steps, _model_dtype,
    drive, encode_references, output_max_len, output_score_steps, pooled_means, shared_batches, token_nll,
)
from .steps import units_as
from ..inference.batch_sizes import Batching


@dataclass
class PruneCurves:
    """The score as heads are switched off cumulatively, in three orders of a :class:`HeadImportance`'s
    ranking: least important first (``increasing``), most important first (``decreasing``) and a seeded random
    order. ``curves[order][k]`` is the score with that order's first ``k`` heads off (``k`` = 0 … every head)."""

    metric: str
    seed: int
    orders: dict[str, list[Head]] = field(default_factory=dict)
    curves: dict[str, np.ndarray] = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def metric_name(self) -> str:
        return IMPORTANCE_METRICS[self.metric]

    def to_json(self) -> dict:
        return {"metric": self.metric, "seed": self.seed, "seconds": round(self.seconds, 3),
                "orders": {order: ["{}:{}:{}".format(*head) for head in heads] for order, heads in self.orders.items()},
                "scores": {order: curve.tolist() for order, curve in self.curves.items()}}


def prune_orders(importance: HeadImportance, seed: int = 0) -> dict[str, list[Head]]:
    """Every scored head, least important first, most important first, and in a random order from ``seed``."""
    ranked = [(kind, layer, head) for kind, layer, head, _ in importance.ranking()]  # largest drop first
    shuffled = list(ranked)
    np.random.default_rng(seed).shuffle(shuffled)
    return {"increasing": ranked[::-1], "decreasing": ranked, "random": shuffled}


def prune_curves(translator: Translator, pairs: Sequence[tuple[str, str]], importance: HeadImportance, *,
                 seed: int = 0, beam: int = 1, max_len: int | None = None,
                 tokens_per_pass: int = TOKENS_PER_PASS, batching: Batching = Batching(),
                 processes: Processes = ONE_PROCESS) -> PruneCurves:
    """:func:`prune_curve_steps` driven to its end."""
    return drive(prune_curve_steps(translator, pairs, importance, seed=seed, beam=beam, max_len=max_len,
                                   tokens_per_pass=tokens_per_pass, batching=batching, processes=processes))


def prune_curve_steps(translator: Translator, pairs: Sequence[tuple[str, str]], importance: HeadImportance, *,
                      seed: int = 0, beam: int = 1, max_len: int | None = None,
                      tokens_per_pass: int = TOKENS_PER_PASS, batching: Batching = Batching(),
                      processes: Processes = ONE_PROCESS) -> Steps:
    """:class:`PruneCurves` in ``importance``'s metric, yielding ``(points done, points in all, order)`` after each
    unit (models/analysis/steps.py): for the NLL a teacher-forced pass over the pairs (one copy of them per point,
    as many points a pass as fit ``tokens_per_pass``), for chrF / exact match one batch (``batching``) of the pairs
    decoded again at a point. Without ``max_len`` outputs stop where :func:`head_importance_steps` stops them, so a
    curve's first point is the importance's baseline."""
    started = time.perf_counter()
    result = PruneCurves(metric=importance.metric, seed=seed, orders=prune_orders(importance, seed))
    total = sum(len(heads) + 1 for heads in result.orders.values())
    done = 0
    if importance.metric == NLL:
        encoded, _ = encode_references(translator, pairs)
        batches = shared_batches(translator, encoded, tokens_per_pass=tokens_per_pass, processes=processes)
    else:
        max_len = max_len or output_max_len(translator, pairs)
    for order, heads in result.orders.items():
        scores = (_nll_curve_steps(translator, batches, heads, tokens_per_pass=tokens_per_pass, processes=processes)
                  if importance.metric == NLL else
                  _output_curve_steps(translator, pairs, heads, metric=importance.metric, beam=beam, max_len=max_len,
                                      batching=batching, processes=processes))
        while True:
            try:
                points = next(scores)
            except StopIteration as end:
                result.curves[order] = end.value
                break
            yield done + points, total, order
        done += len(heads) + 1
    result.seconds = time.perf_counter() - started
    return result


def _output_curve_steps(translator: Translator, pairs: Sequence[tuple[str, str]], heads: Sequence[Head], *,
                        metric: str, beam: int, max_len: int, batching: Batching, processes: Processes) -> PointSteps:
    """chrF / exact match with ``heads[:k]`` off, for k = 0 … len(heads): the pairs decoded again at each point,
    yielding the points done after each batch."""
    scores = []
    for count in range(len(heads) + 1):
        scores.append((yield from units_as(
            output_score_steps(translator, pairs, Ablation.of(heads[:count]), metric=metric, beam=beam,
                               max_len=max_len, batching=batching, processes=processes), count)))
        yield count + 1
    return np.array(scores)


def _nll_curve_steps(translator: Translator, batches: Sequence[ForcedPairs], heads: Sequence[Head], *,
                     tokens_per_pass: int, processes: Processes) -> PointSteps:
    """The pooled NLL with ``heads[:k]`` off, for k = 0 … len(heads), yielding the points done after each pass:
    copy ``c`` of a pass gates its own prefix."""
    shape = translator.model.attention_shape()
    per_pass = max(1, tokens_per_pass // max((batch.padded_tokens for batch in batches), default=1))
    like = torch.ones((), dtype=_model_dtype(translator), device=translator.device)
    totals = np.zeros(len(heads) + 1)
    for start in range(0, len(heads) + 1, per_pass):
        counts = range(start, min(start + per_pass, len(heads) + 1))
        with torch.inference_mode():  # per pass: whatever runs between two passes runs as it would alone
            for batch in batches:
                nll = token_nll(translator, batch.repeated(len(counts)),
                                prefix_gates(heads, counts, shape=shape, rows=batch.rows, like=like))
                totals[start:start + len(counts)] += nll.view(len(counts), -1).double().sum(dim=1).cpu().numpy()
        yield counts.stop
    return pooled_means(totals, batches, processes)


def prefix_gates(heads: Sequence[Head], counts: range, *, shape, rows: int, like: Tensor) -> HeadGates:
    """Gates for ``len(counts)`` copies of ``rows`` pairs: copy ``c`` switches ``heads[:counts[c]]`` off."""
    gates: dict[tuple[str, int], Tensor] = {}
    for copy, count in enumerate(counts):
        for kind, layer, index in heads[:count]:
            gate = gates.get((kind, layer))
            if gate is None:
                gate = gates[(kind, layer)] = like.new_ones(len(counts) * rows, shape[kind][1])
            gate[copy * rows: (copy + 1) * rows, index] = 0.0
    return HeadGates(gates, copies=len(counts))
