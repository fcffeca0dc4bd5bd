"""Scores of a checkpoint on held-out pairs: exact match, chrF and BLEU (sacrebleu), accuracy by source
length, and optionally how well cross-attention aligns with known copy positions.

The alignment score counts, over correctly translated examples, the output tokens whose strongest
cross-attention (last layer, mean over heads) falls on the source token they copy. It assumes
character tokenizers on both sides, where output token i is produced by query row i of the trace.
"""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Callable, Iterator, Sequence

import numpy as np
import sacrebleu

from ..nn.ablation import NO_ABLATION, Ablation
from ..inference.corpus import Batching, corpus_batches
from ..inference.translator import Translator
from ..trace.records import DecodeResult

CopySources = Callable[[str], list[int | None]]


@dataclass
class Evaluation:
    examples: int
    exact: float  # share of outputs equal to the reference
    chrf: float
    bleu: float
    by_length: dict[int, tuple[int, int]] = field(default_factory=dict)  # source length → (correct, total)
    alignment: float | None = None
    aligned_tokens: int = 0
    seconds: float = 0.0

    def lines(self) -> list[str]:
        lines = [f"examples {self.examples}", f"exact match {100 * self.exact:.2f}%", f"chrF {self.chrf:.2f}",
                 f"BLEU {self.bleu:.2f}"]
        if self.alignment is not None:
            lines.append(f"alignment {100 * self.alignment:.2f}% of {self.aligned_tokens} copied tokens")
        if 0 < len(self.by_length) <= 30:  # words; for sentences every length is its own bucket
            lines.append("exact match by source length: " + ", ".join(
                f"{length}: {correct}/{total}" for length, (correct, total) in sorted(self.by_length.items())))
        lines.append(f"seconds {self.seconds:.1f}")
        return lines


def evaluate(translator: Translator, pairs: Sequence[tuple[str, str]], *, beam: int = 1,
             max_len: int | None = None, copy_sources: CopySources | None = None,
             ablation: Ablation = NO_ABLATION, batching: Batching = Batching()) -> Evaluation:
    """Score the translator's output on ``pairs``, decoded in batches (``batching``); ``ablation`` switches heads off
    (models/nn/ablation.py)."""
    started = time.perf_counter()
    hypotheses, correct_by_length = [], defaultdict(lambda: [0, 0])
    hits = total = 0
    results = decoded(translator, pairs, beam=beam, max_len=max_len, ablation=ablation,
                      need_weights=copy_sources is not None, batching=batching)
    for (source_text, reference), result in zip(pairs, results):
        hypotheses.append(result.text)
        correct = result.text == reference
        bucket = correct_by_length[len(source_text)]
        bucket[0] += int(correct)
        bucket[1] += 1
        if copy_sources is not None and correct and result.trace is not None and "cross" in result.trace.attention:
            found, counted = _aligned(result.trace.attention["cross"][-1], copy_sources(source_text))
            hits, total = hits + found, total + counted
    exact, chrf, bleu = output_scores(hypotheses, [reference for _, reference in pairs])
    return Evaluation(
        examples=len(pairs), exact=exact, chrf=chrf, bleu=bleu,
        by_length={length: (c, t) for length, (c, t) in correct_by_length.items()},
        alignment=(hits / total if total else None) if copy_sources is not None else None,
        aligned_tokens=total, seconds=time.perf_counter() - started)


def decoded(translator: Translator, pairs: Sequence[tuple[str, str]], *, beam: int = 1, max_len: int | None = None,
            ablation: Ablation = NO_ABLATION, need_weights: bool = False,
            batching: Batching = Batching()) -> Iterator[DecodeResult]:
    """The best output for each pair's source, in order, decoded in batches (models/inference/corpus.py; characters
    the vocabulary lacks become its unknown token)."""
    for released in decoded_batches(translator, pairs, beam=beam, max_len=max_len, ablation=ablation,
                                    need_weights=need_weights, batching=batching):
        yield from released


def decoded_batches(translator: Translator, pairs: Sequence[tuple[str, str]], *, beam: int = 1,
                    max_len: int | None = None, ablation: Ablation = NO_ABLATION, need_weights: bool = False,
                    batching: Batching = Batching()) -> Iterator[list[DecodeResult]]:
    """:func:`decoded`'s outputs one list per batch decoded (``corpus_batches``): the units of a corpus job."""
    sources = [translator.source(source_text, unknown="replace") for source_text, _ in pairs]
    for released in corpus_batches(translator, sources, beam=beam, batching=batching, max_len=max_len,
                                   need_weights=need_weights, ablation=ablation):
        yield [results[0] for results in released]


def output_scores(hypotheses: Sequence[str], references: Sequence[str]) -> tuple[float, float, float]:
    """The share of outputs equal to their reference, corpus chrF and BLEU (all 0 without outputs)."""
    if not hypotheses:
        return 0.0, 0.0, 0.0
    exact = float(np.mean([h == r for h, r in zip(hypotheses, references)]))
    return (exact, sacrebleu.corpus_chrf(list(hypotheses), [list(references)]).score,
            sacrebleu.corpus_bleu(list(hypotheses), [list(references)]).score)


def _aligned(cross_layer: np.ndarray, sources: list[int | None]) -> tuple[int, int]:
    """How many copying output tokens attend most strongly to their own source token."""
    strongest = cross_layer.mean(axis=0).argmax(axis=-1)  # [T] over source positions
    pairs = [(row, source) for row, source in enumerate(sources) if source is not None and row < len(strongest)]
    return sum(int(strongest[row] == source) for row, source in pairs), len(pairs)
