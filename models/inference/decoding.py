"""Greedy, beam and forced decoding as generators of ``DecodeStep``; each returns its final results.

    steps = greedy(model, src_ids, Capture(label=tokenizer.token))
    for step in steps: ...               # a GUI shows each step as it is produced
    results = finish(steps)              # or: steps, results = run(greedy(...))

What a run records (labels, top-k, weights, cache, length limit, number type, ablation) is one frozen
``Capture``; how it searches is each function's own keywords; ``DECODERS`` maps each mode
(models/inference/modes.py) to its function, called alike with a ``Search``.

A generator's return value (``StopIteration.value``) is the list of ``DecodeResult`` (best first), each
with its own ``AttentionTrace`` assembled from the steps through the beam parents (``TraceAssembly``,
models/inference/traces.py). Stopping iteration early is how a caller aborts. Incremental decoding uses the
models' key/value caches; ``use_cache=False`` recomputes the whole prefix at every step (the reference the cache
is tested and benchmarked against).

Forced decoding knows every decoder input in advance, so it runs one teacher-forced forward pass and
derives its steps from that pass; ``forced_step_by_step`` feeds the target one token at a time through
the same loop as greedy decoding (the reference the one pass is tested against). A step's attention
rows are views into its result's trace, so each attention matrix is held once (a beam search's steps hold
the rows its hypotheses still differ in; see ``BeamRows`` in models/nn/intermediates.py). ``dtype`` is the
trace's number type (float32, or float16 where memory matters more than the last digits).

A step reads the device once: what the host needs of it (its choices, scores, flags, mask and attention rows)
comes in one transfer (``HostTransfer``, models/inference/transfer.py), and every decision is taken on that
copy, so a GPU never waits for its queued kernels more than once a step (``make_step``: ``on_device``, the
transfer, ``from_host``). A corpus runs the same decoders side by side in batches (models/inference/batched.py).
"""

from __future__ import annotations

import dataclasses
import functools
import warnings
from dataclasses import dataclass
from typing import Callable, Generator, Sequence

import numpy as np
import torch
from torch import Tensor

from ..nn.ablation import NO_ABLATION, Ablation
from ..nn.base import Seq2Seq
from ..errors import EmptyInputError, InputError, NumericalWarning
from ..nn.intermediates import BeamRows, Intermediates, RowBuffer, keeping_attention
from ..trace.records import DecodeResult, DecodeStep
from .choices import Choices, without_nan
from .finished_beams import finished_list_beam_search
from .modes import Mode, check_beam
from .prompts import continuation_room, end_ids, generated_length_score, prompted, split_prompt
from .traces import TraceAssembly
from .transfer import HostTransfer

TRACE_DTYPES = {np.dtype(np.float16): torch.float16, np.dtype(np.float64): torch.float64}  # else float32
Label = Callable[[int], str]
Steps = Generator[DecodeStep, None, list[DecodeResult]]
NextToken = Callable[[int, Tensor], Tensor]  # (step index, log-probabilities [1, V]) -> the token fed next [1]


@dataclass(frozen=True)
class Capture:
    """What one decoding run records and how, whatever its mode: the labels of the output tokens (``label``) and
    of the source positions (``source_tokens``; None: each id through ``label``), the ``top_k`` alternatives each
    step reports, whether attention is kept (``need_weights``), the key/value cache (``use_cache=False``
    recomputes the whole prefix each step: the reference the cache is tested against), the output's length limit
    (``max_len``; None: the model's, a decoder-only model's room after the prompt), the trace's number type
    (``dtype``) and the heads switched off."""

    label: Label = str
    source_tokens: Sequence[str] | None = None
    top_k: int = 10
    need_weights: bool = True
    use_cache: bool = True
    max_len: int | None = None
    dtype: type = np.float32
    ablation: Ablation = NO_ABLATION


@dataclass(frozen=True)
class Search:
    """How a run of any mode searches: the ``beam`` width and ``length_penalty`` (beam search), the tokens every
    output starts with (``first``: a target language's code) and forced decoding's ``target`` (without the end
    token)."""

    beam: int = 4
    length_penalty: float = 0.6
    first: Sequence[int] = ()
    target: Sequence[int] | None = None


def run(steps: Steps) -> tuple[list[DecodeStep], list[DecodeResult]]:
    """Drive a decoding generator to the end; returns every step and the final results."""
    collected = []
    while True:
        try:
            collected.append(next(steps))
        except StopIteration as stop:
            return collected, stop.value


def finish(steps: Steps) -> list[DecodeResult]:
    return run(steps)[1]


class _Decoder:
    """One decoding run: feeds the model (cached, or recomputing the prefix), takes each step's one transfer to
    the host, keeps the attention rows and ranks the final hypotheses; its ``choices`` describe each step's
    choices and its ``traces`` assemble each result's trace."""

    def __init__(self, model: Seq2Seq, src_ids: Sequence[int], capture: Capture):
        """``src_ids``: the source, or a decoder-only model's whole prompt (models/inference/prompts.py): the model's
        ``start`` prefills it but its last token, fed first in the start token's role, and the output is bounded by
        the room the context leaves after it."""
        config = model.config
        self.prompt = list(src_ids) if prompted(config) else None
        if self.prompt is not None:
            room = continuation_room(config, len(self.prompt))
            src_ids, self.start = split_prompt(self.prompt)
        elif len(src_ids) == 0:
            raise InputError("the source has no tokens")
        else:
            room, self.start = config.max_len, config.bos_id
        ablation = capture.ablation
        self.ablation = ablation.validate(model.attention_shape()) if ablation else NO_ABLATION
        ablated = self.ablation.heads(model.attention_shape()) if ablation else ()
        self.model, self.label, self.dtype = model, capture.label, capture.dtype
        self.choices = Choices(capture.label, capture.top_k)
        self.need_weights, self.use_cache = capture.need_weights, capture.use_cache
        self.room = room  # the most tokens an output may have
        self.max_len = min(capture.max_len or room, room)
        self.key_offset = len(src_ids) if self.prompt is not None else 0  # dec_self keys before step 0's
        device = next(model.parameters()).device
        self.src = torch.tensor([list(src_ids)], dtype=torch.long, device=device)  # [1, S]
        self.bos, self.eos, self.pad = config.bos_id, config.eos_id, config.pad_id
        self.ends = end_ids(config)
        self.end_tensor = torch.tensor(self.ends, dtype=torch.long, device=device)
        self.suppress_bos = config.suppress_bos and self.bos != self.eos
        self.min_output_len = config.min_output_len
        labelled = self.prompt if self.prompt is not None else src_ids
        src_tokens = list(capture.source_tokens) if capture.source_tokens is not None else [
            capture.label(int(i)) for i in labelled]
        if len(src_tokens) != len(labelled):
            raise ValueError(f"{len(src_tokens)} source labels for {len(labelled)} source tokens")
        self.traces = TraceAssembly(src_tokens, capture.label, dtype=capture.dtype, ablated=ablated,
                                    prompt_len=len(self.prompt) if self.prompt is not None else None)
        self.state = None
        self.prefix: Tensor | None = None  # [K, t] fed tokens; kept only for use_cache=False
        self.rows: RowBuffer | None = None  # where a run without a beam writes its attention rows
        self.beam_rows: BeamRows | None = None  # where a beam search writes its attention rows
        self.live: dict[int, int] = {}  # per unsettled beam step: how many of its rows a hypothesis still descends from
        self._open = np.ones((0, 0), dtype=bool)  # see _shared_if_open
        self.transfer = HostTransfer()  # a step's one copy to the host
        self.weights_dtype = TRACE_DTYPES.get(np.dtype(self.dtype), torch.float32)  # the rows' type on the way over
        self.reported = False  # whether the run has warned of NaN

    def begin(self) -> None:
        with torch.inference_mode(), keeping_attention(self.dtype):
            self.state, started = self.model.start(self.src, need_weights=self.need_weights, ablation=self.ablation)
        self.state.limit_caches(self.key_offset + self.max_len)
        self.began(started)
        self.prefix = torch.full((1, 0), self.start, dtype=torch.long, device=self.src.device)

    def began(self, started: Intermediates) -> None:
        """Take what the model's ``start`` computed of this run's source (its attention, its masks)."""
        self.traces.begin(started, self.traces.src_tokens[:-1] if self.prompt is not None else ())

    def keep_rows(self, beam: int | None = None) -> None:
        """Where the steps' attention rows are written, when the run keeps them: one line of rows, or a beam's
        ``beam`` rows a step."""
        if not self.need_weights:
            return
        if beam is None:
            self.rows = RowBuffer(self.max_len, self.dtype, key_offset=self.key_offset, first=self.traces.first)
            return
        self.beam_rows = BeamRows(self.max_len, beam, self.dtype, key_offset=self.key_offset)
        self.traces.settled = self.beam_rows.shared

    def step(self, tokens: Tensor) -> tuple[Tensor, dict[str, list[Tensor]], dict[str, Tensor]]:
        """Feed ``tokens`` ``[K]``; returns log-probabilities ``[K, V]``, attention rows and mask rows."""
        with torch.inference_mode(), keeping_attention(self.dtype):
            if self.use_cache:
                output = self.model.step(tokens, self.state, need_weights=self.need_weights)
                logits, attention, masks = output.logits, output.attention, output.masks
            else:
                self.prefix = torch.cat([self.prefix, tokens[:, None]], dim=1)
                logits, attention, masks = self._recompute()
            return self.log_probs(logits), attention, masks

    def log_probs(self, logits: Tensor) -> Tensor:
        """Next-token log-probabilities ``[..., V]`` of ``logits``."""
        log_probs = torch.log_softmax(logits.float(), dim=-1)
        if self.pad != self.eos and self.prompt is None:  # a decoder-only model's outputs are never padding
            # Padding is never an output (fairseq does the same): a teacher-forced forward masks pad
            # keys, so a decoded pad would make the cached trace disagree with the full forward's.
            log_probs[..., self.pad] = float("-inf")
        if self.suppress_bos:  # the start token is never an output (JoeyNMT's search)
            log_probs[..., self.bos] = float("-inf")
        return log_probs

    def searchable(self, index: int, log_probs: Tensor) -> Tensor:
        """What a search may choose from at step ``index``: the end tokens not before ``min_output_len`` tokens
        (the toolkit's own search never ends a hypothesis earlier). The steps keep the model's own scores."""
        if index >= self.min_output_len:
            return log_probs
        log_probs = log_probs.clone()
        log_probs[..., self.end_tensor] = float("-inf")
        return log_probs

    def ended(self, tokens: Tensor) -> Tensor:
        """Which of ``tokens`` end their output (the end token, or another the model lists), on the device."""
        return tokens == self.eos if len(self.ends) == 1 else torch.isin(tokens, self.end_tensor)

    def _end_of(self, ids: list[int]) -> int:
        """How many of ``ids`` an output keeps: through its first end token."""
        return next((index + 1 for index, token in enumerate(ids) if token in self.ends), len(ids))

    def _recompute(self):
        src = self.src.expand(self.prefix.shape[0], -1)
        logits, inter = self.model(src, self.prefix, need_weights=self.need_weights, ablation=self.ablation)
        attention = {kind: [w[:, :, -1] for w in layers] for kind, layers in inter.attention.items()}
        masks = {}
        for kind, mask in inter.masks.items():
            if kind != "enc_self" and mask is not None:
                masks[kind] = mask[:, 0, -1].expand(self.prefix.shape[0], -1)
        return logits[:, -1], attention, masks

    def reorder(self, parents: Tensor, host_parents: np.ndarray) -> None:
        """Row i of the next step continues row ``parents[i]`` (``host_parents``: the same on the host, which
        decides); rows that stay where they are copy nothing (a beam keeps its order at about half the steps,
        and a reorder copies every cached key and value)."""
        rows = self.state.memory.shape[0] if self.use_cache else self.prefix.shape[0]
        if rows == len(host_parents) and np.array_equal(host_parents, np.arange(rows)):
            return
        if self.use_cache:
            with torch.inference_mode():  # the buffers were made inside it, and are written into
                self.state = self.state.reorder(parents, one_source=True)
        else:
            self.prefix = self.prefix.index_select(0, parents)

    def make_step(self, index: int, log_probs: Tensor, *, parents: Tensor, tokens: Tensor, scores: Tensor,
                  finished: Tensor, attention: dict[str, list[Tensor]], masks: dict[str, Tensor], broken: Tensor,
                  frozen: Tensor | None = None) -> DecodeStep:
        """Describe the new hypotheses (``parents`` index the rows of ``log_probs``/``attention``);
        ``frozen`` marks rows whose parent had already finished (their padding step costs nothing), ``broken``
        the rows of ``log_probs`` that held NaN.

        Everything the host needs of the step comes in one transfer; hypotheses whose score is not finite (a
        beam wider than what could be chosen) are dropped here, so the step may have fewer rows than given."""
        kept, passing = self.on_device(log_probs, parents=parents, tokens=tokens, scores=scores, finished=finished,
                                       attention=attention, masks=masks, frozen=frozen)
        host, rows = self.transfer({**kept, "broken": broken}, passing)
        return self.from_host(index, host, rows, attention=attention)

    def on_device(self, log_probs: Tensor, *, parents: Tensor, tokens: Tensor, scores: Tensor, finished: Tensor,
                  attention: dict[str, list[Tensor]], masks: dict[str, Tensor],
                  frozen: Tensor | None = None) -> tuple[dict[str, Tensor], dict]:
        """What the host needs of a step, on the device: per new hypothesis its choices, parent, score and flag
        (kept), and per fed row its mask and, where the run keeps them, its attention rows (passing)."""
        # a run without a beam (frozen None) continues each fed row in place: its rows need no copy
        rows = log_probs if frozen is None else log_probs.index_select(0, parents)
        kept = {**self.choices.on_device(rows, tokens, frozen), "parents": parents,
                "scores": scores.double(), "finished": finished}
        passing = {("mask", kind): mask for kind, mask in masks.items()}
        if self.rows is not None or self.beam_rows is not None:
            passing.update({("attention", kind, layer): weights.to(self.weights_dtype)
                            for kind, layers in attention.items() for layer, weights in enumerate(layers)})
        return kept, passing

    def from_host(self, index: int, host: dict[str, np.ndarray], rows: dict, *,
                  attention: dict[str, list]) -> DecodeStep:
        """The step from its host copy: ``host`` the kept arrays and ``broken`` (which fed rows held NaN), ``rows``
        the fed rows' masks and attention over this run's own keys; ``attention`` names the kinds and layers."""
        if host.pop("broken").any() and not self.reported:
            self.reported = _report_not_finite(index, _attention_rows(rows, attention))
        finite = max(1, int(np.isfinite(host["scores"]).sum()))
        host = {name: array[:finite] for name, array in host.items()}
        parents_host = host["parents"]
        if self.rows is not None:
            attention_rows = self.rows.add(index, _attention_rows(rows, attention))
        elif self.beam_rows is not None:
            attention_rows = self.beam_rows.add(index, _attention_rows(rows, attention), parents_host)
        else:  # nothing asked for the weights
            attention_rows = {}
        mask_rows = {key[1]: self._shared_if_open(rows[key][parents_host]) for key in rows if key[0] == "mask"}
        first = index == 0 and attention_rows and self.traces.first  # a prefilled prompt's rows, once
        return DecodeStep(step=index, **self.choices.labelled(host), parents=parents_host, scores=host["scores"],
                          finished=host["finished"], attention=attention_rows, masks=mask_rows,
                          first_rows=self.traces.first if first else None,
                          first_masks=self.traces.first_masks if first else None)

    def _shared_if_open(self, rows: np.ndarray) -> np.ndarray:
        """Mask rows that allow every key (nearly always: one sentence has no padding) as a view of one
        read-only all-True array. Each step's own small mask arrays live as long as the run; scattered among
        the step's freed temporaries they kept a long beam search's heap from being reused (hundreds of MB)."""
        if not rows.all():
            return rows
        shape = self._open.shape
        if rows.shape[0] > shape[0] or rows.shape[1] > shape[1]:
            self._open = np.ones((max(rows.shape[0], shape[0]), max(rows.shape[1], shape[1], self.max_len)), bool)
            self._open.setflags(write=False)
        return self._open[: rows.shape[0], : rows.shape[1]]

    def results(self, steps: list[DecodeStep], length_penalty: float = 0.0,
                rows: Sequence[int] | None = None) -> list[DecodeResult]:
        """The hypotheses of the last step (its ``rows``; None: all), best first. The best one's trace is built now,
        in the arrays its rows were written to as it ran; the others' are stacked from the steps' rows when first
        asked for."""
        if not steps:
            return []
        rows = range(steps[-1].beam_size) if rows is None else rows
        hypotheses = [self._result(steps, index, length_penalty) for index in rows]
        hypotheses.sort(key=lambda result: -result.score)
        best = hypotheses[0]
        if self.need_weights:
            best.trace = self.traces.of_path(list(zip(best.steps, best.rows)), best.token_ids, self.start,
                                             written=self._written(best))
        self.state = self.prefix = self.transfer = None  # the other hypotheses' traces keep only the assembly
        return hypotheses

    def _written(self, result: DecodeResult) -> dict[str, list[np.ndarray]]:
        """``result``'s rows as ``[heads, T, key_len]`` arrays with no second copy: the row buffer of a run
        without a beam, or a beam's shared prefix completed by the result's own rows after it."""
        if self.rows is not None:
            return self.rows.finish(len(result.steps), result.steps)
        if self.beam_rows is None:
            return {}
        shared = self.beam_rows.shared
        for step, row in zip(result.steps, result.rows):
            if step.kept is None:  # after the prefix every hypothesis shares
                shared.write(step.step, {kind: [step.attention_row(kind, layer, row) for layer in range(len(layers))]
                                         for kind, layers in step.attention.items()})
        return shared.finish(len(result.steps), [step for step in result.steps if step.kept is not None])

    def let_go(self, steps: list[DecodeStep]) -> None:
        """Settle the earlier beam steps that every hypothesis of the newest step descends from through one
        row: that row moves into the shared prefix, the step's other rows are let go (``DecodeStep.kept``).

        Walks back from the newest step and stops where the number of rows still descended from stays the
        same (the steps further back follow from it), so a step's cost does not grow with the history.
        """
        live = np.unique(steps[-1].parents)
        settled = None
        for step in reversed(steps[:-1]):
            if step.kept is not None or self.live.get(step.step) == len(live):
                break
            if len(live) == 1:
                step.attention = self.beam_rows.settle(step.step, int(live[0]), step.attention)
                step.kept = live
                self.live.pop(step.step, None)
                settled = step.step if settled is None else settled
            else:
                self.live[step.step] = len(live)
            live = np.unique(step.parents[live])
        if settled is not None:
            self.beam_rows.release_through(settled)

    def _result(self, steps: list[DecodeStep], index: int, length_penalty: float) -> DecodeResult:
        path = []  # (step, row) from the first step to the last, following parents backwards
        for step in reversed(steps):
            path.append((step, index))
            index = int(step.parents[index])
        path.reverse()
        ids = [int(step.token_ids[row]) for step, row in path]
        length = self._end_of(ids)
        path, ids = path[:length], ids[:length]
        log_prob = float(path[-1][0].scores[path[-1][1]])
        if self.prompt is not None:
            score = generated_length_score(log_prob, length, length_penalty)
        else:
            score = log_prob / (((5.0 + length) / 6.0) ** length_penalty) if length_penalty else log_prob
        # built when asked for
        trace = functools.partial(self.traces.of_path, path, ids, self.start) if self.need_weights else None
        return DecodeResult(token_ids=ids, tokens=[self.label(i) for i in ids], text="", log_prob=log_prob,
                            score=score, trace=trace, steps=[step for step, _ in path], rows=[row for _, row in path],
                            prompt_ids=self.prompt)

    def forced_result(self, target: list[int], logits: Tensor,
                      inter: Intermediates) -> tuple[list[DecodeStep], DecodeResult]:
        """The steps and result of a teacher-forced pass (``logits`` ``[T, V]``) that fed ``target`` shifted
        right; its trace is the pass' own attention, and each step's rows are views into it."""
        tokens = torch.tensor(target, device=logits.device)
        log_probs, broken = without_nan(self.log_probs(logits))
        scores = log_probs.gather(1, tokens[:, None])[:, 0].double().cumsum(0)
        host, _ = self.transfer({**self.choices.on_device(log_probs, tokens), "scores": scores, "broken": broken}, {})
        choices, scores = self.choices.labelled(host), host["scores"]
        tgt_tokens = [self.label(self.start)] + choices["tokens"][:-1]
        trace = self.traces.of_pass(inter, tgt_tokens) if self.need_weights else None
        if host["broken"].any():
            _report_not_finite(int(np.argmax(host["broken"])), trace.attention if trace is not None else {})
        steps = []
        offset = self.key_offset  # a prompt's rows come first in its trace
        for index in range(len(target)):
            one = {key: value[index: index + 1] for key, value in choices.items()}
            attention, masks = {}, {}
            for kind in ("dec_self", "cross") if trace is not None else ():
                if kind in trace.attention:
                    key_len = offset + index + 1 if kind == "dec_self" else len(self.traces.src_tokens)
                    attention[kind] = [layer[None, :, offset + index, :key_len] for layer in trace.attention[kind]]
                    masks[kind] = trace.masks[kind][offset + index: offset + index + 1, :key_len]
            steps.append(DecodeStep(step=index, **one, parents=np.zeros(1, dtype=np.int64),
                                    scores=scores[index: index + 1], finished=np.isin(one["token_ids"], self.ends),
                                    attention=attention, masks=masks))
        result = DecodeResult(token_ids=list(target), tokens=list(choices["tokens"]), text="",
                              log_prob=float(scores[-1]), score=float(scores[-1]), trace=trace, steps=steps,
                              rows=[0] * len(steps), prompt_ids=self.prompt)
        return steps, result


def greedy(model: Seq2Seq, src_ids: Sequence[int], capture: Capture = Capture(), *,
           first: Sequence[int] = ()) -> Steps:
    """Take the most likely token at every step until the end token or ``capture.max_len`` tokens; the first
    steps take ``first`` instead (a target language's code), reporting what the model gave them."""
    decoder = _Decoder(model, src_ids, capture)
    first_ids = torch.tensor(list(first), dtype=torch.long, device=decoder.src.device)  # copied to the device once

    def next_token(index: int, log_probs: Tensor) -> Tensor:
        if index < len(first):
            return first_ids[index: index + 1]
        return decoder.searchable(index, log_probs).argmax(dim=-1)

    steps = yield from _one_by_one(decoder, next_token)
    return decoder.results(steps)


def forced(model: Seq2Seq, src_ids: Sequence[int], target_ids: Sequence[int], capture: Capture = Capture()) -> Steps:
    """Feed the user's target (the end token is appended) and report each token's probability and rank.

    One teacher-forced forward pass computes every step (a recurrent decoder still runs its cell once
    per token inside that pass, but nothing is searched); ``capture.use_cache`` and ``max_len`` do not apply.
    """
    target = list(target_ids) + [model.config.eos_id]
    decoder = _Decoder(model, src_ids, dataclasses.replace(capture, use_cache=True, max_len=len(target)))
    _check_target(decoder, target)
    tgt_in = torch.tensor([[decoder.start] + target[:-1]], dtype=torch.long, device=decoder.src.device)
    with torch.inference_mode(), keeping_attention(decoder.dtype):
        logits, inter = model(decoder.src, tgt_in, need_weights=decoder.need_weights, ablation=decoder.ablation)
    steps, result = decoder.forced_result(target, logits[0], inter)
    del inter, logits  # the trace now owns the attention the pass computed
    yield from steps
    return [result]


def forced_step_by_step(model: Seq2Seq, src_ids: Sequence[int], target_ids: Sequence[int],
                        capture: Capture = Capture()) -> Steps:
    """Forced decoding through the incremental loop greedy decoding uses; :func:`forced` must equal it."""
    target = list(target_ids) + [model.config.eos_id]
    decoder = _Decoder(model, src_ids, dataclasses.replace(capture, max_len=len(target)))
    _check_target(decoder, target)
    fed = torch.tensor(target, dtype=torch.long, device=decoder.src.device)  # copied to the device once
    steps = yield from _one_by_one(decoder, lambda index, log_probs: fed[index: index + 1])
    return decoder.results(steps)


def greedy_rows(model: Seq2Seq, src_ids: Sequence[int], state, *, max_len: int,
                first: Sequence[int] = ()) -> list[list[int]]:
    """Greedy decoding of every row of a ``DecoderState`` at once (``state``: rows that each read their own memory of
    the source ``src_ids``, as DecoderLens' encoder layers do), by :func:`greedy`'s rules (the ``first`` tokens,
    padding and the start token never chosen, no end before the model's least length, its end tokens), up to
    ``max_len`` tokens; nothing is traced. Returns each row's output ids through its end token."""
    decoder = _Decoder(model, src_ids, Capture(need_weights=False, max_len=max_len))
    decoder.state = state
    tokens = torch.full((state.memory.shape[0],), decoder.start, dtype=torch.long, device=state.memory.device)
    done = torch.zeros_like(tokens, dtype=torch.bool)
    chosen = []
    for index in range(decoder.max_len):
        log_probs, _, _ = decoder.step(tokens)
        log_probs, _ = without_nan(log_probs)
        tokens = torch.full_like(tokens, first[index]) if index < len(first) else \
            decoder.searchable(index, log_probs).argmax(dim=-1)
        chosen.append(tokens)
        done = done | decoder.ended(tokens)
        if bool(done.all()):
            break
    rows = torch.stack(chosen, dim=1).tolist() if chosen else [[] for _ in range(len(tokens))]
    return [row[:decoder._end_of(row)] for row in rows]


def _check_target(decoder: _Decoder, target: list[int]) -> None:
    """One line when ``target`` (its end token included) is longer than an output may be."""
    if len(target) > decoder.room:
        after = " after this prompt" if decoder.prompt is not None else ""
        raise InputError(f"the target has {len(target)} tokens; this model takes at most {decoder.room}{after}")


def _one_by_one(decoder: _Decoder, next_token: NextToken) -> Generator[DecodeStep, None, list[DecodeStep]]:
    """One hypothesis, one step per token: ``next_token`` picks what is fed next, until the end token or
    ``decoder.max_len`` steps. Returns the steps. The host reads the device once per step (``make_step``)."""
    decoder.begin()
    decoder.keep_rows()
    device = decoder.src.device
    tokens = torch.tensor([decoder.start], device=device)
    score = torch.zeros(1, dtype=torch.float64, device=device)
    zero = torch.zeros(1, dtype=torch.long, device=device)
    steps = []
    for index in range(decoder.max_len):
        log_probs, attention, masks = decoder.step(tokens)
        log_probs, broken = without_nan(log_probs)
        tokens = next_token(index, log_probs)  # [1]
        score = score + log_probs[0, tokens]
        steps.append(decoder.make_step(index, log_probs, parents=zero, tokens=tokens, scores=score,
                                       finished=decoder.ended(tokens), attention=attention, masks=masks,
                                       broken=broken))
        yield steps[-1]
        if steps[-1].finished[0]:
            break
    return steps


def beam_search(model: Seq2Seq, src_ids: Sequence[int], capture: Capture = Capture(), *, beam: int = 4,
                length_penalty: float = 0.6, first: Sequence[int] = ()) -> Steps:
    """Keep the ``beam`` best partial hypotheses by summed log-probability; every hypothesis starts with
    ``first`` (a target language's code).

    A hypothesis that produced the end token stays in the beam unchanged (it is extended by padding at
    no cost) so every step has the same rows; the search ends when all rows are finished. Final
    hypotheses are ranked by ``log_prob / ((5 + length) / 6) ** length_penalty``.

    A decoder-only model's beam is searched as transformers' ``generate(num_beams=K)`` searches it, which its users
    compare with (models/inference/finished_beams.py).
    """
    check_beam(beam)
    decoder = _Decoder(model, src_ids, capture)
    if decoder.prompt is not None:
        return (yield from finished_list_beam_search(decoder, beam=beam, length_penalty=length_penalty, first=first))
    decoder.begin()
    decoder.keep_rows(beam)
    device = decoder.src.device
    tokens = torch.tensor([decoder.start], device=device)
    scores = torch.zeros(1, dtype=torch.float64, device=device)
    finished = torch.zeros(1, dtype=torch.bool, device=device)
    steps: list[DecodeStep] = []
    for index in range(decoder.max_len):
        log_probs, attention, masks = decoder.step(tokens)  # [k, V]
        log_probs, broken = without_nan(log_probs)
        # whether to extend finished rows by padding is decided on the host copy of the last step
        candidates = beam_candidates(decoder, index, log_probs, scores=scores, finished=finished, first=first,
                                     extend=bool(steps and steps[-1].finished.any()))
        vocab = candidates.shape[1]
        best = candidates.view(-1).topk(min(beam, candidates.numel()))  # make_step drops those not finite
        parents, tokens = best.indices // vocab, best.indices % vocab
        frozen = finished.index_select(0, parents)
        finished = frozen | decoder.ended(tokens)
        steps.append(decoder.make_step(index, log_probs, parents=parents, tokens=tokens, scores=best.values,
                                       finished=finished, attention=attention, masks=masks, broken=broken,
                                       frozen=frozen))
        kept = steps[-1].beam_size
        parents, tokens, scores, finished = parents[:kept], tokens[:kept], best.values[:kept], finished[:kept]
        if decoder.need_weights:
            decoder.let_go(steps)
        yield steps[-1]
        if steps[-1].finished.all():
            break
        decoder.reorder(parents, steps[-1].parents)
    return decoder.results(steps, length_penalty)


def beam_candidates(decoder: _Decoder, index: int, log_probs: Tensor, *, scores: Tensor, finished: Tensor,
                    first: Sequence[int], extend: bool) -> Tensor:
    """Every extension's summed log-probability ``[rows, V]`` (float64) at step ``index``: finished rows (where
    ``extend``, some are) extended by padding alone, at no cost; the first steps only by ``first``'s tokens."""
    candidates = decoder.searchable(index, log_probs)
    if extend:
        candidates = _extend(candidates, finished, decoder.pad)
    candidates = candidates.double() + scores[:, None]
    if index < len(first):
        only = torch.full_like(candidates, float("-inf"))
        only[:, first[index]] = candidates[:, first[index]]
        candidates = only
    return candidates


def _forced_run(model: Seq2Seq, src_ids: Sequence[int], capture: Capture, search: Search) -> Steps:
    if search.target is None:
        raise EmptyInputError("forced decoding needs a target text")
    return forced(model, src_ids, list(search.first) + list(search.target), capture=capture)


Decode = Callable[[Seq2Seq, Sequence[int], Capture, Search], Steps]
DECODERS: dict[Mode, Decode] = {  # every mode's run, called alike (Translator.decode reads this)
    Mode.GREEDY: lambda model, src_ids, capture, search: greedy(model, src_ids, capture, first=search.first),
    Mode.BEAM: lambda model, src_ids, capture, search: beam_search(
        model, src_ids, capture, beam=search.beam, length_penalty=search.length_penalty, first=search.first),
    Mode.FORCED: _forced_run,
}


def _attention_rows(rows: dict, attention: dict[str, list[Tensor]]) -> dict[str, list[np.ndarray]]:
    """The host copies of ``attention``'s rows, from a transfer's ``("attention", kind, layer)`` arrays."""
    return {kind: [rows[("attention", kind, layer)] for layer in range(len(layers))]
            for kind, layers in attention.items() if ("attention", kind, 0) in rows}


def _report_not_finite(index: int, attention: dict[str, list[np.ndarray]]) -> bool:
    """Warn where the model first produced NaN: in an attention layer (host arrays), or else in its scores."""
    where = next((f"layer {layer + 1} {kind} attention" for kind, layers in attention.items()
                  for layer, weights in enumerate(layers) if np.isnan(weights).any()), "its output scores")
    warnings.warn(f"the model produced NaN at step {index + 1}, {where}; such tokens are never chosen and the "
                  f"result may be meaningless", NumericalWarning, stacklevel=2)
    return True


def _extend(log_probs: Tensor, finished: Tensor, pad: int) -> Tensor:
    """Finished rows can only be extended by padding, at no cost; other rows as the model says."""
    extended = log_probs.masked_fill(finished[:, None], float("-inf"))
    extended[:, pad] = log_probs[:, pad].masked_fill(finished, 0.0)
    return extended
