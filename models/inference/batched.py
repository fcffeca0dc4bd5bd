"""Greedy and beam decoding of B sentences at once: the runs of models/inference/decoding.py, side by side in one
batch, each result what the sentence's run alone gives (tokens, scores, and traces where asked for).

    results = decode_batch(model, [ids_1, ids_2, ...], [capture_1, capture_2, ...], Search(beam=4), Mode.BEAM)
    results[i]  # sentence i's DecodeResults, best first

Each sentence has its own ``_Decoder`` (its rules, its row buffers, its trace assembly, its results); this module
only feeds them together. The sources are right-padded to the longest (the models mask padded keys; a GRU encoder
runs each sentence over its own tokens; a decoder-only model gives each row its own positions after its real
prompt, models/nn/decoder_only.py). The batch's rows are grouped by sentence, each sentence with the same number of
rows (1 for greedy decoding; a beam's width, its rows beyond what could be chosen scored -inf and dropped from its
steps as a one-sentence beam drops them). A step reads the device once for the whole batch (one ``HostTransfer``):
each sentence's ``DecodeStep`` is built from its rows of that copy, its attention and mask rows cut to its own keys.
A sentence that ends leaves the batch: the decoder state keeps the rows of the others (``DecoderState.reorder``),
so the batch shrinks as it goes.

A decoder-only model's beam keeps its list of finished hypotheses per sentence (models/inference/finished_beams.py,
whose step chooses every sentence's rows at once). A run without the key/value cache (the cache's reference) runs one
sentence at a time.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import torch
from torch import Tensor

from ..nn.base import Seq2Seq
from ..nn.intermediates import Intermediates, keeping_attention
from ..trace.records import DecodeResult, DecodeStep
from .choices import without_nan
from .decoding import DECODERS, Capture, Search, _Decoder, beam_candidates, finish
from .finished_beams import _cannot_improve, _was_finished
from .finished_beams import _choose as choose_listed
from .modes import Mode, check_beam


def decode_batch(model: Seq2Seq, sources: Sequence[Sequence[int]], captures: Sequence[Capture],
                 search: Search = Search(), mode: str = Mode.GREEDY) -> list[list[DecodeResult]]:
    """Decode every source (greedy, or beam search of ``search.beam``) in one batch; per source its results, best
    first, as its own run (``DECODERS[mode]``) returns them. ``captures``: each source's (its labels); every capture
    must ask for the same top-k, weights, number type and ablation."""
    mode = Mode(mode)
    if mode not in (Mode.GREEDY, Mode.BEAM):
        raise ValueError("only greedy and beam decoding run in batches")
    if mode == Mode.BEAM:
        check_beam(search.beam)
    if len(sources) != len(captures):
        raise ValueError(f"{len(captures)} captures for {len(sources)} sources")
    decoders = [_Decoder(model, ids, capture) for ids, capture in zip(sources, captures)]
    alone = [index for index, decoder in enumerate(decoders) if not _batchable(decoder, mode)]
    results: list[list[DecodeResult] | None] = [None] * len(decoders)
    for index in alone:
        results[index] = finish(DECODERS[mode](model, sources[index], captures[index], search))
    for group in _groups(model, decoders, [index for index in range(len(decoders)) if index not in alone]):
        for index, found in zip(group, _Batch(model, [decoders[index] for index in group], search, mode=mode).run()):
            results[index] = found
    return results  # type: ignore[return-value]


def _batchable(decoder: _Decoder, mode: Mode) -> bool:
    return decoder.use_cache


def _groups(model: Seq2Seq, decoders: list[_Decoder], indices: list[int]) -> list[list[int]]:
    """The batches ``indices`` run in: one, unless a decoder-only model's padding could be misread or could
    outgrow its positions. Its padding is each row's trailing run of the pad token beyond the shortest such run
    (models/nn/decoder_only.py ``prompt_tokens``), so a shorter prompt that ends in the pad token runs with prompts
    of its own length only; and so does a batch whose longest prompt and longest output would pass a learned
    position table's rows (its step bounds the batch's padded width, not each row's own positions)."""
    if not indices or decoders[indices[0]].prompt is None:
        return [indices] if indices else []
    lengths = {index: len(decoders[index].prompt) for index in indices}
    longest = max(lengths.values())
    pad = model.config.pad_id
    misread = any(lengths[index] < longest and len(decoders[index].prompt) > 1 and decoders[index].prompt[-2] == pad
                  for index in indices)
    learned = getattr(model.config, "positions", None) == "learned"  # a table: the step checks the batch's width
    outgrown = learned and longest - 1 + max(decoders[index].max_len for index in indices) > model.config.max_len
    if not (misread or outgrown):
        return [indices]
    by_length: dict[int, list[int]] = {}
    for index in indices:
        by_length.setdefault(lengths[index], []).append(index)
    return list(by_length.values())


class _Batch:
    """One batch's run: the sentences' decoders (``decoders``, in row order), the rows still decoding."""

    def __init__(self, model: Seq2Seq, decoders: list[_Decoder], search: Search, *, mode: Mode):
        self.model, self.decoders, self.search = model, decoders, search
        self.beam = search.beam if mode == Mode.BEAM else None
        self.lead = decoders[0]  # the rules every sentence shares (the model's, the capture's)
        # a decoder-only model's beam keeps a list of finished hypotheses (models/inference/finished_beams.py)
        self.listed = self.beam is not None and self.lead.prompt is not None
        self.norms: Tensor | None = None  # the listed rows' ranking scores
        self.generated: dict[int, np.ndarray] = {}  # per sentence, each of its rows' generated length (host)
        self.lengths = [decoder.src.shape[1] for decoder in decoders]  # each source's length (a prompt's: P - 1)
        self.longest = max(self.lengths)
        self.steps: list[list[DecodeStep]] = [[] for _ in decoders]

    def run(self) -> list[list[DecodeResult]]:
        lead, device = self.lead, self.lead.src.device
        src = torch.full((len(self.decoders), self.longest), lead.pad, dtype=torch.long, device=device)
        for row, decoder in enumerate(self.decoders):
            src[row, : self.lengths[row]] = decoder.src[0]
        with torch.inference_mode(), keeping_attention(lead.dtype):
            state, started = self.model.start(src, need_weights=lead.need_weights, ablation=lead.ablation)
        state.limit_caches((self.longest if lead.prompt is not None else 0)
                           + max(decoder.max_len for decoder in self.decoders))
        for row, decoder in enumerate(self.decoders):
            decoder.began(_one_of(started, row, self.lengths[row], longest=self.longest))
            decoder.keep_rows(2 * self.beam if self.listed else self.beam)
        del started
        tokens = torch.tensor([decoder.start for decoder in self.decoders], dtype=torch.long, device=device)
        scores = torch.zeros(len(self.decoders), dtype=torch.float64, device=device)
        finished = torch.zeros(len(self.decoders), dtype=torch.bool, device=device)
        if self.listed:
            self.norms = torch.full((len(self.decoders),), float("-inf"), dtype=torch.float64, device=device)
        self.generated = {sentence: np.zeros(1, dtype=np.int64) for sentence in range(len(self.decoders))}
        live, width, index = list(range(len(self.decoders))), 1, 0
        first_ids = torch.tensor(list(self.search.first), dtype=torch.long, device=device)
        while live:
            with torch.inference_mode(), keeping_attention(lead.dtype):
                output = self.model.step(tokens, state, need_weights=lead.need_weights)
                log_probs, broken = without_nan(lead.log_probs(output.logits))
                chosen = self._choose(index, log_probs, scores=scores, finished=finished, live=live, width=width,
                                      first_ids=first_ids)
                parents, tokens, scores, finished, frozen, new_width = chosen
                kept, passing = lead.on_device(log_probs, parents=parents, tokens=tokens, scores=scores,
                                               finished=finished, attention=output.attention, masks=output.masks,
                                               frozen=frozen)
            host, rows = lead.transfer({**kept, "broken": broken}, passing)  # the step's one read of the device
            still = [position for position, sentence in enumerate(live)
                     if not self._stepped(index, sentence, host, rows=rows, attention=output.attention,
                                          fed=slice(position * width, (position + 1) * width),
                                          new=slice(position * new_width, (position + 1) * new_width))]
            if not still:
                break
            rows_kept = np.concatenate([np.arange(position * new_width, (position + 1) * new_width)
                                        for position in still])
            global_parents = host["parents"][rows_kept]
            same_rows = len(still) == len(live) and new_width == width
            if not (same_rows and np.array_equal(global_parents, np.arange(len(global_parents)))):
                keep = torch.from_numpy(rows_kept).to(device)
                with torch.inference_mode():  # the state's buffers were made inside it, and are written into
                    state = state.reorder(parents.index_select(0, keep), one_source=same_rows)
                tokens, scores, finished = tokens[keep], scores[keep], finished[keep]
                self.norms = self.norms[keep] if self.listed else None
            live, width, index = [live[position] for position in still], new_width, index + 1
        length_penalty = self.search.length_penalty if self.beam else 0.0
        if self.listed:  # the finished list, best first
            return [decoder.results(steps, length_penalty, rows=np.flatnonzero(steps[-1].finished).tolist())
                    for decoder, steps in zip(self.decoders, self.steps)]
        return [decoder.results(steps, length_penalty) for decoder, steps in zip(self.decoders, self.steps)]

    def _choose(self, index: int, log_probs: Tensor, *, scores: Tensor, finished: Tensor, live: list[int],
                width: int, first_ids: Tensor):
        """The next rows on the device: parents (rows of this step), tokens, summed log-probabilities, finished
        flags, the rows carrying a finished hypothesis on (None for greedy decoding) and how many rows each
        sentence now has."""
        lead, first = self.lead, self.search.first
        if self.beam is None:
            if index < len(first):
                tokens = first_ids[index: index + 1].expand(len(live))
            else:
                tokens = lead.searchable(index, log_probs).argmax(dim=-1)
            scores = scores + log_probs.gather(1, tokens[:, None])[:, 0]
            parents = torch.arange(len(live), device=tokens.device)
            return parents, tokens, scores, lead.ended(tokens), None, 1
        if self.listed:
            return self._listed(index, log_probs, scores=scores, finished=finished, live=live, first_ids=first_ids)
        extend = any(self.steps[sentence] and self.steps[sentence][-1].finished.any() for sentence in live)
        candidates = beam_candidates(lead, index, log_probs, scores=scores, finished=finished, first=first,
                                     extend=extend)
        vocab = candidates.shape[1]
        best = candidates.view(len(live), width * vocab).topk(min(self.beam, width * vocab), dim=1)
        new_width = best.values.shape[1]
        base = torch.arange(len(live), device=candidates.device)[:, None] * width
        parents = (best.indices // vocab + base).view(-1)
        tokens = (best.indices % vocab).view(-1)
        frozen = finished.index_select(0, parents)
        return parents, tokens, best.values.reshape(-1), frozen | lead.ended(tokens), frozen, new_width

    def _listed(self, index: int, log_probs: Tensor, *, scores: Tensor, finished: Tensor, live: list[int],
                first_ids: Tensor):
        """A decoder-only model's beam step (models/inference/finished_beams.py), every sentence's at once."""
        first, lead = self.search.first, self.lead
        searched = log_probs  # the steps keep the model's own scores
        if index < len(first):  # only the token every hypothesis starts with
            searched = torch.full_like(log_probs, float("-inf")).index_copy(
                1, first_ids[index: index + 1], log_probs[:, first[index]: first[index] + 1])
        last = torch.tensor([index == self.decoders[sentence].max_len - 1 for sentence in live], device=scores.device)
        parents, tokens, scores, finished, self.norms, frozen = choose_listed(
            lead, index, searched, scores=scores, finished=finished, norms=self.norms, beam=self.beam,
            keep=max(2, 1 + len(lead.ends)) * self.beam, last=last, length_penalty=self.search.length_penalty,
            sentences=len(live))
        return parents, tokens, scores, finished, frozen, len(parents) // len(live)

    def _stepped(self, index: int, sentence: int, host: dict, *, rows: dict, attention: dict, fed: slice,
                 new: slice) -> bool:
        """Give ``sentence`` its step from its rows of the step's host copy (``new``: its new hypotheses, ``fed``:
        the rows it fed); returns whether it has ended."""
        decoder = self.decoders[sentence]
        own = {name: array[new] for name, array in host.items() if name != "broken"}
        steps = self.steps[sentence]
        # a row the sentence's last step dropped (not finite) is never a parent of a finite row; of a row scored -inf
        # (every choice was NaN), its parent is the last row kept, as its run alone keeps one
        own["parents"] = np.minimum(own["parents"] - fed.start, steps[-1].beam_size - 1 if steps else 0)
        own["broken"] = host["broken"][fed]
        own_rows = {key: _unpadded(key[1], array[fed], self.lengths[sentence], longest=self.longest,
                                   prompted=decoder.prompt is not None) for key, array in rows.items()}
        steps.append(decoder.from_host(index, own, own_rows, attention=attention))
        if self.beam is not None and decoder.need_weights:
            decoder.let_go(steps)
        if self.listed:
            step, lengths = steps[-1], self.generated[sentence]
            self.generated[sentence] = lengths = np.where(_was_finished(steps), lengths[np.minimum(
                step.parents, len(lengths) - 1)], index + 1)
            return index + 1 >= decoder.max_len or _cannot_improve(
                step, lengths, beam=self.beam, generated=index + 1, length_penalty=self.search.length_penalty)
        return bool(steps[-1].finished.all()) or index + 1 >= decoder.max_len


def _one_of(started: Intermediates, row: int, length: int, *, longest: int) -> Intermediates:
    """Row ``row`` of the batch's start, cut to its source's ``length`` positions (of ``longest``)."""

    def cut(tensor: Tensor) -> Tensor:
        tensor = tensor[row: row + 1, ..., :length]
        return tensor[..., :length, :] if tensor.dim() >= 2 and tensor.shape[-2] == longest else tensor

    return Intermediates({kind: [cut(layer) for layer in layers] for kind, layers in started.attention.items()},
                         {kind: None if mask is None else cut(mask) for kind, mask in started.masks.items()})


def _unpadded(kind: str, rows: np.ndarray, length: int, *, longest: int, prompted: bool) -> np.ndarray:
    """A sentence's attention or mask rows (keys last) over its own keys: ``cross`` its source's ``length``; a
    decoder-only model's ``dec_self`` its prompt's, then those fed since (the padding between them left out)."""
    if kind == "cross":
        return rows[..., :length]
    if kind == "dec_self" and prompted and length < longest:
        return np.concatenate([rows[..., :length], rows[..., longest:]], axis=-1)
    return rows
