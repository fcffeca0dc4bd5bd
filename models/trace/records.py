"""What attention did, as plain data: ``AttentionTrace`` (one sentence) and ``DecodeStep`` (one step).

Inside models, attention travels as tensors ``[batch, heads, query_len, key_len]`` (``Intermediates``, in
models/nn/intermediates.py); these classes hold numpy arrays on the host so they can cross threads and be
saved, and this module imports no torch, so the app's plain-data side (session, view-model) loads without it. Kinds:
``enc_self`` (encoder self-attention), ``dec_self`` (decoder self-attention), ``cross``. Masks are boolean,
True = may attend.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

KINDS = ("enc_self", "dec_self", "cross")


@dataclass
class AttentionTrace:
    """One sentence's attention: per kind, one array ``[heads, query_len, key_len]`` per layer.

    ``src_tokens`` label encoder positions; ``tgt_tokens`` label decoder query positions and start with
    the start token fed to the decoder. ``masks[kind]`` is ``[query_len, key_len]``, True = may attend.
    ``ablated``: the heads ``(kind, layer, head)`` that were switched off in the run (models/nn/ablation.py);
    their arrays hold the weights they computed, though their output was zeroed.

    A decoder-only model's trace (``prompt_len`` set; None for every other model) has the one kind ``dec_self``
    over the whole sequence fed: ``src_tokens`` are the prompt's ``prompt_len`` tokens and ``tgt_tokens`` every
    position fed, the prompt's tokens then the continuation's but its last (n positions: rows and keys
    ``[heads, n, n]``; row i predicted the token after position i).
    """

    src_tokens: list[str]
    tgt_tokens: list[str]
    attention: dict[str, list[np.ndarray]]
    masks: dict[str, np.ndarray]
    ablated: tuple[tuple[str, int, int], ...] = ()
    prompt_len: int | None = None

    @property
    def kinds(self) -> list[str]:
        return [kind for kind in KINDS if kind in self.attention]

    def layers(self, kind: str) -> int:
        return len(self.attention[kind])

    def heads(self, kind: str) -> int:
        return self.attention[kind][0].shape[0]

    def query_tokens(self, kind: str) -> list[str]:
        return self.src_tokens if kind == "enc_self" else self.tgt_tokens

    def key_tokens(self, kind: str) -> list[str]:
        return self.tgt_tokens if kind == "dec_self" else self.src_tokens

    def is_ablated(self, kind: str, layer: int, head: int) -> bool:
        return (kind, layer, head) in self.ablated

    @property
    def half_precision(self) -> bool:
        """The weights are kept as float16 (about three significant digits), as the app keeps long runs."""
        return any(layers[0].dtype == np.float16 for layers in self.attention.values() if layers)


@dataclass
class DecodeStep:
    """One decoding step over a beam of ``K`` hypotheses (``K = 1`` for greedy and forced decoding).

    Row ``i`` of every array describes hypothesis ``i`` *after* this step: it extended hypothesis
    ``parents[i]`` of the previous step with ``token_ids[i]``. ``probabilities``/``ranks`` are that
    token's probability and rank (0 = most likely) in the parent's next-token distribution, whose top
    ``k`` entries are ``top_ids``/``top_probs``. ``attention[kind]`` holds, per layer, ``[K, heads, key_len]``:
    the attention row of the query that produced this step's distribution (reordered through ``parents``
    so row ``i`` belongs to hypothesis ``i``'s own history), and ``masks[kind]`` ``[K, key_len]`` the mask
    row it used (True = may attend). ``scores`` are cumulative log-probabilities. A beam row that had
    already finished is extended by padding with probability 1 and rank 0.

    Once every surviving hypothesis of a beam passes through one row of a step, the step keeps only that
    row: ``kept`` is ``[row]`` and each array of ``attention`` has that one row (``None``: all ``K``);
    :meth:`attention_row` finds a hypothesis' row either way, and ``masks`` always hold all ``K`` rows.
    """

    step: int
    token_ids: np.ndarray
    tokens: list[str]
    probabilities: np.ndarray
    ranks: np.ndarray
    top_ids: np.ndarray
    top_tokens: list[list[str]]
    top_probs: np.ndarray
    parents: np.ndarray
    scores: np.ndarray
    finished: np.ndarray
    attention: dict[str, list[np.ndarray]]
    masks: dict[str, np.ndarray]
    kept: np.ndarray | None = None
    # A decoder-only run's first step: its prompt's prefilled rows per kind and layer [heads, S, S] and their mask
    # [S, S] (S: the prompt but its last token), so a view can draw the run's whole map while it decodes (shared
    # with the run's trace assembly, not copied).
    first_rows: dict[str, list[np.ndarray]] | None = None
    first_masks: dict[str, np.ndarray] | None = None

    def attention_row(self, kind: str, layer: int, row: int) -> np.ndarray:
        """Hypothesis ``row``'s attention ``[heads, key_len]`` in ``layer`` of ``kind``."""
        index = row
        if self.kept is not None:
            index = int(np.searchsorted(self.kept, row))
            if index == len(self.kept) or self.kept[index] != row:
                raise KeyError(f"step {self.step + 1} no longer holds the attention of beam row {row}: "
                               f"no finished hypothesis descends from it")
        return self.attention[kind][layer][index]

    @property
    def token_id(self) -> int:
        return int(self.token_ids[0])

    @property
    def token(self) -> str:
        return self.tokens[0]

    @property
    def probability(self) -> float:
        return float(self.probabilities[0])

    @property
    def rank(self) -> int:
        return int(self.ranks[0])

    @property
    def beam_size(self) -> int:
        return len(self.token_ids)


@dataclass
class DecodeResult:
    """A finished hypothesis: its tokens (without the start token; a decoder-only model's continuation of its
    ``prompt_ids``), text, scores and own trace.

    ``steps[t]`` is decoding step t and ``rows[t]`` this hypothesis' row in it (always 0 without a beam).
    ``trace`` may be given as a function that builds it: a beam search's hypotheses other than the best are
    assembled from the steps' rows only when something first asks for their trace (each would otherwise
    hold a copy of the rows it shares with the others).
    """

    token_ids: list[int]
    tokens: list[str]
    text: str
    log_prob: float
    score: float  # log_prob after the length penalty; what beams are ranked by
    trace: AttentionTrace | None
    steps: list[DecodeStep]
    truncated_source: bool = False
    rows: list[int] = field(default_factory=list)
    prompt_ids: list[int] | None = None  # a decoder-only model's prompt (the continuation follows it); else None


def _trace(result: DecodeResult) -> AttentionTrace | None:
    trace = result.__dict__["_trace"]
    if callable(trace):
        trace = result.__dict__["_trace"] = trace()
    return trace


def _set_trace(result: DecodeResult, trace: AttentionTrace | None | Callable[[], AttentionTrace]) -> None:
    result.__dict__["_trace"] = trace


# Installed after the dataclass is made, so that ``trace`` stays an ordinary constructor argument.
DecodeResult.trace = property(_trace, _set_trace, doc="The hypothesis' trace (built when first asked for if need be).")


def stack_rows(rows: list[np.ndarray], key_len: int) -> np.ndarray:
    """Rows ``[heads, k_t]`` (k_t ≤ key_len), one per step, → ``[heads, len(rows), key_len]``, zero-filled on the
    right (a decoder self-attention row has one key more at each step)."""
    heads = rows[0].shape[0]
    stacked = np.zeros((heads, len(rows), key_len), dtype=rows[0].dtype)
    for index, row in enumerate(rows):
        stacked[:, index, : row.shape[-1]] = row
    return stacked
