"""What a decoder-only model's views add (no Qt, no torch): its trace is one ``dec_self`` square over the prompt's
P tokens and the continuation (``AttentionTrace.prompt_len``; docs/architectures.md#decoder-only), so decoding
step t is the query at row P − 1 + t, the prompt/continuation boundary lies before row and key P, a local layer's
sliding window blocks keys as the causal mask does, and query heads come in key/value groups."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from models.trace.records import AttentionTrace, DecodeStep, stack_rows

# The heatmap is never shorter than its rows' name (attnviz/gui/views/heatmap.py): the names are short, so that
# the window fits 1000 × 650 pixels
SEQUENCE_AXES = ("sequence (queries)", "sequence (keys)")  # the prompt, then the output
PREDICTED_AXIS = "input → predicted token"  # a decoder's rows labelled with the token each predicts


def step_offset(trace: AttentionTrace | None) -> int:
    """The row of decoding step 0: a decoder-only trace's first step is its prompt's last token (row P − 1);
    every other trace's is row 0."""
    if trace is None or not trace.prompt_len:
        return 0
    return trace.prompt_len - 1


def step_count(trace: AttentionTrace | None) -> int:
    """How many decoding steps a trace's rows hold (the step scrubber's length)."""
    if trace is None:
        return 0
    return max(0, len(trace.tgt_tokens) - step_offset(trace))


def after_a_prompt(first: DecodeStep, kind: str) -> bool:
    """A decoder-only model's streamed steps: the first step's self-attention row has the prompt's keys too (the
    map waits for the result, which holds the prompt's rows)."""
    return kind == "dec_self" and first.attention[kind][0].shape[-1] > 1


def boundary(trace: AttentionTrace, kind: str) -> int | None:
    """Where the prompt ends along both axes of a decoder-only map (None for the other models' maps)."""
    return trace.prompt_len if trace.prompt_len is not None and kind == "dec_self" else None


def thumbnail_boundary(trace: AttentionTrace, kind: str, *, side: int) -> float | None:
    """The boundary in a thumbnail's cells (one longer than ``side`` cells keeps every ⌈n / side⌉-th cell)."""
    prompt = boundary(trace, kind)
    if prompt is None:
        return None
    length = len(trace.tgt_tokens)
    return prompt / -(-length // side) if length > side else float(prompt)


def windowed(mask: np.ndarray | None, window: int) -> np.ndarray | None:
    """A causal ``[n, n]`` mask with a sliding window of ``window`` keys (0: none): the query at position p
    sees keys at positions > p − W, so the older ones are masked as the future is."""
    if mask is None or window <= 0:
        return mask
    rows, cols = np.indices(mask.shape)
    return mask & (cols > rows - window)


def layer_window(windows: tuple[int, ...], kind: str, layer: int) -> int:
    """The sliding window of ``layer`` (0: none) from the model's per-layer list (a decoder's self-attention)."""
    return windows[layer] if kind == "dec_self" and layer < len(windows) else 0


def group_size(kv_groups: tuple[int, ...], heads: int) -> int:
    """Query heads per key/value head (0: every head its own, nothing to draw) from the model's
    ``kv_groups()`` (the key/value head each query head reads)."""
    if len(kv_groups) != heads or not heads:
        return 0
    groups = len(set(kv_groups))
    return heads // groups if 1 <= groups < heads else 0


def head_names(heads: int, group: int) -> list[str]:
    """Column headers: ``H5`` (``H5·kv1`` where heads share key/value heads: the group it reads)."""
    if not group:
        return [f"H{head}" for head in range(heads)]
    return [f"H{head}·kv{head // group}" for head in range(heads)]


def prompt_row(trace: AttentionTrace, layer: int, row: int, head: int | None) -> np.ndarray:
    """One ``dec_self`` row's weights over the prompt's P keys (a head's, or the mean of the layer's heads)."""
    weights = trace.attention["dec_self"][layer][:, row, : trace.prompt_len]
    return weights[head] if head is not None else weights.mean(axis=0)


@dataclass(frozen=True)
class InputWords:
    """How the input bar names its boxes for one model: a decoder-only model has one prompt it continues (its
    box labelled "Prompt"), the other models a sentence they translate and a target to force."""

    label: str  # "" : no label before the text box
    placeholder: str
    forced: str  # the box of what forced decoding forces
    modes: str  # the mode box's tooltip
    max_len: str  # the length limit's tooltip


SENTENCE_WORDS = InputWords(
    label="", placeholder="Type a sentence; Enter runs it", forced="Target to force",
    modes="Greedy: the likeliest token each step. Beam: K hypotheses. Forced: your target.",
    max_len="Stop after this many output tokens")
PROMPT_WORDS = InputWords(
    label="Prompt", placeholder="Type a prompt; Enter continues it", forced="Continuation to force",
    modes="Greedy: the likeliest token each step. Beam: K continuations. Forced: your continuation.",
    max_len="Stop after this many continuation tokens")


def input_words(prompted: bool) -> InputWords:
    return PROMPT_WORDS if prompted else SENTENCE_WORDS


def prompt_columns(trace: AttentionTrace) -> AttentionTrace:
    """A decoder-only trace seen as an encoder-decoder's cross-attention, to compare with one: the rows of its
    decoding steps (the prompt's last token, then the continuation fed) over the prompt's P keys, as kind
    ``cross`` (queries the decoder's inputs, keys the source)."""
    first, prompt = step_offset(trace), trace.prompt_len or 0
    layers = [weights[:, first:, :prompt] for weights in trace.attention["dec_self"]]
    return AttentionTrace(list(trace.src_tokens), list(trace.tgt_tokens[first:]), attention={"cross": layers},
                          masks={"cross": trace.masks["dec_self"][first:, :prompt]},
                          ablated=tuple((("cross", layer, head) for kind, layer, head in trace.ablated
                                         if kind == "dec_self")))


def comparable(a: AttentionTrace, b: AttentionTrace, kind: str) -> tuple[AttentionTrace, AttentionTrace, str, str]:
    """Two traces as they can be compared at ``kind``: a decoder-only model beside one with cross-attention is
    its attention over the prompt (:func:`prompt_columns`), compared as cross-attention. Returns both traces,
    the kind to show and what a decoder-only side's pane title adds ("")."""
    prompted = [trace.prompt_len is not None for trace in (a, b)]
    if prompted[0] == prompted[1] or not all("cross" in trace.attention or trace.prompt_len is not None
                                                for trace in (a, b)):
        return a, b, kind, ""
    a, b = (prompt_columns(trace) if trace.prompt_len is not None else trace for trace in (a, b))
    return a, b, "cross", PROMPT_COLUMNS_NOTE


PROMPT_COLUMNS_NOTE = "decoder-only: its self-attention over the prompt"


def streamed_prompt_trace(labels, steps: list[DecodeStep], kind: str,
                          layer: int | None = None) -> AttentionTrace | None:
    """A decoder-only run's map while it decodes: the prompt's prefilled rows (``DecodeStep.first_rows`` of its first
    step), then one row per step so far, over the keys fed so far, labelled as the finished trace will be (the prompt's
    tokens, then the continuation's but the newest). None when the first step does not carry the prompt's rows.
    ``layer``: only that layer is assembled, the others stand in as read-only zeros of its shape that take no memory
    (a long prompt's square is copied at every redraw: one layer of it, not all)."""
    first, first_masks = steps[0].first_rows, steps[0].first_masks
    if not first or kind not in first or first_masks is None:
        return None
    prompt = first[kind][0].shape[1]  # S: the prompt but its last token
    keys = prompt + len(steps)
    layers = []
    for index, block in enumerate(first[kind]):
        if layer is not None and index != layer:
            layers.append(np.broadcast_to(np.zeros((), dtype=block.dtype), (block.shape[0], keys, keys)))
            continue
        rows = stack_rows([step.attention[kind][index][0] for step in steps], keys)  # [heads, steps, keys]
        square = np.zeros((block.shape[0], keys, keys), dtype=rows.dtype)
        square[:, :prompt, :prompt] = block
        square[:, prompt:] = rows
        layers.append(square)
    mask = np.zeros((keys, keys), dtype=bool)
    mask[:prompt, :prompt] = first_masks[kind]
    mask[prompt:] = stack_rows([np.asarray(step.masks[kind][:1], dtype=bool) for step in steps], keys)[0]
    tokens = list(labels.source) + [step.tokens[0] for step in steps[:-1]]
    return AttentionTrace(list(labels.source), tokens, attention={kind: layers}, masks={kind: mask},
                          prompt_len=len(labels.source))
