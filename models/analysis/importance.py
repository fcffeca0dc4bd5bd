"""Head importance: how much the score on held-out pairs drops when one attention head is switched off
alone (Michel et al. 2019).

Three ways to ask it:
- ``head_importance``: the output-level question. Every pair is decoded again with each head off and
  scored as evaluate does (models/analysis/evaluation.py): chrF, or exact match for a model whose target side is
  characters, where chrF rewards near misses that are wrong answers. One decode per pair and head.
- ``ablation_importance``: the pooled mean per-token NLL of the references under teacher forcing (every
  reference token and the end token, in nats), with each head off. Many heads run in one forward pass: the
  pairs are repeated in the batch dimension and each copy switches its own head off (``HeadGates``).
  ``ablation_importance_steps`` is the same as a generator of passes (models/analysis/steps.py).
- ``gradient_importance``: one forward and backward pass with a gate ξ = 1 on every head: −∂L/∂ξ is the
  first-order estimate of the NLL change when the head is zeroed, and Michel et al.'s importance
  I = E|∂L/∂ξ| (the absolute value taken per sentence) is kept beside it.
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Callable, Generator, Iterator, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from ..nn.ablation import Ablation, AblationError, HeadGates
from ..nn.config import ENCODER_ARCHS
from ..errors import EmptyInputError, InputError
from .catalogue import ABLATION, GRADIENT, IMPORTANCE_METRICS, NLL
from . import encoder_only
from .encoder_only import is_encoder_only
from .evaluation import Evaluation, decoded_batches, output_scores
from .steps import Steps, drive, units_as
from ..inference.batch_sizes import Batching
from ..trace.records import KINDS
from ..inference.prompts import prompted
from ..inference.distributed import ONE_PROCESS, Processes
from ..inference.translator import Translator

# (heads done, heads in all, the head just scored as KIND:LAYER:HEAD); returning False stops the run
Progress = Callable[[int, int, str], "bool | None"]
NORMALIZATIONS = ("none", "layer")
# Padded tokens (rows × (source + target)) one forward pass holds: bounds the logits' memory
# (rows × target × vocabulary floats) while still putting many heads' copies of a small corpus in one pass.
TOKENS_PER_PASS = 16_384
Head = tuple[str, int, int]
# Source ids, forced target ids, how many first target ids go unscored. A decoder-only model's (``prompted``): the
# prompt but its last token, then that token followed by the continuation and the end token, the first fed unscored.
Encoded = tuple[list[int], list[int], int]


class ImportanceError(InputError):
    """Pairs or a model that head importance cannot score."""


def metric_for(translator: Translator) -> str:
    """``exact`` for a character-level target side, else ``chrf``."""
    return "exact" if translator.target_tokenizer.kind == "char" else "chrf"


def metric_value(evaluation: Evaluation, metric: str) -> float:
    """The score on a 0-100 scale."""
    return 100.0 * evaluation.exact if metric == "exact" else evaluation.chrf


@dataclass
class HeadImportance:
    """Per kind a ``[layers, heads]`` table of the score with that head off (``scores``) and of the drop
    from the unablated ``baseline`` (``drops``; positive = the head helped: for NLL, where lower is better,
    the NLL with the head off minus the baseline).

    ``method`` ``gradient``: ``scores`` are the first-order estimates ``baseline − ∂L/∂ξ``, ``gradients`` the
    signed ∂L/∂ξ and ``magnitudes`` Michel et al.'s I = E|∂L/∂ξ| per kind. ``unknown_pairs``: pairs with
    characters a vocabulary lacks (scored with its unknown token)."""

    metric: str
    baseline: float
    examples: int
    scores: dict[str, np.ndarray] = field(default_factory=dict)
    seconds: float = 0.0
    method: str = ABLATION
    gradients: dict[str, np.ndarray] = field(default_factory=dict)
    magnitudes: dict[str, np.ndarray] = field(default_factory=dict)
    unknown_pairs: int = 0

    @property
    def metric_name(self) -> str:
        return IMPORTANCE_METRICS[self.metric]

    @property
    def drops(self) -> dict[str, np.ndarray]:
        if self.metric == NLL:
            return {kind: table - self.baseline for kind, table in self.scores.items()}
        return {kind: self.baseline - table for kind, table in self.scores.items()}

    def normalized(self) -> dict[str, np.ndarray]:
        """``magnitudes`` with each layer divided by its L2 norm (Michel et al.); a layer of zeros stays zero."""
        result = {}
        for kind, table in self.magnitudes.items():
            norms = np.linalg.norm(table, axis=1, keepdims=True)
            result[kind] = np.divide(table, norms, out=np.zeros_like(table), where=norms > 0)
        return result

    def ranking(self) -> list[tuple[str, int, int, float]]:
        """Every head as ``(kind, layer, head, drop)``, the largest drop first (ties in kind, layer, head order)."""
        heads = [(kind, layer, head, float(drop)) for kind, table in self.drops.items()
                 for (layer, head), drop in np.ndenumerate(table)]
        return sorted(heads, key=lambda entry: -entry[3])

    def to_json(self) -> dict:
        tables = lambda tables: {kind: table.tolist() for kind, table in tables.items()}  # noqa: E731
        document = {"metric": self.metric, "metric_name": IMPORTANCE_METRICS[self.metric], "method": self.method,
                    "baseline": self.baseline, "examples": self.examples, "seconds": round(self.seconds, 3),
                    "unknown_pairs": self.unknown_pairs, "scores": tables(self.scores), "drops": tables(self.drops),
                    "ranking": [{"kind": kind, "layer": layer, "head": head, "drop": drop}
                                for kind, layer, head, drop in self.ranking()]}
        if self.method == GRADIENT:
            document.update(gradient=tables(self.gradients), importance=tables(self.magnitudes),
                            normalized=tables(self.normalized()))
        return document


def chosen_kinds(translator: Translator, kinds: Sequence[str] | None) -> list[str]:
    """The kinds to score, in KINDS order: ``kinds``, or every kind the model has; one line when the model has
    no heads or lacks one of ``kinds``."""
    shape = translator.model.attention_shape()
    if not shape:
        raise AblationError("this model has no attention heads to switch off")
    for kind in kinds or ():
        if kind not in shape:
            present = ", ".join(k for k in KINDS if k in shape)
            raise AblationError(f"this model has no {kind} attention (it has {present})")
    return [kind for kind in KINDS if kind in shape and (not kinds or kind in kinds)]


def head_importance(translator: Translator, pairs: Sequence[tuple[str, str]], *, kinds: Sequence[str] | None = None,
                    beam: int = 1, max_len: int | None = None, progress: Progress | None = None,
                    metric: str | None = None, processes: Processes = ONE_PROCESS) -> HeadImportance | None:
    """:func:`head_importance_steps` driven to its end; None when ``progress`` returned False (stopped)."""
    return drive(head_importance_steps(translator, pairs, kinds=kinds, beam=beam, max_len=max_len, metric=metric,
                                       processes=processes), progress)


def head_importance_steps(translator: Translator, pairs: Sequence[tuple[str, str]], *,
                          kinds: Sequence[str] | None = None, beam: int = 1, max_len: int | None = None,
                          metric: str | None = None, batching: Batching = Batching(),
                          processes: Processes = ONE_PROCESS) -> Steps:
    """Score ``pairs`` once as the model is, then once per head of ``kinds`` (default: every kind the model
    has) with that head alone switched off, returning the :class:`HeadImportance`. A unit is one batch decoded
    (``batching``, models/inference/corpus.py): each yields ``(heads done, heads in all, KIND:LAYER:HEAD)``, the
    head being scored, or the last one scored once its score is known (models/analysis/steps.py). ``metric``:
    ``chrf`` or ``exact`` (default: :func:`metric_for`).

    Without ``max_len`` outputs stop at :func:`output_max_len` (all runs alike). Over several ``processes`` each
    decodes its share of the pairs and the score is computed from every output, as one process computes it.
    """
    shape = translator.model.attention_shape()
    chosen = chosen_kinds(translator, kinds)
    started = time.perf_counter()
    max_len = max_len or output_max_len(translator, pairs)
    metric = metric or metric_for(translator)
    total = sum(shape[kind][0] * shape[kind][1] for kind in chosen)

    def score(ablation: Ablation, done: int, head: str):  # the score, one batch a unit
        return (yield from units_as(output_score_steps(translator, pairs, ablation, metric=metric, beam=beam,
                                                       max_len=max_len, batching=batching, processes=processes),
                                    (done, total, head)))

    baseline = yield from score(Ablation(), 0, "every head on")
    result = HeadImportance(metric=metric, baseline=baseline, examples=len(pairs))
    done = 0
    for kind in chosen:
        layers, heads = shape[kind]
        table = np.zeros((layers, heads))
        for layer in range(layers):
            for head in range(heads):
                table[layer, head] = yield from score(Ablation.of([(kind, layer, head)]), done,
                                                      f"{kind}:{layer}:{head}")
                done += 1
                yield done, total, f"{kind}:{layer}:{head}"
        result.scores[kind] = table
    result.seconds = time.perf_counter() - started
    return result


def output_max_len(translator: Translator, pairs: Sequence[tuple[str, str]]) -> int:
    """How long a re-decoded output may grow: twice the longest reference plus 10 tokens. A model missing a head
    often never ends its sentence, and decoding to the model's maximum would only make the same wrong output
    longer."""
    tokenizer = translator.target_tokenizer
    return 2 * max(len(tokenizer.encode(tokenizer.normalize(reference), unknown="replace"))
                   for _, reference in pairs) + 10


def output_score(translator: Translator, pairs: Sequence[tuple[str, str]], ablation: Ablation, *, metric: str,
                 beam: int = 1, max_len: int | None = None, batching: Batching = Batching(),
                 processes: Processes = ONE_PROCESS) -> float:
    """:func:`output_score_steps` driven to its end."""
    return drive(output_score_steps(translator, pairs, ablation, metric=metric, beam=beam, max_len=max_len,
                                    batching=batching, processes=processes))


def output_score_steps(translator: Translator, pairs: Sequence[tuple[str, str]], ablation: Ablation, *,
                       metric: str, beam: int = 1, max_len: int | None = None, batching: Batching = Batching(),
                       processes: Processes = ONE_PROCESS) -> Generator[tuple, None, float]:
    """``metric`` of the outputs with ``ablation``, scored as evaluate scores them, yielding ``()`` after each batch
    decoded (``batching``) and returning the score. Over several ``processes`` each decodes its share and the
    outputs are gathered in the pairs' order: a corpus chrF is no mean of its shares' chrF."""
    mine: list[str] = []
    for outputs in decoded_batches(translator, processes.shard(pairs), beam=beam, max_len=max_len,
                                   ablation=ablation, batching=batching):
        mine.extend(result.text for result in outputs)
        yield ()
    exact, chrf, bleu = output_scores(processes.gather_shards(mine), [reference for _, reference in pairs])
    return metric_value(Evaluation(examples=len(pairs), exact=exact, chrf=chrf, bleu=bleu), metric)


@dataclass(frozen=True)
class ForcedPairs:
    """Pairs as padded id tensors for one teacher-forced pass: ``src`` ``[P, S]``, ``tgt_in`` ``[P, T]`` (the
    start token, then the target shifted right), ``tgt_out`` ``[P, T]`` and ``scored`` ``[P, T]``: the
    positions the NLL counts (the reference's tokens and the end token, not a target language's code)."""

    src: Tensor
    tgt_in: Tensor
    tgt_out: Tensor
    scored: Tensor

    @property
    def rows(self) -> int:
        return self.src.shape[0]

    @property
    def padded_tokens(self) -> int:
        return self.rows * (self.src.shape[1] + self.tgt_in.shape[1])

    def repeated(self, times: int) -> "ForcedPairs":
        """The pairs ``times`` over in the batch dimension (copy ``c`` holds rows ``c·P … c·P + P − 1``)."""
        return ForcedPairs(*(tensor.repeat(times, 1) for tensor in (self.src, self.tgt_in, self.tgt_out, self.scored)))


def encode_references(translator: Translator, pairs: Sequence[tuple[str, str]]) -> tuple[list[Encoded], int]:
    """Per pair the source ids, the forced target (a target language's code where the model needs one, the
    reference, the end token) and how many of its first tokens are not scored; and how many pairs have
    characters a vocabulary lacks (each became its unknown token). One line for a reference that is empty or
    longer than the model takes. A decoder-only model's pair is a prompt and its continuation (``Encoded``); an
    encoder-only model's a sentence with masks and the filled sentence, or a plain one (analysis/encoder_only)."""
    if is_encoder_only(translator.model):
        return encoder_only.encode_masked(translator, pairs)
    first = translator.target_tokenizer.first_tokens()
    unk, eos, limit = translator.target_tokenizer.unk_id, translator.config.eos_id, translator.config.max_len
    encoded, unknown = [], 0
    for number, (source_text, reference) in enumerate(pairs, start=1):
        source = translator.source(source_text)
        try:
            reference_ids = translator.target(reference)
        except EmptyInputError:
            raise ImportanceError(f"pair {number}: the reference is empty") from None
        target = first + reference_ids + [eos]
        fed = len(source.ids) + len(target) - 1 if prompted(translator.config) else len(target)
        if fed > limit:
            what = "the prompt and the continuation have" if prompted(translator.config) else "the reference has"
            raise ImportanceError(f"pair {number}: {what} {fed} tokens with the end token; "
                                  f"this model takes at most {limit}")
        unknown += bool(source.unknown) or (unk is not None and unk in reference_ids)
        if prompted(translator.config):
            encoded.append((source.ids[:-1], source.ids[-1:] + target, len(first) + 1))
        else:
            encoded.append((source.ids, target, len(first)))
    return encoded, unknown


def scored_pair(config, pair: Encoded) -> tuple[list[int], list[int]]:
    """An encoded pair as the contribution methods take it: the source ids (a decoder-only model's whole prompt)
    and the output ids."""
    source, target, _ = pair
    if config.arch in ENCODER_ARCHS:  # the sentence with masks; the answer at each mask
        return source, [answer for token, answer in zip(source, target) if token == config.mask_id]
    return (source + target[:1], target[1:]) if prompted(config) else (source, target)


def forced_batches(translator: Translator, encoded: Sequence[Encoded], *,
                   tokens_per_pass: int = TOKENS_PER_PASS) -> list[ForcedPairs]:
    """The encoded pairs, shortest targets first, in batches of at most ``tokens_per_pass`` padded tokens
    (at least one pair each)."""
    config, device = translator.config, translator.device
    ordered = sorted(encoded, key=lambda pair: (len(pair[1]), len(pair[0])))
    batches, members, widest_source = [], [], 0
    for pair in ordered:
        source_width, target_width = max(widest_source, len(pair[0])), len(pair[1])  # targets come in ascending length
        if members and (len(members) + 1) * (source_width + target_width) > tokens_per_pass:
            batches.append(_padded(members, config, device))
            members, source_width = [], len(pair[0])
        members.append(pair)
        widest_source = source_width
    return batches + [_padded(members, config, device)]


def _padded(encoded, config, device) -> ForcedPairs:
    if config.arch in ENCODER_ARCHS:
        return ForcedPairs(*encoder_only.padded_masked(encoded, config, device))
    pad = config.pad_id
    source_width = max(len(source) for source, _, _ in encoded)
    target_width = max(len(target) for _, target, _ in encoded)
    rows = lambda lists, width, fill: torch.tensor([row + [fill] * (width - len(row)) for row in lists],  # noqa: E731
                                                   dtype=torch.long, device=device)
    if prompted(config):  # the first target token (the prompt's last) is fed, never predicted
        starts, target_width = [target[0] for _, target, _ in encoded], target_width - 1
        encoded = [(source, target[1:], skipped - 1) for source, target, skipped in encoded]
    else:
        starts = [config.bos_id] * len(encoded)
    scored = [[False] * skipped + [True] * (len(target) - skipped) for _, target, skipped in encoded]
    return ForcedPairs(src=rows([source for source, _, _ in encoded], source_width, pad),
                       tgt_in=rows([[start] + target[:-1] for start, (_, target, _) in zip(starts, encoded)],
                                   target_width, pad),
                       tgt_out=rows([target for _, target, _ in encoded], target_width, pad),
                       scored=rows(scored, target_width, False).bool())


def shared_batches(translator: Translator, encoded: Sequence[Encoded], *, tokens_per_pass: int,
                   processes: Processes) -> list[ForcedPairs]:
    """:func:`forced_batches` of this process's share of the pairs (none for a process without a share). The
    pairs are shared out in order of length, so every process gets as many long ones as short ones. Every
    process encodes every pair first: a pair the model cannot take is one line on all of them alike."""
    ordered = sorted(encoded, key=lambda pair: (len(pair[1]), len(pair[0])))
    share = processes.shard(ordered)
    return forced_batches(translator, share, tokens_per_pass=tokens_per_pass) if share else []


def pooled_means(totals: np.ndarray, batches: Sequence[ForcedPairs], processes: Processes) -> np.ndarray:
    """NLL sums over the scored tokens of ``batches`` → means per token, the sums and counts of every process
    added up first (so the result is the one process's, not a mean of means)."""
    tokens = np.array(sum(int(batch.scored.sum()) for batch in batches), dtype=np.int64)
    totals, tokens = processes.sum_arrays([totals, tokens])
    return totals / int(tokens)


def token_nll(translator: Translator, batch: ForcedPairs, ablation: Ablation | HeadGates) -> Tensor:
    """−log p of each scored target token ``[rows, T]`` under teacher forcing (0 where not scored), with
    ``ablation`` applied: the probabilities forced decoding reports (models/inference/decoding.py)."""
    fed = None if is_encoder_only(translator.model) else batch.tgt_in  # the masked tokens' NLL: no target side
    logits, _ = translator.model(batch.src, fed, ablation=ablation)  # [rows, T, V]
    copies = logits.shape[0] // batch.rows  # a model that widens gated copies itself (HeadGates.widened)
    target, scored = (batch.tgt_out, batch.scored) if copies == 1 else (batch.repeated(copies).tgt_out,
                                                                          batch.repeated(copies).scored)
    # over rows × T at once, the vocabulary last: a transposed view would be copied whole first
    nll = F.cross_entropy(logits.flatten(0, 1), target.flatten(), reduction="none").view(target.shape)  # [rows, T]
    return torch.where(scored, nll, torch.zeros((), dtype=nll.dtype, device=nll.device))


def computed_order(head: Head) -> tuple[bool, int, int, int]:
    """Where a head's layer runs: the encoder's layers, then the decoder's (self-attention before cross)."""
    kind, layer, index = head
    return (kind != "enc_self", layer, KINDS.index(kind), index)


def chunk_gates(chunk: Sequence[Head | None], shape, rows: int, like: Tensor) -> HeadGates:
    """Gates for ``len(chunk)`` copies of ``rows`` pairs: copy ``c`` switches head ``chunk[c]`` off (None: no
    head). Only the layers some copy touches get a gate. The copies part ways at the first layer a copy
    touches (``HeadGates.widened``; ``chunk`` comes in :func:`computed_order`)."""
    first = next((head for head in chunk if head is not None), None)
    widen_at = None if first is None else ("enc_self" if first[0] == "enc_self" else "dec_self", first[1])
    gates: dict[tuple[str, int], Tensor] = {}
    for copy, head in enumerate(chunk):
        if head is not None:
            kind, layer, index = head
            gate = gates.get((kind, layer))
            if gate is None:
                gate = gates[(kind, layer)] = like.new_ones(len(chunk) * rows, shape[kind][1])
            gate[copy * rows: (copy + 1) * rows, index] = 0.0
    return HeadGates(gates, copies=len(chunk), widen_at=widen_at)


def _passes(heads: Sequence[Head], per_pass: int, layer_heads: int) -> list[tuple[int, int]]:
    """Index ranges into ``[None, *heads]`` (``heads`` in :func:`computed_order`, ``layer_heads`` a layer), one
    per forward pass: ``per_pass`` heads each (the first also the baseline). A pass costs a fixed overhead
    plus its copies' work from the first layer it touches on (``HeadGates.widened``), so passes are as full as
    memory allows and, where a layer's heads fit, hold whole layers: a pass then never starts a layer early."""
    if per_pass >= layer_heads:
        per_pass -= per_pass % layer_heads
    bounds = [(0, min(1 + per_pass, len(heads) + 1))]
    while bounds[-1][1] <= len(heads):
        start = bounds[-1][1]
        bounds.append((start, min(start + per_pass, len(heads) + 1)))
    return bounds


def _every_head(shape, kinds: Sequence[str]) -> list[Head]:
    return [(kind, layer, head) for kind in kinds for layer in range(shape[kind][0]) for head in range(shape[kind][1])]


def _model_dtype(translator: Translator) -> torch.dtype:
    return next(translator.model.parameters()).dtype


def ablation_importance(translator: Translator, pairs: Sequence[tuple[str, str]], *,
                        kinds: Sequence[str] | None = None, progress: Progress | None = None,
                        tokens_per_pass: int = TOKENS_PER_PASS,
                        processes: Processes = ONE_PROCESS) -> HeadImportance | None:
    """:func:`ablation_importance_steps` to its end, ``progress`` called after each pass; None when it
    returned False."""
    return drive(ablation_importance_steps(translator, pairs, kinds=kinds, tokens_per_pass=tokens_per_pass,
                                           processes=processes), progress)


def ablation_importance_steps(translator: Translator, pairs: Sequence[tuple[str, str]], *,
                              kinds: Sequence[str] | None = None, tokens_per_pass: int = TOKENS_PER_PASS,
                              processes: Processes = ONE_PROCESS) -> Steps:
    """The pooled NLL of the references with every head on, then with each head of ``kinds`` alone off, as
    ``HeadImportance(metric=NLL)``. As many heads as fit ``tokens_per_pass`` padded tokens share one forward
    pass (each in its own copy of the pairs); yields ``(heads done, heads in all, KIND:LAYER:HEAD)`` after each
    pass (models/analysis/steps.py). Over several ``processes`` each scores its share of the pairs and the NLL
    sums and token counts are added up before the means."""
    started = time.perf_counter()
    chosen = chosen_kinds(translator, kinds)
    shape = translator.model.attention_shape()
    encoded, unknown = encode_references(translator, pairs)
    batches = shared_batches(translator, encoded, tokens_per_pass=tokens_per_pass, processes=processes)
    heads = sorted(_every_head(shape, chosen), key=computed_order)
    widens = getattr(translator.model, "widens_gates", False)
    copies: list[Head | None] = [None, *heads]  # the first copy keeps every head on: the baseline
    per_pass = max(1, tokens_per_pass // max((batch.padded_tokens for batch in batches), default=1))
    totals = np.zeros(len(copies))
    like = torch.ones((), dtype=_model_dtype(translator), device=translator.device)
    for start, end in _passes(heads, per_pass, layer_heads=min(shape[kind][1] for kind in chosen)):
        chunk = copies[start:end]
        with torch.inference_mode():  # per pass: whatever runs between two passes runs as it would alone
            for batch in batches:
                nll = token_nll(translator, batch if widens else batch.repeated(len(chunk)),
                                chunk_gates(chunk, shape, rows=batch.rows, like=like))
                totals[start:end] += nll.view(len(chunk), -1).double().sum(dim=1).cpu().numpy()
        done = end - 1  # heads scored so far
        if done:
            yield done, len(heads), "{}:{}:{}".format(*heads[done - 1])
    means = pooled_means(totals, batches, processes)
    result = HeadImportance(metric=NLL, baseline=float(means[0]), examples=len(pairs), unknown_pairs=unknown)
    for kind in chosen:
        result.scores[kind] = np.array([means[1 + heads.index(head)] for head in _every_head(shape, [kind])]
                                       ).reshape(shape[kind])
    result.seconds = time.perf_counter() - started
    return result


@contextmanager
def _frozen(model: torch.nn.Module) -> Iterator[None]:
    """Gradients reach the gates only: no parameter asks for one meanwhile (and none is updated)."""
    asked = [(parameter, parameter.requires_grad) for parameter in model.parameters()]
    for parameter, _ in asked:
        parameter.requires_grad_(False)
    try:
        with torch.inference_mode(False), torch.enable_grad():  # also when the caller runs in inference mode
            yield
    finally:
        for parameter, flag in asked:
            parameter.requires_grad_(flag)


def gradient_importance(translator: Translator, pairs: Sequence[tuple[str, str]], *,
                        kinds: Sequence[str] | None = None, tokens_per_pass: int = TOKENS_PER_PASS,
                        processes: Processes = ONE_PROCESS) -> HeadImportance:
    """One forward and backward pass per batch of pairs with a gate ξ = 1 on every head of ``kinds``:
    ``gradients`` ∂L/∂ξ of the pooled NLL L, ``scores`` L − ∂L/∂ξ (the first-order NLL with the head off),
    ``magnitudes`` Michel et al.'s E|∂L/∂ξ|: each sentence's |∂(its summed NLL)/∂ξ|, pooled like L. Over several
    ``processes`` each differentiates its share of the pairs and the sums are added up before the means."""
    started = time.perf_counter()
    chosen = chosen_kinds(translator, kinds)
    shape = translator.model.attention_shape()
    encoded, unknown = encode_references(translator, pairs)
    sums = _gradient_sums(translator, encoded, {kind: shape[kind] for kind in chosen},
                          tokens_per_pass=tokens_per_pass, processes=processes)
    sums = dict(zip(sums, processes.sum_arrays(list(sums.values()))))
    tokens = (sum(ids.count(translator.config.mask_id) for ids, _, _ in encoded) if is_encoder_only(translator.model)
              else sum(len(target) - skipped for _, target, skipped in encoded))  # the scored tokens
    result = HeadImportance(metric=NLL, baseline=float(sums["loss"]) / tokens, examples=len(pairs),
                            method=GRADIENT, unknown_pairs=unknown)
    for kind in chosen:
        _check_gradients(sums[f"missing.{kind}"], sums[f"signed.{kind}"], kind=kind)
        result.gradients[kind] = sums[f"signed.{kind}"] / tokens
        result.magnitudes[kind] = sums[f"magnitude.{kind}"] / tokens
        result.scores[kind] = result.baseline - result.gradients[kind]
    result.seconds = time.perf_counter() - started
    return result


def _gradient_sums(translator: Translator, encoded: Sequence[Encoded], shape: dict[str, tuple[int, int]], *,
                   tokens_per_pass: int, processes: Processes) -> dict[str, np.ndarray]:
    """Over this process's share of the pairs: the summed NLL (``loss``) and per kind of ``shape`` the summed
    ∂L/∂ξ (``signed.KIND``), the summed per-sentence |∂L/∂ξ| (``magnitude.KIND``) and per layer how many passes
    gave no gradient (``missing.KIND``). Checked only once every process's sums are added up, so all of them
    stop alike."""
    sums = {"loss": np.zeros(())}
    for kind, (layers, heads) in shape.items():
        sums.update({f"signed.{kind}": np.zeros((layers, heads)), f"magnitude.{kind}": np.zeros((layers, heads)),
                     f"missing.{kind}": np.zeros(layers)})
    dtype = _model_dtype(translator)
    with _frozen(translator.model):  # the batches too: a tensor made in inference mode cannot be differentiated
        for batch in shared_batches(translator, encoded, tokens_per_pass=tokens_per_pass, processes=processes):
            gates = {(kind, layer): torch.ones(batch.rows, heads, dtype=dtype, device=translator.device,
                                               requires_grad=True)
                     for kind, (layers, heads) in shape.items() for layer in range(layers)}
            loss = token_nll(translator, batch, HeadGates(gates)).sum()
            loss.backward()
            sums["loss"] += float(loss.detach())
            for (kind, layer), gate in gates.items():
                if gate.grad is None:
                    sums[f"missing.{kind}"][layer] += 1
                    continue
                sums[f"signed.{kind}"][layer] += gate.grad.double().sum(dim=0).cpu().numpy()
                sums[f"magnitude.{kind}"][layer] += gate.grad.double().abs().sum(dim=0).cpu().numpy()
    return sums


def _check_gradients(missing: np.ndarray, signed: np.ndarray, *, kind: str) -> None:
    for layer in range(len(missing)):
        if missing[layer]:
            raise ImportanceError(f"this model's {kind} heads of layer {layer} give no gradient: "
                                  f"use --method ablation")
        if not np.isfinite(signed[layer]).all():
            raise ImportanceError(f"the gradient at the {kind} heads of layer {layer} is not finite: "
                                  f"use --method ablation")


PRUNE_ORDERS = ("increasing", "decreasing", "random")
PointSteps = Generator[int, None, np.ndarray]  # one order's curve: yields how many of its points are done
