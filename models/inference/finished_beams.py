"""Beam search as transformers' ``generate(num_beams=K)`` runs it (its ``_beam_search``), for decoder-only models,
whose users compare with it: a hypothesis that ends leaves the beam for a list of at most K finished ones, ranked by
``log_prob / length ** length_penalty`` (models/inference/prompts.py), and K unfinished hypotheses go on.

Each step takes the best ``max(2, 1 + end tokens) · K`` extensions of the running hypotheses by summed
log-probability; those among the first K that end (or reach the length limit) join the finished list if they rank
in its best K; the best K that do not end run on. The search stops at the length limit, or once the list is full
and the best running hypothesis, divided by its length to the penalty, cannot beat the list's worst (transformers'
default ``early_stopping=False`` heuristic). The results are the finished list, best first.

In the steps' terms (``DecodeStep``, one row per hypothesis), a step's rows are the K running hypotheses, then the
finished list (``finished`` True), best first; a finished hypothesis is carried to later steps by padding at no
cost, as the other beam search carries its finished rows. Everything is chosen on the device; a step reads it once.
"""

from __future__ import annotations

from typing import Generator, Sequence

import numpy as np
import torch

from ..trace.records import DecodeResult, DecodeStep
from .choices import without_nan
from .prompts import generated_length_score


def finished_list_beam_search(decoder, *, beam: int = 4, length_penalty: float = 1.0,
                              first: Sequence[int] = ()) -> Generator[DecodeStep, None, list[DecodeResult]]:
    """Keep ``beam`` running hypotheses and a list of the ``beam`` best finished ones (see the module's text);
    ``decoder`` is the run's ``_Decoder`` (models/inference/decoding.py), through which ``beam_search`` calls this;
    every hypothesis starts with ``first``."""
    decoder.begin()
    decoder.keep_rows(2 * beam)
    device = decoder.src.device
    tokens = torch.tensor([decoder.start], device=device)
    scores = torch.zeros(1, dtype=torch.float64, device=device)
    finished = torch.zeros(1, dtype=torch.bool, device=device)
    norms = torch.full((1,), float("-inf"), dtype=torch.float64, device=device)  # the finished rows' ranking scores
    lengths = np.zeros(1, dtype=np.int64)  # on the host: each finished row's generated length
    keep = max(2, 1 + len(decoder.ends)) * beam
    first_ids = torch.tensor(list(first), dtype=torch.long, device=device)  # copied to the device once
    steps: list[DecodeStep] = []
    for index in range(decoder.max_len):
        log_probs, attention, masks = decoder.step(tokens)  # [R, V]
        log_probs, broken = without_nan(log_probs)
        last = index == decoder.max_len - 1
        searched = log_probs  # the steps keep the model's own scores
        if index < len(first):  # only the token every hypothesis starts with
            searched = torch.full_like(log_probs, float("-inf")).index_copy(
                1, first_ids[index: index + 1], log_probs[:, first[index]: first[index] + 1])
        chosen = _choose(decoder, index, searched, scores=scores, finished=finished, norms=norms, beam=beam,
                         keep=keep, last=last, length_penalty=length_penalty)
        parents, tokens, scores, finished, norms, frozen = chosen
        steps.append(decoder.make_step(index, log_probs, parents=parents, tokens=tokens, scores=scores,
                                       finished=finished, attention=attention, masks=masks, broken=broken,
                                       frozen=frozen))
        step = steps[-1]
        rows = step.beam_size
        parents, tokens, scores, finished, norms = parents[:rows], tokens[:rows], scores[:rows], finished[:rows], \
            norms[:rows]
        lengths = np.where(_was_finished(steps), lengths[np.minimum(step.parents, len(lengths) - 1)], index + 1)
        if decoder.need_weights:
            decoder.let_go(steps)
        yield step
        if last or _cannot_improve(step, lengths, beam=beam, generated=index + 1, length_penalty=length_penalty):
            break
        decoder.reorder(parents, step.parents)
    final = np.flatnonzero(steps[-1].finished) if steps else []
    return decoder.results(steps, length_penalty, rows=[int(row) for row in final])


def _choose(decoder, index: int, log_probs, *, scores, finished, norms, beam: int, keep: int, last,
            length_penalty: float, sentences: int = 1):
    """The next step's rows on the device: parents, tokens, summed log-probabilities, finished flags, the finished
    rows' ranking scores and which rows carry a finished hypothesis on (``frozen``). The rows are ``sentences``
    groups of equal size, each one sentence's (models/inference/batched.py; parents index every group's rows);
    ``last``: whether this is the last step, a bool or per sentence ``[sentences]``."""
    count = sentences
    candidates = decoder.searchable(index, log_probs).double() + scores[:, None]
    candidates = candidates.masked_fill(finished[:, None], float("-inf"))  # the finished list is not extended
    rows, vocab = candidates.shape[0] // count, candidates.shape[1]
    best = candidates.view(count, rows * vocab).topk(min(keep, rows * vocab), dim=1)
    base = torch.arange(count, device=candidates.device)[:, None] * rows
    parents, tokens, values = best.indices // vocab + base, best.indices % vocab, best.values  # [sentences, k]
    last = torch.as_tensor(last, device=candidates.device).expand(count)
    ends = decoder.ended(tokens) | last[:, None]
    # the running hypotheses: the best that do not end
    running = (values - ends.double() * 1e9).topk(min(beam, values.shape[1]), dim=1).indices
    # the finished list: the old one and those of the first ``beam`` candidates that end, its best ``beam`` kept
    joining = ends & (torch.arange(values.shape[1], device=values.device) < beam)
    new_norms = torch.where(joining, values / float(index + 1) ** length_penalty if length_penalty else values,
                            torch.full_like(values, float("-inf")))
    merged = torch.cat([norms.masked_fill(~finished, float("-inf")).view(count, rows), new_norms], dim=1)
    listed = merged.topk(min(beam, merged.shape[1]), dim=1).indices
    old = listed < rows
    source, kept_row = (listed - rows).clamp(min=0), listed.clamp(max=rows - 1)
    listed_parents = torch.where(old, kept_row + base, parents.gather(1, source))
    listed_tokens = torch.where(old, torch.full_like(listed, decoder.pad), tokens.gather(1, source))
    listed_scores = torch.where(old, scores.view(count, rows).gather(1, kept_row), values.gather(1, source))
    listed_norms = merged.gather(1, listed)
    listed_scores = listed_scores.masked_fill(listed_norms == float("-inf"), float("-inf"))  # dropped by make_step
    run_values = values.gather(1, running)
    unfinished = torch.zeros_like(running, dtype=torch.bool)
    joined = (torch.cat([parents.gather(1, running), listed_parents], dim=1),
              torch.cat([tokens.gather(1, running), listed_tokens], dim=1),
              torch.cat([run_values, listed_scores], dim=1),
              torch.cat([unfinished, torch.ones_like(listed, dtype=torch.bool)], dim=1),
              torch.cat([torch.full_like(run_values, float("-inf")), listed_norms], dim=1),
              torch.cat([unfinished, old], dim=1))
    return tuple(part.reshape(-1) for part in joined)


def _was_finished(steps: list[DecodeStep]) -> np.ndarray:
    """Per row of the newest step: whether it carries on a hypothesis that had finished before it."""
    if len(steps) < 2:
        return np.zeros(steps[-1].beam_size, dtype=bool)
    return steps[-2].finished[steps[-1].parents]


def _cannot_improve(step: DecodeStep, lengths: np.ndarray, *, beam: int, generated: int,
                    length_penalty: float) -> bool:
    """transformers' stopping heuristic (``early_stopping=False``): the finished list is full and the best running
    hypothesis, divided by the length generated so far to the penalty, does not beat the list's worst."""
    finished = step.finished
    if finished.sum() < beam or finished.all():
        return bool(finished.all())
    worst = min(generated_length_score(float(score), int(length), length_penalty)
                for score, length in zip(step.scores[finished], lengths[finished]))
    return generated_length_score(float(step.scores[~finished][0]), generated, length_penalty) <= worst
