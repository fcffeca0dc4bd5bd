"""Decoding reads the device once per step (issue 27: on a GPU every read waits for the queued kernels).

Observed through torch's own hooks on the bundled demos: a dispatch mode sees every scalar read
(``.item()``, ``bool()``, ``int()`` dispatch ``_local_scalar_dense`` / ``is_nonzero``), a function mode every
host read of a tensor's values (``.numpy()``, which does not dispatch on the CPU, included); and the number
fields of a step are views of one block, the part of its transfer that the step keeps.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from attnviz.state.demos import demo_path
from models.inference.decoding import Capture, beam_search, forced_step_by_step, greedy, run
from models.inference.traces import TraceAssembly
from models.inference.transfer import HostReads, HostTransfer, called_from
from models.nn.attention import masked_softmax
from models.storage.checkpoint import load_checkpoint

DEMOS = {"en-es-transformer": "the cat is on the table .", "piglatin-gru-transformer-decoder": "hello world",
         "piglatin-gru-additive": "hello world"}
STEPS = 10
CPU_ONLY_READS = ("masked_softmax",)
SCALAR_READS = {"aten._local_scalar_dense.default", "aten.is_nonzero.default", "aten.equal.default"}
FIELDS = ("probabilities", "ranks", "top_ids", "top_probs", "parents", "scores", "finished")


class ScalarReads(TorchDispatchMode):
    """Counts the scalar reads of the decoding loop. ``masked_softmax``'s are left out: it checks a mask only
    on the CPU, where no device is waited for (``test_masked_softmax_reads_nothing_off_the_cpu``)."""

    def __init__(self) -> None:
        super().__init__()
        self.reads: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if str(func) in SCALAR_READS and not called_from(CPU_ONLY_READS):
            self.reads.append(str(func))
        return func(*args, **(kwargs or {}))


@pytest.fixture(scope="module", params=sorted(DEMOS))
def demo(request):
    checkpoint = load_checkpoint(demo_path(request.param))
    return checkpoint.model, checkpoint.source_tokenizer.encode(DEMOS[request.param])


def decodings(model, source):
    yield greedy(model, source, Capture(max_len=STEPS))
    yield beam_search(model, source, Capture(max_len=STEPS), beam=4)
    yield forced_step_by_step(model, source, [7] * (STEPS - 1))


def test_after_the_first_step_a_step_reads_the_device_once(demo):
    model, source = demo
    for steps in decodings(model, source):
        next(steps)  # the first step also converts the encoder's attention
        scalars, reads, count = ScalarReads(), HostReads(ignoring=CPU_ONLY_READS), 1
        with scalars, reads:
            while True:
                try:
                    next(steps)
                except StopIteration:
                    break
                count += 1
        assert count == STEPS
        assert scalars.reads == []
        assert reads.reads == count - 1  # each step's one transfer; building the results reads nothing


def test_a_step_s_numbers_are_views_of_its_one_transfer(demo):
    model, source = demo
    for steps in decodings(model, source):
        collected, _ = run(steps)
        for step in collected:
            assert all(_block(getattr(step, field)) is _block(step.token_ids) for field in FIELDS)
            assert step.scores.dtype == np.float64 and step.probabilities.dtype == np.float32
        assert _block(collected[0].token_ids) is not _block(collected[1].token_ids)


def _block(array: np.ndarray) -> np.ndarray:
    """The array that ``array`` is a view of (through any number of views)."""
    while isinstance(array.base, np.ndarray):
        array = array.base
    return array


def test_masked_softmax_reads_nothing_off_the_cpu():
    """On the meta device any read of a value raises: the path a GPU takes has no host read."""
    scores = torch.randn(1, 2, 3, 4, device="meta")
    mask = torch.ones(1, 1, 3, 4, dtype=torch.bool, device="meta")
    assert masked_softmax(scores, mask, in_place=True).shape == (1, 2, 3, 4)


def test_a_beam_wider_than_the_choices_keeps_only_finite_hypotheses(demo):
    """The first step of a beam that must start with one token has one hypothesis, not the beam's width."""
    model, source = demo
    steps, results = run(beam_search(model, source, Capture(max_len=4), beam=8, first=[7]))
    assert steps[0].beam_size == 1 and steps[0].token_ids.tolist() == [7]
    assert all(step.beam_size == 8 and np.isfinite(step.scores).all() for step in steps[1:])
    assert results[0].token_ids[0] == 7


def test_a_finished_beam_holds_neither_its_cache_nor_its_transfer_buffer(demo):
    """The hypotheses after the best build their traces when asked for, through the run's trace assembly alone:
    the decoder's key/value cache (device memory on a GPU) and its pinned transfer buffer are not kept."""
    model, source = demo
    results = run(beam_search(model, source, Capture(max_len=STEPS), beam=4))[1]
    kept = results[1].__dict__["_trace"].func.__self__  # what a later hypothesis' trace, not built yet, keeps
    assert isinstance(kept, TraceAssembly)
    assert not any(isinstance(value, (torch.Tensor, HostTransfer)) for value in vars(kept).values())
    assert results[1].trace.attention.keys() == results[0].trace.attention.keys()  # still built when asked


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_a_beam_keeps_its_trace_in_the_number_type_asked_for(demo, dtype):
    model, source = demo
    best = run(beam_search(model, source, Capture(max_len=4, dtype=dtype), beam=3))[1][0]
    assert all(layer.dtype == dtype for layers in best.trace.attention.values() for layer in layers)


def test_one_transfer_brings_every_number_type_back_as_it_was():
    """Mixed item sizes, a non-contiguous and an expanded piece: values, dtypes and shapes come back, every
    view aligned to its item size, and the kept arrays outlive the next transfer."""
    transfer = HostTransfer()
    kept = {"finished": torch.tensor([True, False]), "scores": torch.tensor([1.5, -2.25], dtype=torch.float64),
            "half": torch.tensor([[0.5, 2.0]], dtype=torch.float16), "ids": torch.arange(3)}
    passing = {"strided": torch.arange(12.0).reshape(3, 4)[:, ::2],
               "expanded": torch.ones(2, 3, dtype=torch.bool).expand(2, 2, 3)}
    host, rows = transfer(kept, passing)
    for name, array in [*host.items(), *rows.items()]:
        expected = {**kept, **passing}[name]
        assert array.dtype == expected.numpy().dtype and array.shape == tuple(expected.shape)
        assert np.array_equal(array, expected.numpy()) and array.ctypes.data % array.itemsize == 0
    transfer({name: torch.zeros_like(piece) for name, piece in kept.items()}, passing)
    assert host["scores"].tolist() == [1.5, -2.25] and transfer.count == 2
