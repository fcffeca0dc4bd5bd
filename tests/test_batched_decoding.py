"""Decoding sentences in batches gives every sentence what its run alone gives: the same tokens, scores to 1e-5 and
traces to 1e-5, on every bundled architecture and an imported Marian, for sentences of very different lengths in
one batch, greedy and beam 1–8, with and without a length limit, with heads switched off; and a step reads the
device once for the whole batch.

The exactness checks run the models in float64: a batch of 2 runs a GRU cell through other matrix kernels than a
batch of 1, and a character GRU that keeps going to its length limit drifts by ~5e-5 in summed log-probability
from float32 rounding alone; in float64 any difference is the batching's own."""

from __future__ import annotations

import numpy as np
import pytest

from attnviz.state.demos import demo_path
from models.inference.batched import decode_batch
from models.inference.decoding import DECODERS, Capture, Search, finish
from models.inference.modes import Mode
from models.inference.translator import Translator
from models.inference.transfer import HostReads
from models.nn.ablation import Ablation
from models.storage.checkpoint import load_checkpoint

TEXTS = {
    "en-es-transformer": ["the cat is on the table .", "yes", "i would like to buy two tickets to the old station "
                          "near the river , please , because my train leaves early tomorrow morning .", "hello ."],
    "piglatin": ["the cat is on the table", "a", "i would like to buy a ticket to the station please thank you",
                 "yes"],
    "piglatin-decoder-only": ["the cat is on", "a", "i would like to buy two", "yes"],
}
DEMOS = ["en-es-transformer", "piglatin-gru-additive", "piglatin-gru-scaled-dot", "piglatin-gru-transformer-decoder",
         "piglatin-gru-no-attention", "piglatin-decoder-only"]
ABLATED = {"en-es-transformer": ["cross:0:1", "enc_self:1:*"], "piglatin-gru-additive": ["cross:0:0"],
           "piglatin-gru-scaled-dot": ["cross:0:0"], "piglatin-gru-transformer-decoder": ["dec_self:0:0", "cross:1:0"],
           "piglatin-gru-no-attention": [], "piglatin-decoder-only": ["dec_self:0:1"]}


@pytest.fixture(scope="module", params=DEMOS)
def demo(request):
    checkpoint = load_checkpoint(demo_path(request.param))
    checkpoint.model.double()
    texts = TEXTS.get(request.param, TEXTS["piglatin"])
    return request.param, checkpoint, sources_of(checkpoint, texts)


def sources_of(checkpoint, texts):
    """The ids each text's run reads (the end token appended, a prompt framed), as the translator makes them."""
    translator = Translator(checkpoint, "cpu")
    return [translator.source(text).ids for text in texts]


def captures(checkpoint, sources, **settings):
    return sources, [Capture(label=checkpoint.target_tokenizer.token, **settings) for _ in sources]


def one_at_a_time(model, sources, capture_list, search, mode):
    return [finish(DECODERS[mode](model, ids, capture, search)) for ids, capture in zip(sources, capture_list)]


def assert_same(alone, batched, *, traces: bool) -> None:
    assert len(alone) == len(batched)
    for mine, theirs in zip(alone, batched):
        assert [result.token_ids for result in mine] == [result.token_ids for result in theirs]
        np.testing.assert_allclose([r.score for r in theirs], [r.score for r in mine], atol=1e-5, rtol=0)
        np.testing.assert_allclose([r.log_prob for r in theirs], [r.log_prob for r in mine], atol=1e-5, rtol=0)
        for one, other in zip(mine, theirs):
            assert [step.step for step in one.steps] == [step.step for step in other.steps]
            np.testing.assert_allclose([s.probabilities[r] for s, r in zip(other.steps, other.rows)],
                                       [s.probabilities[r] for s, r in zip(one.steps, one.rows)], atol=1e-5)
            if not traces:
                assert one.trace is None and other.trace is None
                continue
            expected, found = _trace(one), _trace(other)
            assert (found.src_tokens, found.tgt_tokens) == (expected.src_tokens, expected.tgt_tokens)
            assert found.prompt_len == expected.prompt_len and found.ablated == expected.ablated
            assert set(found.attention) == set(expected.attention)
            for kind, layers in expected.attention.items():
                assert np.array_equal(found.masks[kind], expected.masks[kind]), kind
                for layer, weights in enumerate(layers):
                    assert found.attention[kind][layer].shape == weights.shape, (kind, layer)
                    np.testing.assert_allclose(found.attention[kind][layer], weights, atol=1e-5, rtol=0)


def _trace(result):
    return result.trace() if callable(result.trace) else result.trace


@pytest.mark.parametrize("beam", [1, 2, 5, 8])
def test_a_batch_decodes_each_sentence_as_it_decodes_alone(demo, beam):
    name, checkpoint, texts = demo
    model = checkpoint.model
    mode = Mode.GREEDY if beam == 1 else Mode.BEAM
    for max_len, weights in ((None, beam in (1, 5)), (9, beam in (2, 8))):
        sources, capture_list = captures(checkpoint, texts, max_len=max_len, need_weights=weights)
        search = Search(beam=beam)
        alone = one_at_a_time(model, sources, capture_list, search, mode)
        assert_same(alone, decode_batch(model, sources, capture_list, search, mode), traces=weights)
    lengths = [len(finish(DECODERS[mode](model, ids, capture_list[0], search))[0].token_ids) for ids in sources]
    assert len(set(lengths)) > 1 or name == "piglatin-gru-no-attention"  # the sentences ended at different steps


def test_switched_off_heads_are_switched_off_in_the_batch(demo):
    name, checkpoint, texts = demo
    ablation = Ablation.parse(ABLATED[name])
    for mode, beam in ((Mode.GREEDY, 1), (Mode.BEAM, 3)):
        sources, capture_list = captures(checkpoint, texts, max_len=12, need_weights=True, ablation=ablation)
        search = Search(beam=beam)
        alone = one_at_a_time(checkpoint.model, sources, capture_list, search, mode)
        batched = decode_batch(checkpoint.model, sources, capture_list, search, mode)
        assert_same(alone, batched, traces=True)
        assert _trace(batched[0][0]).ablated == ablation.heads(checkpoint.model.attention_shape())


def test_float32_transformer_batch_equals_one_at_a_time():
    checkpoint = load_checkpoint(demo_path("en-es-transformer"))
    sources, capture_list = captures(checkpoint, sources_of(checkpoint, TEXTS["en-es-transformer"] * 3),
                                     need_weights=True)
    for mode, search in ((Mode.GREEDY, Search()), (Mode.BEAM, Search(beam=4))):
        alone = one_at_a_time(checkpoint.model, sources, capture_list, search, mode)
        assert_same(alone, decode_batch(checkpoint.model, sources, capture_list, search, mode), traces=True)


@pytest.mark.parametrize("mode, beam", [(Mode.GREEDY, 1), (Mode.BEAM, 4)])
def test_a_step_of_the_whole_batch_reads_the_device_once(mode, beam):
    checkpoint = load_checkpoint(demo_path("en-es-transformer"))
    sources = sources_of(checkpoint, TEXTS["en-es-transformer"])
    capture_list = [Capture(max_len=10, need_weights=False)] * len(sources)
    alone = one_at_a_time(checkpoint.model, sources, capture_list, Search(beam=beam), mode)
    steps = max(len(result[0].steps) for result in alone)
    with HostReads(ignoring=("masked_softmax",)) as reads:
        decode_batch(checkpoint.model, sources, capture_list, Search(beam=beam), mode)
    assert reads.reads == steps  # one transfer a step, however many sentences; building the results reads nothing


def test_the_batch_shrinks_as_sentences_end():
    checkpoint = load_checkpoint(demo_path("en-es-transformer"))
    model = checkpoint.model
    sources = sources_of(checkpoint, TEXTS["en-es-transformer"])
    rows = []
    original = model.step

    def counting(tokens, state, **keywords):
        rows.append(tokens.shape[0])
        return original(tokens, state, **keywords)

    model.step = counting
    try:
        results = decode_batch(model, sources, [Capture(need_weights=False)] * len(sources), Search(), Mode.GREEDY)
    finally:
        del model.step
    lengths = sorted(len(result[0].token_ids) for result in results)
    assert rows == [sum(length > step for length in lengths) for step in range(lengths[-1])]
    assert rows[0] == len(sources) and rows[-1] == 1


def test_an_imported_marian_decodes_alike_in_batches(tmp_path):
    pytest.importorskip("transformers")
    from models.importers import convert
    from tests.test_import_marian import SENTENCES, build_marian

    folder, _, tokenizer, _ = build_marian(tmp_path)
    checkpoint = convert(folder)
    checkpoint.model.double()
    sources = [tokenizer(text).input_ids for text in SENTENCES]
    for mode, beam in ((Mode.GREEDY, 1), (Mode.BEAM, 4)):
        sources, capture_list = captures(checkpoint, sources, max_len=15, need_weights=True)
        alone = one_at_a_time(checkpoint.model, sources, capture_list, Search(beam=beam), mode)
        assert_same(alone, decode_batch(checkpoint.model, sources, capture_list, Search(beam=beam), mode), traces=True)


@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_imported_language_models_decode_alike_in_batches(tmp_path, family):
    """GPT-2's learned positions and Llama's rotary ones: each padded prompt's continuation as alone."""
    pytest.importorskip("transformers")
    from models.importers import convert
    from tests.test_decoder_only import SENTENCES as PROMPTS
    from tests.test_decoder_only import build, encode

    build(tmp_path / "model", family)
    checkpoint = convert(tmp_path / "model")
    checkpoint.model.double()
    prompts = [encode(tmp_path / "model", text) for text in ["the cat", *PROMPTS[:3], "we"]]
    assert len({len(prompt) for prompt in prompts}) > 2
    for mode, beam, lengths in ((Mode.GREEDY, 1, (None, 8)), (Mode.BEAM, 3, (12,))):
        for max_len in lengths:  # None: to the end of the context, past the longest prompt's room
            sources, capture_list = captures(checkpoint, prompts, max_len=max_len, need_weights=True)
            search = Search(beam=beam, length_penalty=1.0)
            alone = one_at_a_time(checkpoint.model, sources, capture_list, search, mode)
            assert_same(alone, decode_batch(checkpoint.model, sources, capture_list, search, mode), traces=True)


def test_a_cache_grows_no_further_than_the_decoding_will_fill():
    import torch

    from models.nn.base import LayerCache

    limited, unlimited = LayerCache(limit=20), LayerCache()
    for _ in range(17):  # past 16 positions a buffer doubles: to 34, of which a 20-token output fills 20
        for cache in (limited, unlimited):
            cache.extend_self(torch.zeros(128, 8, 1, 64), torch.zeros(128, 8, 1, 64))
    assert (limited.room_k.shape[2], unlimited.room_k.shape[2]) == (20, 34)
    assert limited.reorder(torch.arange(128)).limit == 20
