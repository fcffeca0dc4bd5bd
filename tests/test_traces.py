"""Trace assembly (models/inference/traces.py) and the table of decoders by mode.

A run whose start already computed the first rows of a kind the steps produce (a decoder-only model prefilling its
prompt) gets one trace over the whole sequence: checked on real models by prefilling the first decoder inputs with
one teacher-forced pass and decoding the rest step by step; the reference is one forward pass over all of them.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from models import ARCHS
from models.inference.decoding import DECODERS, Capture, Search, forced_step_by_step, run
from models.inference.modes import Mode
from models.inference.traces import TraceAssembly
from models.nn.intermediates import keeping_attention
from tests.test_decoding import ATOL, BOS, SOURCE, forward_trace, label, source_label, tiny_model

TARGET = [4, 8, 5, 9, 6]


def prefill(model, fed: list[int]):
    """The intermediates of one teacher-forced pass over the decoder inputs ``fed``."""
    with torch.inference_mode(), keeping_attention(np.float32):
        _, inter = model(torch.tensor([SOURCE]), torch.tensor([fed]), need_weights=True)
    return inter


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("first", [1, 3])
def test_first_rows_from_the_start_and_the_steps_rows_make_one_trace(arch, first):
    """The first ``first`` rows of dec_self and cross (and the whole of enc_self) come from the start, the rest from
    the steps: the trace equals one forward pass over the whole sequence, dec_self one causal square."""
    model = tiny_model(arch, seed=5)
    tgt_in = [BOS] + TARGET  # the decoder's inputs of a forced run of TARGET, whose end token comes last
    reference = forward_trace(model, TARGET + [3])
    steps, _ = run(forced_step_by_step(model, SOURCE, TARGET, Capture(label=label)))
    assembly = TraceAssembly([source_label(i) for i in SOURCE], label)
    assembly.begin(prefill(model, tgt_in[:first]), first_tokens=[label(i) for i in tgt_in[:first]])
    later = [(step, 0) for step in steps[first:]]
    ids = [int(step.token_ids[0]) for step in steps[first:]]
    trace = assembly.of_path(later, ids, start=tgt_in[first])
    assert trace.tgt_tokens == reference.tgt_tokens and trace.src_tokens == reference.src_tokens
    assert trace.attention.keys() == reference.attention.keys()
    for kind, layers in reference.attention.items():
        for ours, theirs in zip(trace.attention[kind], layers, strict=True):
            assert ours.shape == theirs.shape
            np.testing.assert_allclose(ours, theirs, atol=ATOL, rtol=0)
        assert np.array_equal(trace.masks[kind], reference.masks[kind])
    if "dec_self" in trace.attention:  # one causal square: nothing above the diagonal
        square = trace.attention["dec_self"][0]
        assert square.shape[-1] == square.shape[-2] == len(tgt_in)
        assert not np.triu(square, k=1).any()


def test_first_rows_need_one_label_each():
    model = tiny_model("transformer-preln")
    assembly = TraceAssembly([source_label(i) for i in SOURCE], label)
    with pytest.raises(ValueError, match="1 labels for 2 first"):
        assembly.begin(prefill(model, [BOS, 4]), first_tokens=["t2"])


def test_every_mode_has_a_decoder():
    """Translator.decode reads the table: each mode runs, called alike."""
    assert set(DECODERS) == set(Mode)
    model = tiny_model("transformer-preln")
    for mode in Mode:
        _, results = run(DECODERS[mode](model, SOURCE, Capture(max_len=4), Search(beam=2, target=[4, 5])))
        assert results and results[0].trace is not None
