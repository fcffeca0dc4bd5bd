"""A corpus decoded in batches (models/inference/batched.py), its results handed back in input order.

The inputs are taken a window at a time (``Batching.window`` inputs); inside a window they are sorted by length and
cut into batches bounded by tokens (``Batching.tokens``: a batch's rows, beam hypotheses included, times its
longest source) and by sentences (``Batching.size``; 1 decodes one sentence at a time). A result is handed on as
soon as every input before it has been: the first outputs come after the first window, not after the whole corpus.
:func:`corpus_batches` hands them on batch by batch (a long job's units, models/analysis/steps.py: the window's worker
answers a run between two batches); :func:`decode_corpus` is the same, one result at a time.
Under torchrun each process decodes its share of each window (every ``world``-th of its sorted inputs) in batches,
and the main process receives the window's results in order (models/inference/distributed.py).
"""

from __future__ import annotations

from typing import Callable, Iterator, Sequence

from ..trace.records import DecodeResult
from .batch_sizes import Batching, length_batches
from .distributed import ONE_PROCESS, Processes
from .modes import decoding_mode
from .translator import SourceInput, Translator

Decode = Callable[[list[SourceInput]], list[list[DecodeResult]]]


def decode_corpus(translator: Translator, sources: Sequence[SourceInput | None], *, beam: int = 1,
                  batching: Batching = Batching(), processes: Processes = ONE_PROCESS,
                  **settings) -> Iterator[list[DecodeResult] | None]:
    """Each source's results (best first; None for a source given as None: an input refused before decoding), in
    input order, decoded in batches (greedy when ``beam`` is 1); ``settings``: :meth:`Translator.decode_batch`'s.
    Under torchrun every process must call it alike; only the main process's results are complete (the others
    receive nothing)."""
    for released in corpus_batches(translator, sources, beam=beam, batching=batching, processes=processes,
                                   **settings):
        yield from released


def corpus_batches(translator: Translator, sources: Sequence[SourceInput | None], *, beam: int = 1,
                   batching: Batching = Batching(), processes: Processes = ONE_PROCESS,
                   **settings) -> Iterator[list[list[DecodeResult] | None]]:
    """:func:`decode_corpus`'s results as they are released after each batch: one list a batch (in input order,
    following the previous lists; empty while an earlier input is still to come), so that a caller can do other
    things between two batches."""

    settings = {"top_k": 0, **settings}  # a corpus's outputs, without each step's alternatives unless asked for

    def decode(batch: list[SourceInput]) -> list[list[DecodeResult]]:
        return translator.decode_batch(batch, mode=decoding_mode(beam), beam=beam, **settings)

    for start in range(0, len(sources), batching.window):
        yield from _window(decode, list(sources[start: start + batching.window]), batching, beam=beam,
                           processes=processes)


def _window(decode: Decode, sources: list[SourceInput | None], batching: Batching, *, beam: int,
            processes: Processes) -> Iterator[list[list[DecodeResult] | None]]:
    present = [index for index, source in enumerate(sources) if source is not None]
    ordered = sorted(present, key=lambda index: len(sources[index].ids))
    share = processes.shard(ordered)
    found: dict[int, list[DecodeResult]] = {}
    batches = length_batches([len(sources[index].ids) for index in share], batching, rows=beam)
    if processes.world == 1:  # results handed on as the batches finish
        yield from _in_order(decode, sources, share, batches=batches, found=found)
        return
    for batch in batches:
        found.update(zip([share[i] for i in batch], decode([sources[share[i]] for i in batch])))
        yield []
    everything = processes.gather_shards([found[index] for index in share])
    if processes.main:
        found = dict(zip(ordered, everything))
        yield [found.get(index) for index in range(len(sources))]


def _in_order(decode: Decode, sources: list[SourceInput | None], share: list[int], *, batches: list[list[int]],
              found: dict[int, list[DecodeResult]]) -> Iterator[list[list[DecodeResult] | None]]:
    following = 0
    if not batches and sources:  # every input refused before decoding
        batches = [[]]
    for batch in batches:
        if batch:
            found.update(zip([share[i] for i in batch], decode([sources[share[i]] for i in batch])))
        released = []
        while following < len(sources) and (sources[following] is None or following in found):
            released.append(found.pop(following, None))
            following += 1
        yield released
