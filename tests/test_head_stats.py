"""Corpus head statistics: hand-made attention gives hand-computed numbers; padding never counts (a padded
batch gives what its sentences give one by one, on real models); bad input is one clear error."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from models import build_model
from models.storage.checkpoint import load_checkpoint, save_checkpoint
from models.inference.batches import encode_pairs
from models.analysis.head_stats import NoAttentionError, batch_sums, corpus_head_stats, example_stats
from models.trace.head_summary import RunStats, statistics_of
from models.nn.intermediates import Intermediates
from models.inference.translator import Translator
from tests.helpers import tiny_config

PAIRS = [("abc", "ba"), ("a", "hgfedcba"), ("abcdefgh abc", "c"), ("ab", "ab"), ("hh a", "a h")]
EOS, PAD = 3, 0


def hand_made_run() -> RunStats:
    """One sentence: source ``5 6 </s>`` + one padded key, decoder input ``<s> x`` + one padded row.
    Every padded row and key holds weight that would change every number if it were counted."""
    src = torch.tensor([[5, 6, EOS, PAD]])
    enc = torch.tensor([[1.0, 0, 0, 0], [0.5, 0.5, 0, 0], [0, 0.25, 0.75, 0], [0.25, 0.25, 0.25, 0.25]])
    dec = torch.tensor([[1.0, 0, 0], [0.4, 0.6, 0], [0.3, 0.3, 0.4]])
    cross = torch.tensor([[0.5, 0.5, 0, 0], [0.25, 0.25, 0.5, 0], [0.1, 0.2, 0.3, 0.4]])
    intermediates = Intermediates(attention={"enc_self": [enc[None, None]], "dec_self": [dec[None, None]],
                                             "cross": [cross[None, None]]})
    sums = batch_sums(intermediates, src, torch.tensor([3]), torch.tensor([2]), EOS)
    return RunStats("reference", sums)


def test_hand_made_attention_gives_hand_computed_statistics():
    run = hand_made_run()
    mean = lambda kind, name: float(run.mean(kind, name)[0, 0])  # noqa: E731
    ln2 = math.log(2)
    # encoder: rows 0..2 are real, row 3 and key 3 are padding
    assert mean("enc_self", "entropy") == pytest.approx((0 + ln2 - (0.25 * math.log(0.25) + 0.75 * math.log(0.75))) / 3,
                                                        abs=1e-6)
    assert mean("enc_self", "confidence") == pytest.approx((1 + 0.5 + 0.75) / 3)
    assert mean("enc_self", "same") == pytest.approx((1 + 0.5 + 0.75) / 3)
    assert mean("enc_self", "previous") == pytest.approx((0.5 + 0.25) / 2)  # row 0 has no previous position
    assert mean("enc_self", "eos") == pytest.approx(0.75 / 3)
    # decoder self-attention: rows 0, 1 real
    assert mean("dec_self", "bos") == pytest.approx((1 + 0.4) / 2)
    assert mean("dec_self", "same") == pytest.approx((1 + 0.6) / 2)
    assert mean("dec_self", "previous") == pytest.approx(0.4)
    assert mean("dec_self", "entropy") == pytest.approx(-(0.4 * math.log(0.4) + 0.6 * math.log(0.6)) / 2, abs=1e-6)
    # cross: rows 0, 1 over S = 3 keys; T = 2; centres 0.25 and 1.75, half-width max(1, 0.3) = 1
    assert mean("cross", "entropy") == pytest.approx((ln2 + 1.5 * ln2) / 2, abs=1e-6)
    assert mean("cross", "eos") == pytest.approx(0.5 / 2)
    assert mean("cross", "confidence") == pytest.approx(0.5)
    assert mean("cross", "diagonal") == pytest.approx((1.0 + 0.75) / 2)
    for kind in ("enc_self", "dec_self", "cross"):
        assert mean(kind, "padding") == 0.0
    assert set(run.tables()["cross"]) == set(statistics_of("cross")) == {"entropy", "confidence", "eos", "padding",
                                                                         "diagonal"}


def test_weight_on_a_padded_key_is_reported():
    src = torch.tensor([[5, EOS, PAD]])
    cross = torch.tensor([[[[0.5, 0.4, 0.1]]]])
    sums = batch_sums(Intermediates(attention={"cross": [cross]}), src, torch.tensor([2]), torch.tensor([1]), EOS)
    run = RunStats("reference", sums)
    assert float(run.mean("cross", "padding")[0, 0]) == pytest.approx(0.1)
    assert float(run.mean("cross", "confidence")[0, 0]) == pytest.approx(0.5)


def test_typical_sentences_are_nearest_and_farthest_from_the_heads_mean():
    run = hand_made_run()
    sums = run.kinds["cross"]
    three = type(sums)({name: np.repeat(values, 3, axis=0) for name, values in sums.sums.items()},
                       np.array([2, 2, 2]), np.array([1, 1, 1]))
    three.sums["entropy"][1] *= 3  # sentence 1 spreads its attention far more
    most, least = RunStats("reference", {"cross": three}).typical("cross", 0, 0, count=2)
    assert least[0] == 1 and most[-1] != 1 and set(most) == {0, 2}


def checkpoint_of(tmp_path, char_tokenizer, arch: str, seed: int = 0) -> Translator:
    torch.manual_seed(seed)
    path = save_checkpoint(tmp_path / f"{arch}.safetensors", build_model(tiny_config(arch)), char_tokenizer,
                           char_tokenizer, {})
    return Translator(load_checkpoint(path), "cpu")


@pytest.mark.parametrize("arch", ["transformer-preln", "transformer-postln", "gru-additive", "gru-transformer-decoder"])
def test_padding_never_counts_a_batch_equals_its_sentences_one_by_one(tmp_path, char_tokenizer, arch):
    translator = checkpoint_of(tmp_path, char_tokenizer, arch)
    batched = corpus_head_stats(translator, PAIRS, batch_size=len(PAIRS), decode=True)
    for index, pair in enumerate(PAIRS):
        alone = corpus_head_stats(translator, [pair], batch_size=1, decode=True)
        for run in ("reference", "decoded"):
            for kind, sums in batched.runs[run].kinds.items():
                for name, values in sums.sums.items():
                    np.testing.assert_allclose(values[index], alone.runs[run].kinds[kind].sums[name][0], atol=1e-5,
                                               err_msg=f"{run} {kind} {name}")
                assert sums.rows[index] == alone.runs[run].kinds[kind].rows[0]
    assert batched.max_padding() == 0.0
    assert batched.kinds == list(translator.model.kinds)


def test_statistics_match_the_traces_of_forced_decoding(tmp_path, char_tokenizer):
    """The batched forward's numbers are those of each sentence's own trace (the one the window shows)."""
    from models.inference.decoding import finish

    translator = checkpoint_of(tmp_path, char_tokenizer, "transformer-preln")
    stats = corpus_head_stats(translator, PAIRS[:3], batch_size=2)
    for index, (source, target) in enumerate(PAIRS[:3]):
        trace = finish(translator.decode(translator.source(source), mode="forced",
                                         target_ids=translator.target(target)))[0].trace
        cross = trace.attention["cross"][1]  # [heads, T, S]
        entropy = -(np.where(cross > 0, cross * np.log(np.where(cross > 0, cross, 1)), 0)).sum(-1).mean(-1)
        np.testing.assert_allclose(stats.runs["reference"].per_sentence("cross", "entropy")[index, 1], entropy,
                                   atol=1e-5)
        np.testing.assert_allclose(stats.runs["reference"].per_sentence("cross", "eos")[index, 1],
                                   cross[:, :, -1].mean(-1), atol=1e-5)


def test_the_decoded_run_is_forced_on_the_greedy_output(tmp_path, char_tokenizer):
    translator = checkpoint_of(tmp_path, char_tokenizer, "transformer-preln", seed=3)
    stats = corpus_head_stats(translator, PAIRS, decode=True)
    assert len(stats.outputs) == len(PAIRS)
    greedy = [translator.translate(source) for source, _ in PAIRS]
    assert stats.outputs == [result.text for result in greedy]
    assert stats.runs["decoded"].kinds["cross"].rows.tolist() == [len(result.token_ids) for result in greedy]


def test_progress_can_stop_the_run(tmp_path, char_tokenizer):
    translator = checkpoint_of(tmp_path, char_tokenizer, "transformer-preln")
    seen = []
    result = corpus_head_stats(translator, PAIRS, batch_size=2,
                               progress=lambda done, total: seen.append((done, total)) or False)
    assert result is None and seen == [(2, 5)]


def test_a_model_without_attention_is_refused(tmp_path, char_tokenizer):
    translator = checkpoint_of(tmp_path, char_tokenizer, "gru-none")
    with pytest.raises(NoAttentionError, match="no attention"):
        corpus_head_stats(translator, PAIRS)


def test_example_stats_keep_the_corpus_order(tmp_path, char_tokenizer):
    translator = checkpoint_of(tmp_path, char_tokenizer, "transformer-preln")
    examples = encode_pairs(PAIRS, char_tokenizer, char_tokenizer, translator.config, "test")
    run = example_stats(translator.model, examples, 2)
    assert run.kinds["enc_self"].rows.tolist() == [len(source) for source, _ in examples]
