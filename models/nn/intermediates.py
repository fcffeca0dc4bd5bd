"""Attention as it travels inside the models (tensors ``[batch, heads, query_len, key_len]``), and its
conversion to the host-side ``AttentionTrace`` (models/trace/records.py, numpy only)."""

from __future__ import annotations

import contextlib
import contextvars
import mmap
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import Tensor

from .masks import expand_for_trace
from ..trace.records import AttentionTrace, DecodeStep


_KEPT_DTYPE: contextvars.ContextVar[torch.dtype | None] = contextvars.ContextVar("kept_attention_dtype", default=None)


@contextlib.contextmanager
def keeping_attention(dtype: type) -> Iterator[None]:
    """Inside, the models keep each layer's attention weights as ``dtype`` (numpy float32 or float16):
    a float16 copy is made as each layer finishes, so a long forward pass never holds every layer's
    float32 weights at once. Per thread (a context variable)."""
    token = _KEPT_DTYPE.set(torch.float16 if np.dtype(dtype) == np.float16 else None)
    try:
        yield
    finally:
        _KEPT_DTYPE.reset(token)


_NOTED_BLOCKS: contextvars.ContextVar[list[dict] | None] = contextvars.ContextVar("noted_blocks", default=None)


@contextlib.contextmanager
def noting_blocks() -> Iterator[list[dict]]:
    """Inside, each Transformer attention sublayer appends what its decomposition needs (its module, input,
    value vectors, weights, attention output and block output; models/analysis/contributions.py) to the list yielded.
    Outside, a sublayer pays one context-variable read. Per thread (a context variable)."""
    blocks: list[dict] = []
    token = _NOTED_BLOCKS.set(blocks)
    try:
        yield blocks
    finally:
        _NOTED_BLOCKS.reset(token)


def note_block(sublayer, **tensors: Tensor | None) -> None:
    """Keep one attention sublayer's tensors while :func:`noting_blocks` is active (else nothing)."""
    blocks = _NOTED_BLOCKS.get()
    if blocks is not None:
        blocks.append({"sublayer": sublayer, **tensors})


def kept_dtype() -> torch.dtype | None:
    """The torch type the models keep attention weights in here (None: the type they are computed in)."""
    return _KEPT_DTYPE.get()


_NOTED_RESIDUALS: contextvars.ContextVar[dict[str, list[Tensor]] | None] = contextvars.ContextVar(
    "noted_residuals", default=None)


@contextlib.contextmanager
def noting_residuals() -> Iterator[dict[str, list[Tensor]]]:
    """Inside, each stack notes its residual stream ``[B, L, E]`` into the dict yielded, per stack ("encoder",
    "decoder") one tensor per layer boundary: the embeddings' output (index 0), then each layer's output (index
    l + 1), before the stack's final norm (what the logit lens and DecoderLens read: models/analysis/lens.py).
    Outside, a layer pays one context-variable read. Per thread (a context variable)."""
    residuals: dict[str, list[Tensor]] = {}
    token = _NOTED_RESIDUALS.set(residuals)
    try:
        yield residuals
    finally:
        _NOTED_RESIDUALS.reset(token)


def note_residual(stack: str, x: Tensor) -> None:
    """Append the residual stream ``x`` at the next layer boundary of ``stack`` while :func:`noting_residuals` is
    active (else nothing)."""
    residuals = _NOTED_RESIDUALS.get()
    if residuals is not None:
        residuals.setdefault(stack, []).append(x)


def kept(weights: Tensor | None) -> Tensor | None:
    """One layer's attention weights as the model keeps them for the trace (see :func:`keeping_attention`)."""
    dtype = _KEPT_DTYPE.get()
    return weights if weights is None or dtype is None else weights.to(dtype)


@dataclass
class Intermediates:
    """Attention tensors of one batched forward pass, per kind one tensor ``[B, H, Q, K]`` per layer,
    and the mask each kind used (broadcastable to ``[B, 1, Q, K]``)."""

    attention: dict[str, list[Tensor]] = field(default_factory=dict)
    masks: dict[str, Tensor | None] = field(default_factory=dict)


def trace_from_intermediates(intermediates: Intermediates, index: int, src_tokens: list[str], tgt_tokens: list[str],
                             *, dtype: type = np.float32, release: bool = False) -> AttentionTrace:
    """Example ``index`` of a batched forward pass as a trace (trimmed to the given token lists).

    ``release`` empties the intermediates' lists as their tensors are converted, so that a conversion
    to another dtype holds one layer twice at a time, not the whole pass.
    """
    attention, masks = {}, {}
    for kind, per_layer in intermediates.attention.items():
        q_len = len(src_tokens) if kind == "enc_self" else len(tgt_tokens)
        k_len = len(tgt_tokens) if kind == "dec_self" else len(src_tokens)
        attention[kind] = []
        for layer in range(len(per_layer)):
            attention[kind].append(to_numpy(per_layer[layer][index, :, :q_len, :k_len], dtype))
            if release:
                per_layer[layer] = None
        if release:
            per_layer.clear()
        mask = intermediates.masks.get(kind)
        masks[kind] = expand_for_trace(mask, index, query_len=q_len, key_len=k_len)[:q_len, :k_len].numpy().copy()
    return AttentionTrace(list(src_tokens), list(tgt_tokens), attention=attention, masks=masks)


def to_numpy(tensor: Tensor, dtype: type = np.float32) -> np.ndarray:
    """A host array of ``dtype`` (float32 or float16): converted by torch, on the device, before the copy
    to the host (numpy's own float16 conversion is several times slower); a CPU float32 tensor is not copied."""
    half = np.dtype(dtype) == np.float16
    return tensor.detach().to(torch.float16 if half else torch.float32).cpu().numpy().astype(dtype, copy=False)


def untouched_zeros(shape: tuple[int, ...], dtype: type) -> np.ndarray:
    """A zero-filled array in its own anonymous memory mapping: a page of it is resident only once written.

    ``np.zeros`` would do the same for a large array, except that numpy asks the kernel for huge pages
    there, and a 2 MB huge page is resident in full at the first write into it (one row per head made
    a whole ``[heads, 1024, 1024]`` float16 buffer resident). The mapping is unmapped with the array.
    """
    size = int(np.prod(shape)) * np.dtype(dtype).itemsize
    if size == 0:
        return np.zeros(shape, dtype)
    try:
        mapping = mmap.mmap(-1, size)
    except OSError:  # a system that will not reserve that much address space: ordinary memory, all of it used
        return np.zeros(shape, dtype)
    if hasattr(mmap, "MADV_NOHUGEPAGE"):  # where the system gives huge pages to every large mapping
        mapping.madvise(mmap.MADV_NOHUGEPAGE)
    return np.frombuffer(mapping, dtype=dtype).reshape(shape)


class BeamRows:
    """A beam search's attention rows: step ``t``'s ``K`` rows go to one block of a chunk of ``CHUNK`` steps,
    an array ``[CHUNK, K, heads, key_len]`` per kind and layer in its own anonymous mapping (dec_self: as
    many keys as the chunk's last step has, rows zero-filled on the right).

    Once every surviving hypothesis passes through one row of a step (:meth:`settle`), that row moves
    into ``shared``, the prefix they all share (which becomes the best hypothesis' trace); once every step
    of a chunk has settled, the chunk is let go (:meth:`release_through`) and its mapping goes back to the
    system when nothing looks into it any more. So a beam holds about one trace plus ``K`` rows for each
    step where its hypotheses still differ (and the rest of their chunk), reserves space in proportion to
    the steps taken, and allocates no rows that outlive their step on the process' heap (freed out of
    order, they would leave it in pieces it cannot give back).
    """

    CHUNK = 16

    def __init__(self, max_len: int, beam: int, dtype: type = np.float32, *, key_offset: int = 0):
        """``key_offset``: the dec_self keys before step 0's (a decoder-only model's prefilled prompt, see
        :class:`RowBuffer`)."""
        self.max_len, self.beam, self.dtype, self.key_offset = max_len, beam, dtype, key_offset
        self.chunks: dict[tuple[str, int, int], np.ndarray] = {}  # (kind, layer, chunk) → its array
        self.shared = RowBuffer(max_len, dtype, key_offset=key_offset)

    def add(self, index: int, attention: dict[str, list[np.ndarray]],
            parents: np.ndarray) -> dict[str, list[np.ndarray]]:
        """Store step ``index``'s rows (host arrays): per kind and layer ``[K', heads, key_len]`` rows of the
        hypotheses before the step, taken in the order ``parents`` gives; returns views ``[K, heads, key_len]``."""
        chunk, offset = divmod(index, self.CHUNK)
        views = {}
        for kind, layers in attention.items():
            views[kind] = []
            for layer, weights in enumerate(layers):
                array = self.chunks.get((kind, layer, chunk))
                if array is None:
                    end = self._end(chunk)  # dec_self: the chunk's last step attends to ``key_offset + end`` keys
                    keys = self.key_offset + end if kind == "dec_self" else weights.shape[-1]
                    array = untouched_zeros((end - chunk * self.CHUNK, self.beam, weights.shape[1], keys), self.dtype)
                    self.chunks[(kind, layer, chunk)] = array
                block = array[offset, : len(parents), :, : weights.shape[-1]]
                np.take(weights, parents, axis=0, out=block, mode="clip")  # parents are valid rows
                views[kind].append(block)
        return views

    def settle(self, index: int, row: int, attention: dict[str, list[np.ndarray]]) -> dict[str, list[np.ndarray]]:
        """Step ``index``'s ``row`` (of ``attention``, the step's arrays) is the one every surviving hypothesis
        passes through: it moves into ``shared``; returns the step's new arrays (views ``[1, heads, key_len]``)."""
        return self.shared.write(index, {kind: [layer[row] for layer in layers] for kind, layers in attention.items()})

    def release_through(self, index: int) -> None:
        """Let go of the chunks whose steps all lie in ``0..index`` (all settled)."""
        for key in [key for key in self.chunks if self._end(key[2]) - 1 <= index]:
            del self.chunks[key]

    def _end(self, chunk: int) -> int:
        """One past the last step of ``chunk``."""
        return min(self.max_len, (chunk + 1) * self.CHUNK)


class RowBuffer:
    """Attention rows of one line of steps, written step by step straight into one ``[heads, max_len,
    key_len]`` array per kind and layer (dec_self rows zero-filled on the right): every row of a run
    without a beam, or the prefix all of a beam's surviving hypotheses share.

    Each step holds views into these arrays, so every attention matrix is held once, and no step's work
    grows with the history. Pages of a zero-filled array that no row touched take no memory, so a short
    output of a model with a long maximum costs what it uses.

    ``key_offset``: the dec_self keys that come before step 0's own (a decoder-only model's prefilled prompt of
    P - 1 positions: step t's row has ``key_offset + t + 1`` keys). With ``first`` (that prompt's own rows, per kind
    and layer ``[heads, P - 1, P - 1]``) each kind's arrays are the whole square ``[heads, P - 1 + max_len,
    P - 1 + max_len]``: the prompt's rows are copied in once and step t writes row ``P - 1 + t``, so the finished
    trace is these arrays themselves, not a second copy of a long prompt's square; ``first`` then holds views of it.
    """

    def __init__(self, max_len: int, dtype: type = np.float32, *, key_offset: int = 0,
                 first: dict[str, list[np.ndarray]] | None = None):
        self.max_len, self.dtype, self.key_offset = max_len, dtype, key_offset
        self.arrays: dict[str, list[np.ndarray]] = {}
        self.rows_before: dict[str, int] = {}  # per kind the first rows its arrays begin with
        for kind, layers in (first or {}).items():
            before = layers[0].shape[-2]
            side = before + max_len
            # a long prompt's rows fill most of the square at once: ordinary (huge) pages fill several times faster
            # than one 4 kB page fault at a time, and little of them is left unwritten
            make = np.zeros if before >= max_len else untouched_zeros
            self.arrays[kind] = [make((layer.shape[0], side, side), dtype) for layer in layers]
            for layer, array in enumerate(self.arrays[kind]):
                array[:, :before, :before] = layers[layer]
                layers[layer] = array[:, :before, :before]  # the caller's block is let go
            self.rows_before[kind] = before

    def add(self, index: int, attention: dict[str, list[np.ndarray]]) -> dict[str, list[np.ndarray]]:
        """Store step ``index``'s rows (host arrays, per kind and layer ``[1, heads, key_len]``); returns views
        of them."""
        return self.write(index, {kind: [layer[0] for layer in layers] for kind, layers in attention.items()})

    def write(self, index: int, rows: dict[str, list[np.ndarray]]) -> dict[str, list[np.ndarray]]:
        """Store step ``index``'s rows (per kind and layer ``[heads, key_len]``); returns views
        ``[1, heads, key_len]`` of them."""
        views = {}
        for kind, layers in rows.items():
            if kind not in self.arrays:
                key_len = self.key_offset + self.max_len if kind == "dec_self" else layers[0].shape[-1]
                self.arrays[kind] = [untouched_zeros((layer.shape[0], self.max_len, key_len), self.dtype)
                                     for layer in layers]
            views[kind] = []
            row = self.rows_before.get(kind, 0) + index
            for array, layer in zip(self.arrays[kind], layers):
                key_len = layer.shape[-1]
                array[:, row, :key_len] = layer
                views[kind].append(array[None, :, row, :key_len])
        return views

    def finish(self, length: int, steps: list["DecodeStep"]) -> dict[str, list[np.ndarray]]:
        """The ``[heads, length, key_len]`` arrays of the first ``length`` steps (dec_self: ``key_offset + length``
        keys).

        A run that stopped before ``max_len`` gets compact copies, made layer by layer, and ``steps`` (those
        whose rows are views into these arrays) move into them; the long arrays are then freed. A square begun with
        first rows is ``[heads, P - 1 + length, P - 1 + length]``, a view: the rows and keys after the run's are
        pages nothing wrote, which take no memory.
        """
        for kind, arrays in self.arrays.items():
            before = self.rows_before.get(kind)
            if before is not None:
                arrays[:] = [array[:, : before + length, : before + length] for array in arrays]
                continue
            for layer, array in enumerate(arrays):
                key_len = self.key_offset + length if kind == "dec_self" else array.shape[2]
                if length == self.max_len and key_len == array.shape[2]:
                    continue
                arrays[layer] = compact = np.ascontiguousarray(array[:, :length, :key_len])
                for step in steps:
                    if step.step < length:
                        width = step.attention[kind][layer].shape[-1]
                        step.attention[kind][layer] = compact[None, :, step.step, :width]
        return self.arrays
