"""Greedy, beam and forced decoding on every architecture (tiny seeded random-weight models).

The reference for every trace is a single teacher-forced ``model.forward`` over the decoded tokens: the
KV cache, the no-cache recomputation and the beam's parent bookkeeping must all reproduce it.
"""

from __future__ import annotations

import functools
import os

import numpy as np
import pytest
import torch

from models import ARCHS, build_model, make_config
from models.nn.config import TRANSFORMER_ARCHS
from models.inference.decoding import Capture, beam_search, forced, forced_step_by_step, greedy, run
from models.nn.intermediates import keeping_attention, trace_from_intermediates
from models.trace.records import AttentionTrace, DecodeStep

SRC_VOCAB, TGT_VOCAB = 13, 11
PAD, BOS, EOS = 0, 2, 3
SOURCE = [5, 9, 6, 12, 7, EOS]
MAX_LEN = 7
ATOL = 1e-5


def tiny_model(arch: str, seed: int = 0):
    if arch in TRANSFORMER_ARCHS:
        sizes = {"d_model": 16, "heads": 2, "d_ff": 24, "encoder_layers": 2, "decoder_layers": 2, "max_len": 24,
                 "dropout": 0.0}
    else:
        sizes = {"hidden": 16, "max_len": 24, "dropout": 0.0, "decoder_layers": 2, "decoder_heads": 2}
    torch.manual_seed(seed)
    return build_model(make_config(arch, SRC_VOCAB, TGT_VOCAB, **sizes)).eval()


def output_layer(model) -> torch.nn.Linear:
    return model.output if hasattr(model, "output") else model.decoder.output


def with_eos_bias(model, bias: float):
    """Shift the end token's logit so that a random model stops (or never stops)."""
    with torch.no_grad():
        output_layer(model).bias[EOS] += bias
    return model


def never_ending_model(arch: str, seed: int):
    return with_eos_bias(tiny_model(arch, seed=seed), -1e4)


def label(token_id: int) -> str:
    return f"t{token_id}"


def source_label(token_id: int) -> str:
    return f"s{token_id}"


LABELS = {"label": label, "source_tokens": [source_label(i) for i in SOURCE]}


def forward_trace(model, token_ids: list[int]) -> AttentionTrace:
    """The trace of one teacher-forced forward pass over ``[bos] + token_ids[:-1]``."""
    tgt_in = [BOS] + list(token_ids[:-1])
    with torch.no_grad():
        _, inter = model(torch.tensor([SOURCE]), torch.tensor([tgt_in]), need_weights=True)
    return trace_from_intermediates(inter, 0, [source_label(i) for i in SOURCE], [label(i) for i in tgt_in])


def assert_same_trace(actual: AttentionTrace, expected: AttentionTrace, model) -> None:
    assert actual.src_tokens == expected.src_tokens
    assert actual.tgt_tokens == expected.tgt_tokens
    assert sorted(actual.attention) == sorted(expected.attention) == sorted(model.kinds)
    assert sorted(actual.masks) == sorted(expected.masks)
    for kind in actual.attention:
        assert len(actual.attention[kind]) == len(expected.attention[kind])
        for layer, (a, e) in enumerate(zip(actual.attention[kind], expected.attention[kind])):
            assert a.shape == e.shape, (kind, layer)
            np.testing.assert_allclose(a, e, atol=ATOL, rtol=0, err_msg=f"{kind} layer {layer}")
        assert actual.masks[kind].dtype == np.bool_
        np.testing.assert_array_equal(actual.masks[kind], expected.masks[kind], err_msg=f"{kind} mask")
    if "dec_self" in actual.masks:
        length = len(actual.tgt_tokens)
        np.testing.assert_array_equal(actual.masks["dec_self"], np.tril(np.ones((length, length), dtype=bool)))


@functools.cache
def eos_ending_model(arch: str):
    """A seeded model whose greedy output ends with the end token after at least three other tokens.

    Random models rarely stop by themselves. Raising the end token's logit by ``b`` leaves greedy's path
    unchanged until the first step whose margin (best log-probability minus the end token's) is below
    ``b``; so ``b`` is set just above a margin that is lower than every earlier one.
    """
    for seed in range(20):
        model = tiny_model(arch, seed=seed)
        steps, results = run(greedy(model, SOURCE, Capture(**LABELS, max_len=MAX_LEN, top_k=TGT_VOCAB)))
        if results[0].token_ids[-1] == EOS and len(steps) >= 4:
            return model, results[0]
        margins = [float(np.log(step.top_probs[0, 0]) - np.log(step.top_probs[0, list(step.top_ids[0]).index(EOS)]))
                   for step in steps]
        for stop in range(3, len(margins)):
            gap = min(margins[:stop]) - margins[stop]
            if gap > 0.02:
                model = with_eos_bias(model, margins[stop] + gap / 2)
                _, results = run(greedy(model, SOURCE, Capture(**LABELS, max_len=MAX_LEN)))
                assert results[0].token_ids[-1] == EOS and len(results[0].token_ids) == stop + 1
                return model, results[0]
    pytest.fail(f"no seeded {arch} model stops after 3-{MAX_LEN - 1} tokens")


# ---------------------------------------------------------------------------------------------------
# greedy: KV cache == recomputation == one full forward


@pytest.mark.parametrize("arch", ARCHS)
def test_cached_greedy_equals_recomputation_and_full_forward(arch):
    model = tiny_model(arch, seed=5 if arch == "rnn-luong" else 1)  # seed 1's rnn-luong ends at once
    cached_steps, cached = run(greedy(model, SOURCE, Capture(**LABELS, max_len=MAX_LEN)))
    plain_steps, plain = run(greedy(model, SOURCE, Capture(**LABELS, max_len=MAX_LEN, use_cache=False)))
    assert len(cached) == len(plain) == 1
    assert cached[0].token_ids == plain[0].token_ids
    assert len(cached[0].token_ids) == len(cached_steps) >= 3
    assert PAD not in cached[0].token_ids
    for a, b in zip(cached_steps, plain_steps):
        np.testing.assert_allclose(a.probabilities, b.probabilities, atol=ATOL, rtol=0)
        np.testing.assert_allclose(a.top_probs, b.top_probs, atol=ATOL, rtol=0)
    reference = forward_trace(model, cached[0].token_ids)
    assert_same_trace(cached[0].trace, reference, model)
    assert_same_trace(plain[0].trace, reference, model)
    assert cached[0].log_prob == pytest.approx(sum(np.log(s.probability) for s in cached_steps), abs=1e-5)


@pytest.mark.parametrize("arch", ARCHS)
def test_cached_greedy_equals_full_forward_when_the_output_ends(arch):
    model, result = eos_ending_model(arch)
    assert_same_trace(result.trace, forward_trace(model, result.token_ids), model)
    _, plain = run(greedy(model, SOURCE, Capture(**LABELS, max_len=MAX_LEN, use_cache=False)))
    assert plain[0].token_ids == result.token_ids


@pytest.mark.parametrize("arch", ARCHS)
def test_greedy_logits_equal_forward_logits(arch):
    """Each step's distribution is the teacher-forced forward's at that position."""
    model = tiny_model(arch, seed=2)
    steps, results = run(greedy(model, SOURCE, Capture(**LABELS, max_len=MAX_LEN)))
    tgt_in = [BOS] + results[0].token_ids[:-1]
    with torch.no_grad():
        logits, _ = model(torch.tensor([SOURCE]), torch.tensor([tgt_in]))
    probabilities = torch.softmax(logits[0], dim=-1).numpy()
    for position, step in enumerate(steps):
        assert step.step == position
        assert step.token_id == results[0].token_ids[position]
        assert step.probability == pytest.approx(probabilities[position, step.token_id], abs=ATOL)


# ---------------------------------------------------------------------------------------------------
# beam = 1 is greedy; forced on greedy's output reproduces it


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("ends", [False, True], ids=["max_len", "eos"])
def test_beam_of_one_is_greedy(arch, ends):
    model = eos_ending_model(arch)[0] if ends else never_ending_model(arch, seed=4)
    greedy_steps, greedy_results = run(greedy(model, SOURCE, Capture(**LABELS, max_len=MAX_LEN)))
    beam_steps, beam_results = run(beam_search(model, SOURCE, Capture(**LABELS, max_len=MAX_LEN), beam=1,
                                               length_penalty=0.0))
    assert len(beam_steps) == len(greedy_steps)
    assert beam_results[0].token_ids == greedy_results[0].token_ids
    assert (beam_results[0].token_ids[-1] == EOS) == ends
    for g, b in zip(greedy_steps, beam_steps):
        np.testing.assert_array_equal(b.token_ids, g.token_ids)
        np.testing.assert_array_equal(b.probabilities, g.probabilities)
        np.testing.assert_array_equal(b.scores, g.scores)
        np.testing.assert_array_equal(b.parents, [0])
        np.testing.assert_array_equal(b.finished, g.finished)
    assert beam_results[0].log_prob == greedy_results[0].log_prob
    assert beam_results[0].score == greedy_results[0].score == greedy_results[0].log_prob  # no length penalty
    assert greedy_results[0].log_prob == pytest.approx(float(greedy_steps[-1].scores[0]))
    # The default length penalty changes the ranking score only.
    _, penalised = run(beam_search(model, SOURCE, Capture(**LABELS, max_len=MAX_LEN), beam=1))
    length = len(greedy_results[0].token_ids)
    assert penalised[0].log_prob == greedy_results[0].log_prob
    assert penalised[0].score == pytest.approx(greedy_results[0].log_prob / ((5 + length) / 6) ** 0.6)


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("ends", [False, True], ids=["max_len", "eos"])
def test_forced_on_greedy_output_reproduces_greedy(arch, ends):
    model = eos_ending_model(arch)[0] if ends else never_ending_model(arch, seed=5)
    greedy_steps, greedy_results = run(greedy(model, SOURCE, Capture(**LABELS, max_len=MAX_LEN)))
    tokens = greedy_results[0].token_ids
    assert (tokens[-1] == EOS) == ends
    target = tokens[:-1] if ends else tokens
    forced_steps, forced_results = run(forced(model, SOURCE, target, Capture(**LABELS)))
    assert forced_results[0].token_ids == target + [EOS]
    assert len(forced_steps) == len(target) + 1
    for g, f in zip(greedy_steps, forced_steps):  # the steps greedy took
        assert f.token_id == g.token_id
        assert f.rank == 0
        np.testing.assert_allclose(f.probabilities, g.probabilities, atol=ATOL, rtol=0)
        np.testing.assert_allclose(f.top_probs, g.top_probs, atol=ATOL, rtol=0)
        np.testing.assert_array_equal(f.top_ids, g.top_ids)
    assert_same_trace(forced_results[0].trace, forward_trace(model, target + [EOS]), model)
    if not ends:  # greedy never chose the end token forced decoding appends
        assert forced_steps[-1].token_id == EOS and forced_steps[-1].rank > 0


FORCED_TARGET = [4, 7, 7, 10, 5, 9, 4, 8]  # not what a random model would choose: ranks above 0 too


@pytest.mark.parametrize("arch", ARCHS)
def test_one_pass_forced_equals_step_by_step_forced(arch):
    """The one teacher-forced pass gives every step's numbers and the trace the incremental loop gives."""
    model = tiny_model(arch, seed=7)
    one_steps, (one,) = run(forced(model, SOURCE, FORCED_TARGET, Capture(**LABELS, top_k=5)))
    loop_steps, (loop,) = run(forced_step_by_step(model, SOURCE, FORCED_TARGET, Capture(**LABELS, top_k=5)))
    assert one.token_ids == loop.token_ids == FORCED_TARGET + [EOS] and one.tokens == loop.tokens
    assert one.log_prob == pytest.approx(loop.log_prob, abs=ATOL) and one.score == pytest.approx(loop.score, abs=ATOL)
    assert one.rows == loop.rows and len(one_steps) == len(loop_steps) == len(FORCED_TARGET) + 1
    assert max(int(step.rank) for step in loop_steps) > 0
    for a, b in zip(one_steps, loop_steps):
        assert (a.step, a.tokens, a.top_tokens) == (b.step, b.tokens, b.top_tokens)
        np.testing.assert_array_equal(a.token_ids, b.token_ids)
        np.testing.assert_array_equal(a.ranks, b.ranks)
        np.testing.assert_array_equal(a.top_ids, b.top_ids)
        np.testing.assert_array_equal(a.finished, b.finished)
        np.testing.assert_array_equal(a.parents, b.parents)
        np.testing.assert_allclose(a.probabilities, b.probabilities, atol=ATOL, rtol=0)
        np.testing.assert_allclose(a.top_probs, b.top_probs, atol=ATOL, rtol=0)
        np.testing.assert_allclose(a.scores, b.scores, atol=ATOL, rtol=0)
        assert sorted(a.attention) == sorted(b.attention) and sorted(a.masks) == sorted(b.masks)
        for kind in a.attention:
            np.testing.assert_array_equal(a.masks[kind], b.masks[kind])
            for x, y in zip(a.attention[kind], b.attention[kind]):
                np.testing.assert_allclose(x, y, atol=ATOL, rtol=0)
    assert_same_trace(one.trace, loop.trace, model)
    for kind in one.trace.masks:
        np.testing.assert_array_equal(one.trace.masks[kind], loop.trace.masks[kind])


def mapping_at(address: int) -> dict[str, str] | None:
    """The fields of the memory mapping (Linux's /proc/self/smaps) that holds ``address``, if one does."""
    found = None
    with open("/proc/self/smaps") as smaps:
        for line in smaps:
            start, _, end = line.split(" ", 1)[0].partition("-")
            if end and all(c in "0123456789abcdef" for c in start + end):
                if found is not None:
                    return found
                found = {} if int(start, 16) <= address < int(end, 16) else None
            elif found is not None and ":" in line:
                key, _, value = line.partition(":")
                found[key] = value.strip()
    return found


def resident_of(array: np.ndarray) -> float:
    """Megabytes resident of the memory mapping that holds ``array``."""
    found = mapping_at(array.__array_interface__["data"][0])
    assert found is not None, "no mapping holds the array"
    return int(found["Rss"].split()[0]) / 1024


def resident_mb() -> float:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


@pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="reads the resident size from /proc")
def test_a_row_buffer_costs_the_rows_written_not_its_capacity():
    """The first rows written into a 1,024-step buffer make a few pages resident, not the 16 MB it may
    hold (numpy asks for huge pages on large arrays, and a 2 MB huge page is resident at its first write)."""
    from models.nn.intermediates import RowBuffer

    def write(rows: RowBuffer) -> None:
        for index in range(4):
            rows.add(index, {"dec_self": [torch.rand(1, 8, index + 1)], "cross": [torch.rand(1, 8, 1024)]})

    write(RowBuffer(8, np.float16))  # the code that runs is paged in before measuring
    rows = RowBuffer(1024, np.float16)
    before = resident_mb()
    write(rows)
    assert resident_mb() - before < 2.0  # 32 MB of capacity; 4 rows × 8 heads touch at most 64 pages each
    assert rows.arrays["cross"][0].shape == (8, 1024, 1024) and rows.arrays["cross"][0][3, 2, 5] != 0


@pytest.mark.skipif(not os.path.exists("/proc/self/smaps"), reason="reads the process' mappings from /proc")
def test_a_beam_gives_back_the_rows_of_settled_steps():
    """A beam step's K rows (64 KB here) leave memory once every step of their chunk has settled on one row,
    which moved into the shared prefix: 256 steps cost one row each, not four; a chunk still looked into
    stays readable."""
    from models.nn.intermediates import BeamRows

    rows = BeamRows(1024, 4, np.float16)
    parents = np.arange(4)
    weights = np.random.default_rng(0).random((4, 8, 1024), dtype=np.float32)  # host rows, as a step's transfer gives
    steps = [rows.add(index, {"cross": [weights]}, parents) for index in range(256)]
    chunks = [rows.chunks[("cross", 0, chunk)] for chunk in range(256 // BeamRows.CHUNK)]
    assert sum(resident_of(chunk) for chunk in chunks) >= 16  # 256 steps × 4 rows × 8 heads × 1,024 keys × 2 B
    addresses = [chunk.__array_interface__["data"][0] for chunk in chunks]
    kept_view, first = steps[3]["cross"][0], steps[3]["cross"][0].copy()
    settled = [rows.settle(index, index % 4, attention) for index, attention in enumerate(steps)]
    for index in (0, 100, 255):
        np.testing.assert_array_equal(settled[index]["cross"][0][0], steps[index]["cross"][0][index % 4])
    del steps, chunks
    rows.release_through(255)
    assert not rows.chunks
    assert mapping_at(addresses[0]) is not None  # kept_view still looks into the first chunk: still there
    np.testing.assert_array_equal(kept_view, first)
    assert all(mapping_at(address) is None for address in addresses[1:])
    assert resident_of(rows.shared.arrays["cross"][0]) < 4.5  # the one row each step settled on
    np.testing.assert_array_equal(rows.shared.arrays["cross"][0][:, 7], settled[7]["cross"][0][0])


@pytest.mark.parametrize("arch", ["transformer-preln", "gru-transformer-decoder"])
def test_each_attention_matrix_is_held_once(arch):
    """A step's attention row is a view into its result's trace, for forced and greedy decoding (one run
    to ``max_len``, one that stopped early and so got compact arrays)."""
    model = never_ending_model(arch, seed=2)
    runs = [run(forced(model, SOURCE, FORCED_TARGET)), run(greedy(model, SOURCE, Capture(max_len=MAX_LEN))),
            run(greedy(eos_ending_model(arch)[0], SOURCE, Capture(max_len=MAX_LEN + 5)))]
    assert len(runs[2][0]) < MAX_LEN + 5
    for steps, (result,) in runs:
        for arrays in result.trace.attention.values():
            assert all(array.flags.c_contiguous for array in arrays)
        for index, step in enumerate(steps):
            for kind, layers in step.attention.items():
                for layer, row in enumerate(layers):
                    stacked = result.trace.attention[kind][layer]
                    assert np.shares_memory(row, stacked), (kind, layer, index)
                    np.testing.assert_array_equal(row[0], stacked[:, index, : row.shape[-1]])


@pytest.mark.parametrize("arch", ["transformer-preln", "gru-transformer-decoder", "gru-additive"])
@pytest.mark.parametrize("mode", ["greedy", "beam", "forced"])
def test_a_float16_trace_keeps_the_numbers_to_three_digits(arch, mode):
    """The app keeps long runs at half precision: every mode gives the same tokens and probabilities, and
    the same attention to three digits, in float16 arrays (the steps' rows too)."""
    model = never_ending_model(arch, seed=3)
    decode = {"greedy": lambda capture: greedy(model, SOURCE, capture),
              "beam": lambda capture: beam_search(model, SOURCE, capture, beam=3),
              "forced": lambda capture: forced(model, SOURCE, FORCED_TARGET, capture)}[mode]
    half_steps, (half, *_) = run(decode(Capture(max_len=MAX_LEN, dtype=np.float16)))
    full_steps, (full, *_) = run(decode(Capture(max_len=MAX_LEN)))
    assert half.token_ids == full.token_ids and half.log_prob == pytest.approx(full.log_prob, abs=1e-6)
    assert half.trace.half_precision and not full.trace.half_precision
    for kind in full.trace.kinds:
        for h, f in zip(half.trace.attention[kind], full.trace.attention[kind], strict=True):
            assert h.dtype == np.float16 and f.dtype == np.float32
            np.testing.assert_allclose(h, f, atol=1e-3, rtol=0)
    for h, f in zip(half_steps, full_steps, strict=True):
        for kind, layers in f.attention.items():
            for half_row, full_row in zip(h.attention[kind], layers, strict=True):
                assert half_row.dtype == np.float16
                np.testing.assert_allclose(half_row, full_row, atol=1e-3, rtol=0)


@pytest.mark.parametrize("arch", ["transformer-preln", "gru-transformer-decoder"])
def test_a_half_precision_pass_keeps_each_layer_as_float16_as_it_finishes(arch):
    """Inside ``keeping_attention(float16)`` the model hands back float16 weights layer by layer (so a long
    pass never holds every layer's float32 weights); outside it, float32 bit for bit as before."""
    model = tiny_model(arch, seed=4)
    tgt_in = torch.tensor([[BOS] + FORCED_TARGET])
    with torch.no_grad():
        logits, plain = model(torch.tensor([SOURCE]), tgt_in, need_weights=True)
        with keeping_attention(np.float16):
            half_logits, half = model(torch.tensor([SOURCE]), tgt_in, need_weights=True)
        with keeping_attention(np.float32):
            _, full = model(torch.tensor([SOURCE]), tgt_in, need_weights=True)
    assert torch.equal(logits, half_logits)  # what is kept does not change what is computed
    for kind, layers in plain.attention.items():
        for weights, half_weights, full_weights in zip(layers, half.attention[kind], full.attention[kind], strict=True):
            assert weights.dtype == torch.float32 and half_weights.dtype == torch.float16
            assert torch.equal(weights, full_weights) and torch.equal(weights.half(), half_weights)


@pytest.mark.parametrize("arch", ["transformer-preln", "gru-additive"])
def test_forced_reports_rank_of_a_non_greedy_target(arch):
    model = tiny_model(arch, seed=6)
    greedy_steps, _ = run(greedy(model, SOURCE, Capture(**LABELS, max_len=3)))
    second = int(greedy_steps[0].top_ids[0, 1])  # the runner-up of the first step
    steps, _ = run(forced(model, SOURCE, [second]))
    assert steps[0].rank == 1
    assert steps[0].probability == pytest.approx(float(greedy_steps[0].top_probs[0, 1]), abs=ATOL)
    assert steps[0].probability < greedy_steps[0].probability


# ---------------------------------------------------------------------------------------------------
# beam search of width 4


def _follow(steps: list[DecodeStep], row: int) -> tuple[list[int], float]:
    """Tokens (up to the end token) and summed log-probability of the hypothesis in ``row`` of the last
    step, found by walking the parents backwards."""
    path = []
    for step in reversed(steps):
        path.append((int(step.token_ids[row]), float(step.probabilities[row])))
        row = int(step.parents[row])
    path.reverse()
    tokens = [token for token, _ in path]
    if EOS in tokens:
        path = path[: tokens.index(EOS) + 1]
    return [token for token, _ in path], sum(float(np.log(p)) for _, p in path)


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("ends", [False, True], ids=["max_len", "eos"])
def test_beam_of_four(arch, ends):
    model = eos_ending_model(arch)[0] if ends else never_ending_model(arch, seed=7)
    steps, results = run(beam_search(model, SOURCE, Capture(**LABELS, max_len=MAX_LEN), beam=4))
    assert len(results) == 4
    scores = [result.score for result in results]
    assert scores == sorted(scores, reverse=True)
    previous_size = 1
    for index, step in enumerate(steps):
        assert step.step == index
        assert step.beam_size == 4
        assert ((0 <= step.parents) & (step.parents < previous_size)).all()
        previous_size = step.beam_size
        assert np.all(np.diff(step.scores) <= 1e-12)  # rows come out best first
    distinct = {tuple(result.token_ids) for result in results}
    assert len(distinct) == 4
    for result in results:
        assert PAD not in result.token_ids
        # Each result's own trace is the teacher-forced forward over its own tokens.
        assert_same_trace(result.trace, forward_trace(model, result.token_ids), model)
        length = len(result.token_ids)
        assert result.score == pytest.approx(result.log_prob / ((5 + length) / 6) ** 0.6)
    # Following parents from the last step's rows reproduces the results and their log-probabilities.
    followed = {}
    for row in range(4):
        tokens, log_prob = _follow(steps, row)
        followed[tuple(tokens)] = log_prob
    assert set(followed) == distinct
    for result in results:
        assert result.log_prob == pytest.approx(followed[tuple(result.token_ids)], abs=1e-4)
    if ends:
        assert any(result.token_ids[-1] == EOS for result in results)
    else:
        assert all(len(result.token_ids) == MAX_LEN for result in results)


@pytest.mark.parametrize("arch", ["transformer-preln", "gru-additive"])
def test_beam_results_are_ranked_by_penalised_score(arch):
    """A strong length penalty favours long hypotheses: the ranking differs from the raw log-probability's."""
    model = eos_ending_model(arch)[0]
    _, results = run(beam_search(model, SOURCE, Capture(**LABELS, max_len=MAX_LEN), beam=4, length_penalty=3.0))
    scores = [result.score for result in results]
    assert scores == sorted(scores, reverse=True)
    for result in results:
        assert result.score == pytest.approx(result.log_prob / ((5 + len(result.token_ids)) / 6) ** 3.0)
    log_probs = [result.log_prob for result in results]
    assert log_probs != sorted(log_probs, reverse=True)  # so the sort above was not a no-op


@pytest.mark.parametrize("arch", ["transformer-postln", "gru-transformer-decoder", "gru-causal-scaled-dot"])
def test_cached_beam_equals_recomputed_beam(arch):
    model = eos_ending_model(arch)[0]
    cached_steps, cached = run(beam_search(model, SOURCE, Capture(**LABELS, max_len=MAX_LEN), beam=3))
    plain_steps, plain = run(beam_search(model, SOURCE, Capture(**LABELS, max_len=MAX_LEN, use_cache=False), beam=3))
    assert [r.token_ids for r in cached] == [r.token_ids for r in plain]
    for a, b in zip(cached_steps, plain_steps):
        np.testing.assert_array_equal(a.parents, b.parents)
        np.testing.assert_allclose(a.scores, b.scores, atol=1e-5, rtol=0)
    for a, b in zip(cached, plain):
        assert_same_trace(a.trace, b.trace, model)


def test_mask_rows_that_allow_every_key_share_one_read_only_array():
    """One sentence has no padding: its steps' mask rows are views of one all-True array (a small array per
    step and kind, kept for the whole run, kept a long beam search's freed memory from being reused)."""
    model = never_ending_model("transformer-preln", seed=4)
    capture = Capture(max_len=MAX_LEN)
    runs = (run(beam_search(model, SOURCE, capture, beam=3)), run(greedy(model, SOURCE, capture)))
    for steps, _ in runs:
        rows = [step.masks[kind] for step in steps for kind in ("dec_self", "cross")]
        assert all(row.all() and not row.flags.writeable for row in rows)
        assert all(np.shares_memory(row, rows[0]) for row in rows)
        assert [step.masks["dec_self"].shape for step in steps] == [(step.beam_size, step.step + 1) for step in steps]


def held_bytes(*arrays: np.ndarray) -> int:
    """Bytes of the distinct memory blocks behind ``arrays`` (a view counts as the block it looks into)."""
    blocks = {}
    for array in arrays:
        while isinstance(array.base, np.ndarray):
            array = array.base
        blocks[id(array)] = array.nbytes
    return sum(blocks.values())


@pytest.mark.parametrize("arch", ["transformer-preln", "gru-transformer-decoder", "gru-additive"])
def test_a_beam_holds_each_attention_row_once(arch):
    """A beam search keeps only the rows the final hypotheses pass through, builds the best hypothesis'
    trace (the steps only it passed through then look into it) and the others' only when asked for; each
    of those equals the teacher-forced forward over its tokens."""
    model = never_ending_model(arch, seed=11)
    steps, results = run(beam_search(model, SOURCE, Capture(**LABELS, max_len=20), beam=3))
    live = set(range(3))  # the rows at each step that some final hypothesis passes through
    for step in reversed(steps):
        if len(live) == 1:  # every hypothesis passes through this row: the step keeps no other
            assert list(step.kept) == sorted(live), step.step
            for row in set(range(step.beam_size)) - live:
                with pytest.raises(KeyError, match="no finished hypothesis descends from it"):
                    step.attention_row(model.kinds[-1], 0, row)
        else:
            assert step.kept is None, step.step
        live = {int(step.parents[row]) for row in live}
    assert any(step.kept is not None for step in steps)  # the search did let go of rows
    best = results[0]
    rows = [array for step in steps for layers in step.attention.values() for array in layers]

    def traces(*chosen) -> list[np.ndarray]:
        return [array for result in chosen for kind in ("dec_self", "cross") if kind in result.trace.attention
                for array in result.trace.attention[kind]]

    shared = [(step, row) for step, row in zip(best.steps, best.rows) if step.kept is not None]
    assert shared
    for step, row in shared:
        for kind, layers in step.attention.items():
            for layer, weights in enumerate(layers):
                assert np.shares_memory(weights, best.trace.attention[kind][layer])
                np.testing.assert_array_equal(step.attention_row(kind, layer, row),
                                              best.trace.attention[kind][layer][:, step.step, : weights.shape[-1]])
    with_best = held_bytes(*rows, *traces(best))
    assert with_best < held_bytes(*rows) + held_bytes(*traces(best))
    assert held_bytes(*rows, *traces(*results)) > with_best  # the others were built just now
    for result in results:
        assert_same_trace(result.trace, forward_trace(model, result.token_ids), model)


# ---------------------------------------------------------------------------------------------------
# max_len and the DecodeStep fields


@pytest.mark.parametrize("arch", ARCHS)
def test_max_len_stops_decoding(arch):
    model = never_ending_model(arch, seed=8)
    steps, results = run(greedy(model, SOURCE, Capture(**LABELS, max_len=5)))
    assert len(steps) == 5 and len(results[0].token_ids) == 5 and EOS not in results[0].token_ids
    steps, results = run(beam_search(model, SOURCE, Capture(**LABELS, max_len=4), beam=2))
    assert len(steps) == 4 and all(len(result.token_ids) == 4 for result in results)
    steps, _ = run(greedy(model, SOURCE, Capture(**LABELS, max_len=1000)))  # capped by the model's own max_len
    assert len(steps) == model.config.max_len


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("mode", ["greedy", "beam", "forced"])
def test_decode_step_fields(arch, mode):
    model = tiny_model(arch, seed=9)
    top_k = 5
    if mode == "greedy":
        generator = greedy(model, SOURCE, Capture(label=label, max_len=MAX_LEN, top_k=top_k))
    elif mode == "beam":
        generator = beam_search(model, SOURCE, Capture(label=label, max_len=MAX_LEN, top_k=top_k), beam=3)
    else:
        generator = forced(model, SOURCE, [4, 5, 6, 7], Capture(label=label, top_k=top_k))
    steps, _ = run(generator)
    if arch in TRANSFORMER_ARCHS or arch == "gru-transformer-decoder":
        heads = {"dec_self": [2, 2], "cross": [2, 2]}  # per layer
    else:
        heads = {} if arch == "gru-none" else {"cross": [1]}  # one layer, one head
    for index, step in enumerate(steps):
        k = step.beam_size
        assert k == (3 if mode == "beam" else 1)
        assert step.token_ids.shape == step.probabilities.shape == step.ranks.shape == (k,)
        assert step.parents.shape == step.scores.shape == step.finished.shape == (k,)
        assert step.top_ids.shape == step.top_probs.shape == (k, top_k)
        assert step.tokens == [label(int(t)) for t in step.token_ids]
        assert step.top_tokens == [[label(int(t)) for t in row] for row in step.top_ids]
        assert ((0 <= step.probabilities) & (step.probabilities <= 1)).all()
        assert ((0 <= step.top_probs) & (step.top_probs <= 1)).all()
        assert (np.diff(step.top_probs, axis=1) <= 0).all()  # sorted descending
        assert (step.top_probs.sum(axis=1) <= 1 + 1e-6).all()
        assert (step.ranks >= 0).all()
        frozen = np.zeros(k, dtype=bool) if index == 0 else steps[index - 1].finished[step.parents]
        for row in range(k):
            if frozen[row]:  # a finished hypothesis, extended by padding at no cost
                assert step.token_ids[row] == PAD and step.probabilities[row] == 1 and step.ranks[row] == 0
                assert step.finished[row] and step.scores[row] == steps[index - 1].scores[step.parents[row]]
            elif step.ranks[row] < top_k:  # the chosen token sits at its rank among the alternatives
                assert step.top_ids[row, step.ranks[row]] == step.token_ids[row]
                assert step.top_probs[row, step.ranks[row]] == pytest.approx(step.probabilities[row], abs=1e-6)
        if mode == "greedy":
            assert step.rank == 0 and step.token_id == step.top_ids[0, 0]
        assert sorted(step.attention) == sorted(step.masks) == sorted(heads)
        held = k if step.kept is None else len(step.kept)  # a beam lets go of rows nothing descends from
        for kind, layers in step.attention.items():
            key_len = index + 1 if kind == "dec_self" else len(SOURCE)
            assert len(layers) == len(heads[kind])
            for layer, count in zip(layers, heads[kind]):
                assert layer.shape == (held, count, key_len)
                np.testing.assert_allclose(layer.sum(axis=-1), 1.0, atol=1e-5)
            assert step.masks[kind].shape == (k, key_len) and step.masks[kind].dtype == np.bool_


def test_key_value_cache_grows_by_doubling_and_follows_beam_parents():
    from models.nn.base import LayerCache

    torch.manual_seed(8)
    cache, keys, values = LayerCache(), [], []
    rooms = set()
    for _ in range(40):
        k, v = torch.randn(3, 2, 1, 4), torch.randn(3, 2, 1, 4)
        keys.append(k)
        values.append(v)
        all_k, all_v = cache.extend_self(k, v)
        rooms.add(cache.room_k.data_ptr())
        torch.testing.assert_close(all_k, torch.cat(keys, dim=2), atol=0, rtol=0)
        torch.testing.assert_close(all_v, torch.cat(values, dim=2), atol=0, rtol=0)
    assert len(rooms) <= 3  # 16, then 34, then 70 positions: not one buffer per step
    parents = torch.tensor([2, 0, 0])
    moved = cache.reorder(parents)
    torch.testing.assert_close(moved.self_k, torch.cat(keys, dim=2)[parents], atol=0, rtol=0)
    before = moved.room_k.data_ptr()
    moved.extend_self(torch.zeros(3, 2, 1, 4), torch.zeros(3, 2, 1, 4))
    assert moved.room_k.data_ptr() == before and moved.self_k.shape[2] == 41
    calls = []
    project = lambda: calls.append(1) or (torch.ones(1), torch.zeros(1))  # noqa: E731
    first = cache.cross_kv(project)
    assert cache.cross_kv(project)[0] is first[0] and len(calls) == 1  # projected once, then cached


def test_a_beam_reorder_copies_into_the_buffers_the_last_one_left():
    """Two reorders in a row allocate nothing new: the second writes into the first's source buffers
    (a new buffer per step left the heap of a 1,024-step beam search in pieces: 2 GB resident for 0.3 GB
    of data). The source side of a beam over one sentence is not copied while the row count stays."""
    from models.nn.base import DecoderState, LayerCache

    torch.manual_seed(9)
    prefix_k, prefix_v = torch.randn(3, 2, 5, 4), torch.randn(3, 2, 5, 4)
    cache = LayerCache(cross_k=torch.randn(3, 2, 6, 4), cross_v=torch.randn(3, 2, 6, 4))
    cache.extend_self(prefix_k, prefix_v)
    state = DecoderState(memory=torch.randn(3, 6, 8), src_mask=torch.ones(3, 1, 1, 6, dtype=torch.bool), caches=[cache])
    first, second = torch.tensor([2, 0, 0]), torch.tensor([1, 1, 2])
    buffers = (cache.room_k.data_ptr(), cache.room_v.data_ptr())
    once = state.reorder(first, one_source=True)
    twice = once.reorder(second, one_source=True)
    assert (twice.caches[0].room_k.data_ptr(), twice.caches[0].room_v.data_ptr()) == buffers
    torch.testing.assert_close(twice.caches[0].self_k, prefix_k[first][second], atol=0, rtol=0)
    torch.testing.assert_close(twice.caches[0].self_v, prefix_v[first][second], atol=0, rtol=0)
    assert twice.memory is state.memory and twice.caches[0].cross_k is cache.cross_k
    fewer = twice.reorder(torch.tensor([0, 2]), one_source=True)  # a beam that lost a row copies
    assert fewer.memory.shape[0] == fewer.caches[0].cross_k.shape[0] == fewer.caches[0].room_k.shape[0] == 2
    other = state.reorder(first)  # rows of different sources are always followed
    torch.testing.assert_close(other.memory, state.memory[first], atol=0, rtol=0)


def test_trace_size_is_what_a_forced_run_keeps_and_bounds_greedy_and_beam(random_checkpoint):
    from models.storage.checkpoint import load_checkpoint
    from models.inference.decoding import finish
    from models.inference.translator import Translator

    translator = Translator(load_checkpoint(random_checkpoint), "cpu")
    source = translator.source("abcd")
    target = translator.target("abc")

    def kept(result) -> int:
        return sum(array.nbytes for arrays in result.trace.attention.values() for array in arrays)

    (forced_result,) = finish(translator.decode(source, mode="forced", target_ids=target))
    assert kept(forced_result) == translator.trace_size(source, mode="forced", target_ids=target) == 4 * 2 * 4 * (
        5 * 5 + 4 * 4 + 4 * 5)  # 2 layers × 4 heads: encoder 5 × 5, decoder 4 × 4, cross 4 × 5 (float32)
    for mode in ("greedy", "beam"):  # all a run holds: its steps' rows and the best hypothesis' trace
        steps, results = run(translator.decode(source, mode=mode, beam=3, max_len=9))
        rows = [array for step in steps for layers in step.attention.values() for array in layers]
        best = [array for arrays in results[0].trace.attention.values() for array in arrays]
        assert held_bytes(*rows, *best) <= translator.trace_size(source, mode=mode, beam=3, max_len=9)
    assert translator.trace_size(source, mode="beam", beam=3, max_len=9) > translator.trace_size(source, max_len=9)


def test_nan_scores_become_minus_infinity_and_flag_their_rows_only():
    from models.inference.choices import without_nan

    inf, nan = float("inf"), float("nan")
    logits = torch.tensor([[0.5, -1.0, 2.0, 0.0],
                           [nan, 1.0, 0.0, -2.0],  # NaN logit: the whole row NaN
                           [inf, 1.0, 0.0, -inf],  # +inf logit: NaN beside -inf
                           [-inf, 3.0, -inf, 1.0],  # banned tokens only
                           [-inf, -inf, -inf, -inf]])  # nothing left: NaN
    log_probs = torch.log_softmax(logits, dim=-1)
    log_probs[1, 3] = float("-inf")
    cleaned, broken = without_nan(log_probs)
    values = log_probs.numpy()
    expected = np.where(np.isnan(values), -np.inf, values)  # NaN as -inf, every other value as it was
    np.testing.assert_array_equal(cleaned.numpy(), expected)
    assert broken.tolist() == np.isnan(values).any(axis=1).tolist() == [False, True, True, False, True]
