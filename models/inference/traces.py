"""Each decoding result's ``AttentionTrace``, assembled from what the model computed at the start of the run and
the rows its steps produced.

The start's attention plays one of two parts, told apart by its kind:

- a kind the steps do not produce (a sequence-to-sequence encoder's ``enc_self``) is complete after the start and
  shared by every hypothesis of the run;
- a kind the steps do produce is that kind's first rows, which the steps' rows continue: a decoder-only model's
  prefilled prompt gives its ``dec_self`` block ``[heads, P, P]`` (P prompt positions, possibly none), and step ``t``
  adds query row ``P + t`` over keys ``0 .. P + t``, so the trace is one square over the whole sequence.

A sequence-to-sequence run has no such first rows (P = 0): its ``dec_self`` is the steps' rows alone. A decoder-only
model's trace is labelled as one sequence (``AttentionTrace.prompt_len``): its source tokens are the whole prompt (the
P prefilled positions and the one fed first), its rows and keys the prompt's tokens then the continuation's.
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from ..nn.intermediates import Intermediates, RowBuffer, to_numpy, trace_from_intermediates
from ..nn.masks import expand_for_trace
from ..trace.records import AttentionTrace, DecodeStep, stack_rows

STEP_KINDS = ("dec_self", "cross")  # the kinds of attention a decoding step produces a row of
Path = list[tuple[DecodeStep, int]]  # one hypothesis: (step, row of that step) from the first step to the last


class TraceAssembly:
    """The traces of one run: ``src_tokens`` label the source (the keys of ``cross``, the positions of
    ``enc_self``; a decoder-only model's whole prompt, ``prompt_len`` tokens), ``label`` the output tokens;
    ``dtype`` is the traces' number type and ``ablated`` the heads the run switched off."""

    def __init__(self, src_tokens: Sequence[str], label: Callable[[int], str], *, dtype: type = np.float32,
                 ablated: tuple = (), prompt_len: int | None = None):
        self.src_tokens, self.label, self.dtype, self.ablated = list(src_tokens), label, dtype, ablated
        self.prompt_len = prompt_len
        self.shared: dict[str, list[np.ndarray]] = {}  # complete kinds every hypothesis shares (enc_self)
        self.shared_masks: dict[str, np.ndarray] = {}
        self.first: dict[str, list[np.ndarray]] = {}  # per step kind its first rows [heads, P, keys], before any step
        self.first_masks: dict[str, np.ndarray] = {}
        self.first_tokens: list[str] = []  # the labels of the first rows' positions
        self.settled: RowBuffer | None = None  # a beam's settled rows: the prefix of every hypothesis' path

    def begin(self, start: Intermediates, first_tokens: Sequence[str] = ()) -> None:
        """Take the start's attention (its tensors let go as they are converted); ``first_tokens`` label the
        query positions of the step kinds' first rows (a prefilled prompt), if the start has any."""
        complete = Intermediates({kind: layers for kind, layers in start.attention.items() if kind not in STEP_KINDS},
                                 {kind: mask for kind, mask in start.masks.items() if kind not in STEP_KINDS})
        if complete.attention:  # converted once, shared by all hypotheses; released layer by layer
            trace = trace_from_intermediates(complete, 0, src_tokens=self.src_tokens, tgt_tokens=[], dtype=self.dtype,
                                             release=True)
            self.shared, self.shared_masks = trace.attention, trace.masks
        self.first_tokens = list(first_tokens)
        for kind in STEP_KINDS:
            layers = start.attention.get(kind)
            if not layers:
                continue
            length, keys = layers[0].shape[-2:]
            if length != len(self.first_tokens):
                raise ValueError(f"{len(self.first_tokens)} labels for {length} first {kind} rows")
            self.first[kind] = [to_numpy(layer[0], self.dtype) for layer in layers]
            layers.clear()
            mask = expand_for_trace(start.masks.get(kind), 0, query_len=length, key_len=keys)
            self.first_masks[kind] = mask[:length, :keys].numpy().copy()

    def of_pass(self, intermediates: Intermediates, tgt_tokens: list[str]) -> AttentionTrace:
        """The trace of one teacher-forced pass over the whole output (its tensors let go as they are converted)."""
        if self.prompt_len is not None:  # the pass fed the prompt, then the output but its last token
            tgt_tokens = self.src_tokens + tgt_tokens[1:]
        trace = trace_from_intermediates(intermediates, 0, src_tokens=self.src_tokens, tgt_tokens=tgt_tokens,
                                         dtype=self.dtype, release=True)
        trace.ablated, trace.prompt_len = self.ablated, self.prompt_len
        return trace

    def of_path(self, path: Path, ids: list[int], start: int,
                written: dict[str, list[np.ndarray]] | None = None) -> AttentionTrace:
        """One hypothesis' trace: its step rows as ``[heads, T, K]`` arrays (dec_self padded to its keys), those
        ``written`` as it ran where given, else stacked from the steps' rows; ``start`` is the token fed first and
        ``ids`` the tokens chosen."""
        fed_first = self.src_tokens[-1:] if self.prompt_len is not None else [self.label(start)]  # the prompt's last
        tgt_tokens = self.first_tokens + fed_first + [self.label(i) for i in ids[:-1]]
        written = written or {}
        attention: dict[str, list[np.ndarray]] = dict(self.shared)
        masks: dict[str, np.ndarray] = dict(self.shared_masks)
        for kind in STEP_KINDS:
            if kind not in path[0][0].attention:
                continue
            before = self.first[kind][0].shape[-2] if kind in self.first else 0
            key_len = before + len(path) if kind == "dec_self" else len(self.src_tokens)
            rows = written.get(kind) or [self._stack(path, kind, layer, key_len=key_len)
                                         for layer in range(len(path[0][0].attention[kind]))]
            mask = stack_rows([step.masks[kind][row][None] for step, row in path], key_len)[0].astype(bool)
            if kind in self.first:
                if rows[0].shape[-2] == len(path):  # else written below the first rows already (RowBuffer's first)
                    rows = [_below(block, layer_rows) for block, layer_rows in zip(self.first[kind], rows)]
                mask = _below(self.first_masks[kind], mask)
            attention[kind], masks[kind] = rows, mask
        return AttentionTrace(self.src_tokens, tgt_tokens, attention=attention, masks=masks, ablated=self.ablated,
                              prompt_len=self.prompt_len)

    def _stack(self, path: Path, kind: str, layer: int, *, key_len: int) -> np.ndarray:
        """``[heads, len(path), key_len]``: the rows of one hypothesis, zero-filled on the right; a beam's
        settled steps (a prefix of every path) are copied from the shared prefix in one block."""
        shared = self.settled.arrays.get(kind) if self.settled is not None else None
        settled = 0
        while shared and settled < min(len(path), shared[layer].shape[1]) and path[settled][0].kept is not None:
            settled += 1
        first = path[0][0].attention_row(kind, layer, path[0][1])
        stacked = np.zeros((first.shape[0], len(path), key_len), dtype=first.dtype)
        if settled:
            # settled row t has t + 1 decoder keys after the first rows' ones
            width = key_len - len(path) + settled if kind == "dec_self" else key_len
            stacked[:, :settled, :width] = shared[layer][:, :settled, :width]
        for index in range(settled, len(path)):
            step, row = path[index]
            weights = step.attention_row(kind, layer, row)
            stacked[:, index, : weights.shape[-1]] = weights
        return stacked


def _below(block: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """The first rows ``block`` ``[..., P, K]`` and the rows after them ``[..., T, K']`` as one array
    ``[..., P + T, max(K, K')]``, zero-filled on the right: for ``dec_self`` (K = P, K' = P + T) the causal square."""
    before, after = block.shape[-2], rows.shape[-2]
    joined = np.zeros(block.shape[:-2] + (before + after, max(block.shape[-1], rows.shape[-1])), dtype=rows.dtype)
    joined[..., :before, : block.shape[-1]] = block
    joined[..., before:, : rows.shape[-1]] = rows
    return joined
