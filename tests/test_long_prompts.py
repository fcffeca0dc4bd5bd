"""Long prompts of decoder-only models: the pass with weights runs a block of queries at a time
(``models.nn.decoder_only.PREFILL_CHUNK``) over the keys they can see and writes each block's weights in the type the
run keeps; the numbers are those of one whole pass (against transformers at a prompt of several blocks, and on the
bundled demo against the same model run in one block), no float32 ``[heads, n, n]`` is ever made whole when the run
keeps float16, and a run whose attention would not fit in the free memory is refused in one line
(docs/ARCHITECTURE.md#memory)."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

import models.nn.decoder_only as decoder_only
from attnviz.gui.work import HALF_PRECISION_ABOVE, trace_dtype
from attnviz.state.demos import demo_path
from attnviz.state.session import Request, RunSettings
from models import build_model, make_config
from models.errors import InputError
from models.inference.decoding import Capture, finish, greedy
from models.inference.translator import Translator
from models.nn.intermediates import keeping_attention
from models.storage.checkpoint import load_checkpoint
from models.text.tokenizers import CharTokenizer

transformers = pytest.importorskip("transformers")

from tests.test_decoder_only import build  # noqa: E402

PROMPT = 300  # tokens: three blocks of PREFILL_CHUNK queries and part of a fourth


@pytest.fixture(scope="module", params=["llama", "mistral", "qwen3", "gemma2"])
def long_context(request, tmp_path_factory):
    """(family, transformers model, our model, prompt ids) with room for a long prompt."""
    from models.importers import convert

    folder = tmp_path_factory.mktemp(request.param) / "model"
    original = build(folder, request.param, max_position_embeddings=512)
    prompt = torch.randint(5, original.config.vocab_size - 5, (PROMPT,), generator=torch.Generator().manual_seed(1))
    return request.param, original, convert(folder).model, prompt.tolist()


def test_a_long_prompt_run_block_by_block_equals_transformers(long_context):
    """Grouped queries, a sliding window far shorter than a block, one key/value head, soft-capped scores: logits
    1e-4 and every head's weights 1e-5 over the whole sequence, through ``forward`` and through ``start``."""
    family, original, model, prompt = long_context
    assert PROMPT > 2 * decoder_only.PREFILL_CHUNK
    with torch.no_grad():
        expected = original(torch.tensor([prompt]), output_attentions=True)
        logits, intermediates = model(torch.tensor([prompt[:5]]), torch.tensor([prompt[5:]]), need_weights=True)
        _, started = model.start(torch.tensor([prompt]))
    assert (logits - expected.logits[:, 5:]).abs().max() < 1e-4
    for ours, first, reference in zip(intermediates.attention["dec_self"], started.attention["dec_self"],
                                      expected.attentions):
        assert ours.shape == first.shape == reference.shape == (1, 4, PROMPT, PROMPT)
        assert (ours - reference).abs().max() < 1e-5 and (first - reference).abs().max() < 1e-5
        assert float(ours[0].triu(1).abs().sum()) == 0.0  # the causal future: exactly 0


class LargestFloat32(TorchDispatchMode):
    """The most elements any float32 tensor an operation made had (the operations torch dispatches)."""

    def __init__(self):
        super().__init__()
        self.largest = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for tensor in out if isinstance(out, (tuple, list)) else (out,):
            if isinstance(tensor, torch.Tensor) and tensor.dtype == torch.float32:
                self.largest = max(self.largest, tensor.numel())
        return out


def test_a_long_prompt_kept_at_half_precision_never_holds_a_layers_float32_weights():
    """Inside ``keeping_attention(float16)`` each layer's weights come back as float16 and no float32 tensor of a
    layer's size ``[heads, n, n]`` is made: the blocks' float32 scores are a block of queries over the keys they see.
    Outside it the weights stay float32."""
    torch.manual_seed(0)
    config = make_config("decoder-only", 30, 30, d_model=32, heads=8, kv_heads=2, d_ff=64, layers=2, max_len=1024,
                         dropout=0.0)
    model = build_model(config).eval()
    ids = torch.randint(4, 30, (1, 600), generator=torch.Generator().manual_seed(0))
    watch = LargestFloat32()
    with torch.inference_mode(), keeping_attention(np.float16), watch:
        _, started = model.start(ids)
    assert all(weights.dtype == torch.float16 for weights in started.attention["dec_self"])
    assert watch.largest <= 8 * decoder_only.PREFILL_CHUNK * 600 < 8 * 600 * 600
    with torch.inference_mode():
        _, full = model.start(ids)
    for half, weights in zip(started.attention["dec_self"], full.attention["dec_self"]):
        assert weights.dtype == torch.float32
        assert (half.float() - weights).abs().max() <= 2**-11  # float16's rounding of weights ≤ 1
        assert torch.equal(half, weights.half())


def demo_run(monkeypatch, chunk: int, dtype=np.float32):
    monkeypatch.setattr(decoder_only, "PREFILL_CHUNK", chunk)
    translator = Translator(load_checkpoint(demo_path("piglatin-decoder-only")), "cpu")
    source = translator.source("the strength of the quick brown fox jumps over lazy dogs")
    return finish(greedy(translator.model, source.ids, Capture(max_len=8, dtype=dtype)))[0]


def test_the_demo_continues_a_prompt_run_in_blocks_as_in_one(monkeypatch):
    """The bundled decoder-only demo, its prompt prefilled 5 queries at a time against all at once: the same tokens,
    probabilities and trace, cell for cell; kept at half precision, the trace is float16 and within its rounding."""
    whole = demo_run(monkeypatch, 10**6)
    blocks = demo_run(monkeypatch, 5)
    half = demo_run(monkeypatch, 5, np.float16)
    assert len(whole.prompt_ids) > 4 * 5
    assert blocks.token_ids == whole.token_ids == half.token_ids and blocks.log_prob == pytest.approx(whole.log_prob,
                                                                                                     abs=1e-6)
    for ours, reference, kept in zip(blocks.trace.attention["dec_self"], whole.trace.attention["dec_self"],
                                     half.trace.attention["dec_self"]):
        assert ours.dtype == reference.dtype == np.float32 and kept.dtype == np.float16
        np.testing.assert_allclose(ours, reference, atol=1e-6, rtol=0)
        np.testing.assert_allclose(kept.astype(np.float32), reference, atol=2**-11, rtol=0)
    assert not blocks.trace.half_precision and half.trace.half_precision


def long_prompt_translator(max_len: int) -> Translator:
    from models.storage.checkpoint import save_checkpoint

    torch.manual_seed(0)
    tokenizer = CharTokenizer(list("abcdefghijklmnopqrstuvwxyz "))
    config = make_config("decoder-only", tokenizer.vocab_size, tokenizer.vocab_size, d_model=16, heads=8, kv_heads=2,
                         d_ff=32, layers=6, max_len=max_len, dropout=0.0)
    import tempfile

    path = save_checkpoint(f"{tempfile.mkdtemp()}/lm.safetensors", build_model(config).eval(), tokenizer, tokenizer)
    return Translator(load_checkpoint(path), "cpu")


def test_a_long_prompts_run_is_kept_at_half_precision_and_one_that_cannot_fit_is_refused_in_one_line():
    """The window's rule for long encoder-decoder runs holds for a prompt: float32 at 1,000 tokens (6 layers × 8
    heads × 1,016² × 4 bytes ≈ 190 MB), float16 at 2,000 (≈ 760 MB, above 384 MB); a prompt whose continuation's
    square could reach 131,072 positions would need terabytes even at half precision: one line before anything
    runs. The traced pass of a forward method is checked the same way."""
    translator = long_prompt_translator(131_072)
    for length, expected in ((1000, np.float32), (2000, np.float16)):
        source = translator.source("ab " * (length // 3))
        request = Request(1, RunSettings(text="", max_len=16))
        dtype, size = trace_dtype(translator, request, source=source, target_ids=None)
        assert dtype == expected and (size > HALF_PRECISION_ABOVE) == (expected == np.float16)
        steps = translator.decode(source, max_len=16, dtype=dtype)
        assert finish(steps)[0].trace.attention["dec_self"][0].dtype == expected
    source = translator.source("ab " * 100)
    with pytest.raises(InputError, match=r"^this run's attention would take ~[\d.]+ GB at half precision, and "
                                         r"[\d.]+ GB of memory is free: shorten the input or the output$"):
        trace_dtype(translator, Request(1, RunSettings(text="", max_len=131_072)), source=source, target_ids=None)
    with pytest.raises(InputError, match=r"^this pass's float32 attention would take"):
        translator.checked_pass_size(source.ids, [5] * 130_000)
    # every position fed (the prompt, the output), counted with an end token's row more: at most what it keeps
    assert translator.checked_pass_size(source.ids, [5] * 16) == 4 * 6 * 8 * (len(source.ids) + 16) ** 2


def test_export_and_render_refuse_a_trace_that_cannot_fit_in_one_line(capsys, tmp_path):
    """The CLI computes a float32 trace: a run whose trace could reach 100,000 positions a side is refused by the
    window's rule (``Translator.check_room_for``) in one line, before anything runs, and writes nothing."""
    from attnviz.cli import main

    path = long_prompt_translator(131_072).checkpoint.path
    for command, output, options in (("export", "trace.npz", ()), ("render", "map.png", ("--kind", "dec_self"))):
        code = main([command, "-c", str(path), "ab ab", "--max-len", "100000", *options, "-o", str(tmp_path / output)])
        err = capsys.readouterr().err.strip().splitlines()
        assert code == 1 and len(err) == 1, err
        assert re.fullmatch(r"attnviz: error: this run's attention would take ~[\d.]+ GB, and [\d.]+ GB of memory is "
                            r"free: shorten the input or the output", err[0]), err
        assert not (tmp_path / output).exists()


def test_a_half_precision_thumbnail_is_the_float32_ones_block_maxima():
    """A long run's float16 weights shrink to each block's largest weight, as their float32 values do (blocks of
    ⌈n / 256⌉ cells a side, written out here); a float16 matrix with negative cells takes the same road as float32."""
    from attnviz.state.viewmodel import thumbnail

    rng = np.random.default_rng(0)
    weights = rng.random((1000, 600)).astype(np.float16)
    weights[:, 400:] = 0.0
    down, across = 4, 3  # ⌈1000 / 256⌉, ⌈600 / 256⌉
    expected = np.full((250, 200), -np.inf, dtype=np.float32)
    for row in range(250):
        for col in range(200):
            expected[row, col] = weights[row * down:(row + 1) * down, col * across:(col + 1) * across].max()
    shrunk = thumbnail(weights)
    assert shrunk.dtype == np.float32 and np.array_equal(shrunk, expected)
    signed = (weights.astype(np.float32) - 0.5).astype(np.float16)
    assert np.array_equal(thumbnail(signed), thumbnail(signed.astype(np.float32)))


def test_the_masks_hatching_is_its_stripes_over_the_blocked_cells():
    """A long map's hatching (one pixel a cell at 4,000 positions, eight at 40): stripes of period max(f, 2) and
    width max(1, f // 3) along the anti-diagonals, alpha 230 on a stripe and 90 off it where the cell is blocked,
    0 where it is not."""
    from attnviz.gui.views.style import MASK_RGBA, hatch

    for positions in (40, 300, 4000):
        mask = np.tril(np.ones((positions, positions), dtype=bool))
        mask[:, :3] = False
        factor = max(1, min(8, 2048 // positions))
        image = hatch(mask)
        assert image.shape == (positions * factor, positions * factor, 4) and image.dtype == np.ubyte
        assert (image[..., :3] == MASK_RGBA).all()
        y, x = np.ogrid[: positions * factor, : positions * factor]
        stripe = (x + y) % max(factor, 2) < max(1, factor // 3)
        blocked = ~mask.repeat(factor, 0).repeat(factor, 1)
        assert np.array_equal(image[..., 3], np.where(blocked, np.where(stripe, 230, 90), 0))


def test_a_prompts_trace_is_the_square_its_rows_were_written_into(monkeypatch):
    """A greedy run of a decoder-only model writes the prompt's rows and each step's row into one square per layer:
    the finished trace is that square (no second copy of a long prompt's weights), the first step's prompt rows and
    every step's row are views of it, and it equals the prompt's block with the rows below it."""
    from models.inference.decoding import run

    monkeypatch.setattr(decoder_only, "PREFILL_CHUNK", 5)
    translator = Translator(load_checkpoint(demo_path("piglatin-decoder-only")), "cpu")
    source = translator.source("the strength of the quick brown fox")
    steps, results = run(greedy(translator.model, source.ids, Capture(max_len=30)))
    trace, prompt = results[0].trace, len(source.ids) - 1
    n = prompt + len(steps)
    for layer, square in enumerate(trace.attention["dec_self"]):
        assert square.shape == (4, n, n)
        block = steps[0].first_rows["dec_self"][layer]
        assert np.shares_memory(square, block) and np.array_equal(square[:, :prompt, :prompt], block)
        for step in steps:
            row = step.attention["dec_self"][layer][0]
            assert np.shares_memory(square, row) and np.array_equal(square[:, prompt + step.step, :row.shape[-1]], row)
        assert not square[:, :prompt, prompt:].any() and not np.triu(square[0], 1).any()
    assert len(steps) < 30  # it ended before its limit: the square is the run's, not the limit's
