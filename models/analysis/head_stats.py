"""Corpus head statistics: a PAIRS.tsv corpus runs through the model in padded batches, teacher-forced on
the references (and with ``decode`` on the model's own greedy output), one forward with the weights per
batch; the statistics are reduced on the model's device and only ``[batch, layers, heads]`` sums reach the
host. What each statistic means: models/trace/head_summary.py.

Padding never counts: query rows and keys past a sentence's length are left out by lengths, not by token
ids (a start token may share the padding id), so a batch gives the same numbers as its sentences one by one.

A decoder-only model's pair is a prompt and its continuation, run as one sequence (the prompt, then the
continuation; cut to the model's context): its ``dec_self`` rows and keys are the whole sequence, as its trace's.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import torch
from torch import Tensor

from ..nn.base import Seq2Seq
from ..inference.batches import Example, collate, encode_pairs
from ..text.pairs import Pair
from ..inference.corpus import decode_corpus
from ..errors import AttnvizError, InputError
from ..trace.head_summary import DIAGONAL_BAND, HeadStats, KindSums, RunStats, statistics_of
from ..nn.intermediates import Intermediates
from .decoder_only import is_decoder_only
from .encoder_only import is_encoder_only
from .steps import Steps, drive
from ..inference.distributed import ONE_PROCESS, Processes
from ..inference.translator import SourceInput, Translator

Progress = Callable[[int, int], bool]  # (sentences done, sentences in all) → keep going?


class NoAttentionError(AttnvizError):
    """A model without attention has no heads to describe."""


def corpus_head_stats(translator: Translator, pairs: Sequence[Pair], *, batch_size: int = 32,
                      decode: bool = False, progress: Progress | None = None,
                      processes: Processes = ONE_PROCESS) -> HeadStats | None:
    """Statistics of every head over ``pairs`` (None when ``progress`` asked to stop)."""
    return drive(corpus_head_stats_steps(translator, pairs, batch_size=batch_size, decode=decode,
                                         processes=processes), progress)


def corpus_head_stats_steps(translator: Translator, pairs: Sequence[Pair], *, batch_size: int = 32,
                            decode: bool = False, processes: Processes = ONE_PROCESS) -> Steps:
    """Statistics of every head over ``pairs``, yielding ``(sentences done, sentences in all)`` of this process's
    share after each batch (models/analysis/steps.py) and returning the :class:`HeadStats`. Over several
    ``processes`` each runs its share of the sentences (every process encodes them all first, so a bad pair is
    one line on all of them alike) and the per-sentence sums are put together on every process."""
    model = translator.model
    if not model.kinds:
        raise NoAttentionError(f"this model ({model.config.arch}) has no attention: there are no heads to describe")
    if batch_size < 1:
        raise InputError(f"the batch size must be at least 1; got {batch_size}")
    examples = encode_pairs(pairs, translator.source_tokenizer, target=translator.target_tokenizer,
                            model_config=model.config, name="the corpus")
    share = processes.shard(length_order(examples))
    mine = [examples[index] for index in share]
    total = len(mine) * (2 if decode else 1)
    reference = yield from _counted(example_stats_steps(model, mine, batch_size=batch_size, run="reference"),
                                    before=0, total=total)
    runs, outputs = {"reference": reference}, []
    if decode:
        decoded_examples, texts = greedy_examples(translator, mine)
        runs["decoded"] = yield from _counted(example_stats_steps(model, decoded_examples, batch_size=batch_size,
                                                                  run="decoded"), before=len(mine), total=total)
        outputs = [""] * len(examples)
        for index, text in zip(processes.gather_shards(share), processes.gather_shards(texts)):
            outputs[index] = text
    whole = {name: _whole_corpus(run, share, count=len(examples), shape=model.attention_shape(), processes=processes)
             for name, run in runs.items()}
    return HeadStats(list(pairs), whole, outputs)


def _whole_corpus(run: RunStats, share: Sequence[int], *, count: int, shape: dict[str, tuple[int, int]],
                  processes: Processes) -> RunStats:
    """``run`` over the sentences ``share`` of the corpus → the run over every sentence: each process puts its
    sentences' sums in their places among zeros, and the processes' arrays are added up (each sentence's sums
    come from one process, so they arrive unchanged). A process without a share knows the shapes from the
    model's ``shape``."""
    arrays: dict[tuple[str, str], np.ndarray] = {}
    for kind, (layers, heads) in shape.items():
        sums = run.kinds.get(kind)
        mine = {**sums.sums, "rows": sums.rows, "previous_rows": sums.previous_rows} if sums else {}
        for name in statistics_of(kind):
            arrays[kind, name] = _placed(mine.get(name), share, shape=(count, layers, heads), dtype=np.float32)
        for name in ("rows", "previous_rows"):
            arrays[kind, name] = _placed(mine.get(name), share, shape=(count,), dtype=np.int64)
    whole = dict(zip(arrays, processes.sum_arrays(list(arrays.values()))))
    kinds = {kind: KindSums({name: whole[kind, name] for name in statistics_of(kind)}, whole[kind, "rows"],
                            whole[kind, "previous_rows"]) for kind in shape}
    return RunStats(run.run, kinds)


def _placed(values: np.ndarray | None, share: Sequence[int], *, shape: tuple[int, ...], dtype) -> np.ndarray:
    whole = np.zeros(shape, dtype=dtype)
    if values is not None:
        whole[list(share)] = values
    return whole


def _counted(steps: Steps, *, before: int, total: int) -> Steps:
    """``steps``' units counted among ``total`` sentences, ``before`` of them done already; its result."""
    while True:
        try:
            done, _ = next(steps)
        except StopIteration as end:
            return end.value
        yield before + done, total


def greedy_examples(translator: Translator, examples: Sequence[Example]) -> tuple[list[Example], list[str]]:
    """Each source with the model's greedy output as its target (the decoder input the decoding fed: the start
    token and every output token but the last), and the outputs' text."""
    decoded, texts = [], []
    sources = [SourceInput(source_ids, len(source_ids)) for source_ids, _ in examples]
    for (source_ids, _), results in zip(examples, decode_corpus(translator, sources)):  # in batches
        decoded.append((source_ids, results[0].token_ids[:-1]))
        texts.append(results[0].text)
    return decoded, texts


def length_order(examples: Sequence[Example]) -> list[int]:
    """Example indices, the shortest sources first (then the shortest targets)."""
    return sorted(range(len(examples)), key=lambda i: (len(examples[i][0]), len(examples[i][1])))


def length_batches(examples: Sequence[Example], batch_size: int) -> list[list[int]]:
    """Example indices cut into batches of similar lengths (less padding to compute), each batch in order."""
    order = length_order(examples)
    return [order[start: start + batch_size] for start in range(0, len(order), batch_size)]


def example_stats(model: Seq2Seq, examples: Sequence[Example], batch_size: int, run: str = "reference",
                  progress: Progress | None = None) -> RunStats | None:
    """Statistics of token-id examples, teacher-forced in batches (the examples' order is kept in the result);
    None when ``progress`` asked to stop."""
    return drive(example_stats_steps(model, examples, batch_size=batch_size, run=run), progress)


def example_stats_steps(model: Seq2Seq, examples: Sequence[Example], batch_size: int,
                        run: str = "reference") -> Steps:
    """:func:`example_stats`, yielding ``(examples done, examples in all)`` after each batch."""
    device = next(model.parameters()).device
    totals: dict[str, KindSums] = {}
    done = 0
    for indices in length_batches(examples, batch_size):
        with torch.inference_mode():  # per batch: a paused generator must not leave inference mode on for others
            src, tgt_in, src_lengths, tgt_lengths = _forced([examples[i] for i in indices], model, device)
            if is_encoder_only(model):  # the sentence alone: no head needed for its attention
                _, _, weights = model.encode(src, True)
                intermediates = Intermediates(attention={"enc_self": weights})
            else:
                _, intermediates = model(src, tgt_in, need_weights=True)
            batch_totals = batch_sums(intermediates, src, src_lengths=src_lengths, tgt_lengths=tgt_lengths,
                                      eos_id=model.config.eos_id)
        for kind, sums in batch_totals.items():
            if kind not in totals:
                # float32 per sentence (a few hundred rows each) keeps a large corpus' sums small
                totals[kind] = KindSums({name: np.zeros((len(examples),) + values.shape[1:], dtype=np.float32)
                                         for name, values in sums.sums.items()},
                                        np.zeros(len(examples), dtype=np.int64),
                                        np.zeros(len(examples), dtype=np.int64))
            for name, values in sums.sums.items():
                totals[kind].sums[name][indices] = values
            totals[kind].rows[indices], totals[kind].previous_rows[indices] = sums.rows, sums.previous_rows
        done += len(indices)
        yield done, len(examples)
    return RunStats(run, totals)


def _forced(examples: Sequence[Example], model: Seq2Seq, device) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """One teacher-forced batch: ``src``, ``tgt_in`` (the start token and the target), and the lengths of their
    real rows. A decoder-only model is fed each prompt and continuation as one sequence (no source: its
    ``forward`` then attends over that sequence alone), right-padded."""
    if is_encoder_only(model):  # the sentences, right-padded; nothing decoded
        width = max(len(source) for source, _ in examples)
        src = torch.tensor([source + [model.config.pad_id] * (width - len(source)) for source, _ in examples],
                           dtype=torch.long, device=device)
        return (src, src[:, :0], torch.tensor([len(source) for source, _ in examples], device=device),
                torch.zeros(len(examples), dtype=torch.long, device=device))
    if not is_decoder_only(model):
        batch = collate(examples, model.config, device)
        return (batch.src, batch.tgt_in, torch.tensor([len(source) for source, _ in examples], device=device),
                torch.tensor([len(target) + 1 for _, target in examples], device=device))
    sequences = [(source + target)[: model.config.max_len] for source, target in examples]
    width = max(len(sequence) for sequence in sequences)
    tgt_in = torch.tensor([sequence + [model.pad_id] * (width - len(sequence)) for sequence in sequences],
                          dtype=torch.long, device=device)
    return (tgt_in[:, :0], tgt_in, torch.zeros(len(examples), dtype=torch.long, device=device),
            torch.tensor([len(sequence) for sequence in sequences], device=device))


def batch_sums(intermediates: Intermediates, src: Tensor, src_lengths: Tensor, tgt_lengths: Tensor,
               eos_id: int) -> dict[str, KindSums]:
    """Per kind: each statistic summed over every sentence's real query rows, ``[B, layers, heads]`` float64,
    and how many real query rows each sentence has."""
    result = {}
    for kind, layers in intermediates.attention.items():
        query_lengths = src_lengths if kind == "enc_self" else tgt_lengths
        key_lengths = tgt_lengths if kind == "dec_self" else src_lengths
        query_len, key_len = layers[0].shape[-2:]
        real_rows = (torch.arange(query_len, device=src.device) < query_lengths[:, None]).float()  # [B, Q]
        real_keys = (torch.arange(key_len, device=src.device) < key_lengths[:, None]).float()  # [B, K]
        extra = {}
        if kind != "dec_self":
            extra["eos"] = ((src[:, :key_len] == eos_id).float() * real_keys)[:, None, None, :]
        if kind == "cross":
            extra["diagonal"] = diagonal_band(query_lengths, key_lengths, query_len=query_len, key_len=key_len)[:, None]
        per_layer = [row_statistics(kind, weights.float(), real_keys=real_keys, extra=extra) for weights in layers]
        sums = {name: torch.stack([(layer[name] * real_rows[:, None, :]).sum(-1) for layer in per_layer], dim=1)
                .double().cpu().numpy() for name in statistics_of(kind)}  # [B, L, H]
        rows = query_lengths.cpu().numpy()
        result[kind] = KindSums(sums, rows, np.maximum(rows - 1, 0))
    return result


def row_statistics(kind: str, weights: Tensor, real_keys: Tensor, extra: dict[str, Tensor]) -> dict[str, Tensor]:
    """Every statistic of every attention row: weights ``[B, H, Q, K]`` → ``[B, H, Q]`` per statistic."""
    real = weights * real_keys[:, None, None, :]
    rows = {"entropy": -torch.special.xlogy(real, real).sum(-1), "confidence": real.amax(-1),
            "padding": (weights - real).sum(-1)}
    for name, keys in extra.items():  # eos, diagonal: weights on a set of keys
        rows[name] = (real * keys).sum(-1)
    if kind == "dec_self":
        rows["bos"] = real[..., 0]
    if kind in ("enc_self", "dec_self"):
        rows["same"] = torch.diagonal(real, dim1=-2, dim2=-1)
        # row q's weight on key q - 1; row 0 has none (its count is left out by ``previous_rows``)
        rows["previous"] = torch.nn.functional.pad(torch.diagonal(real, offset=-1, dim1=-2, dim2=-1), (1, 0))
    return rows


def diagonal_band(query_lengths: Tensor, key_lengths: Tensor, query_len: int, key_len: int) -> Tensor:
    """``[B, Q, K]`` 1.0 where key k is within the band around row t's diagonal centre
    (models/trace/head_summary.py)."""
    rows = torch.arange(query_len, device=query_lengths.device, dtype=torch.float64)
    keys = torch.arange(key_len, device=query_lengths.device, dtype=torch.float64)
    sources, targets = key_lengths.double()[:, None], query_lengths.double().clamp(min=1)[:, None]
    centres = (rows[None, :] + 0.5) * sources / targets - 0.5  # [B, Q]
    half_width = torch.clamp(DIAGONAL_BAND * sources, min=1.0)[:, :, None]  # [B, 1, 1]
    band = (keys[None, None, :] - centres[:, :, None]).abs() <= half_width
    return (band & (keys[None, None, :] < sources[:, :, None])).float()
