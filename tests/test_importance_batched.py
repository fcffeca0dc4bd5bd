"""Batched NLL ablation (models/analysis/importance.py): every head's entry equals switching that head alone off
through today's ``--ablate`` path (forced decoding, one pair at a time), on tiny random models of every
architecture with heads and on the bundled en-es demo; how the pairs are cut into passes changes nothing."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from models import ARCHS, build_model
from models.nn.ablation import Ablation, AblationError
from models.storage.checkpoint import Checkpoint, load_checkpoint
from models.nn.config import TRANSFORMER_ARCHS
from models.inference.decoding import finish
from models.analysis.importance import ImportanceError, ablation_importance, encode_references
from models.text.tokenizers import CharTokenizer
from models.inference.translator import Translator
from attnviz.state.demos import demo_path, demo_reference_pairs
from tests.helpers import LETTERS, tiny_config

HEADED_ARCHS = [arch for arch in ARCHS if arch != "gru-none"]
PAIRS = [("abc", "cab"), ("bad cafe", "dab efac"), ("hg", "gh"), ("a bee", "bee a"), ("fed", "def"),
         ("ace head", "head ace")]


def tiny_translator(arch: str, dtype: torch.dtype = torch.float32, seed: int = 3) -> Translator:
    """A random (seeded) model of ``arch`` over LETTERS: two layers, two heads a layer where it has layers."""
    heads = {} if arch in TRANSFORMER_ARCHS else {"decoder_heads": 2, "decoder_layers": 2}
    torch.manual_seed(seed)
    model = build_model(tiny_config(arch, dropout=0.0, **heads)).to(dtype).eval()
    tokenizer = CharTokenizer(list(LETTERS))
    return Translator(Checkpoint(model, tokenizer, tokenizer), "cpu")


def forced_nll(translator: Translator, pairs, ablation: Ablation) -> float:
    """The pooled NLL per token of the references through forced decoding with ``ablation``, pair by pair."""
    total, tokens = 0.0, 0
    for source, reference in pairs:
        steps = translator.decode(translator.source(source), mode="forced", target_ids=translator.target(reference),
                                  need_weights=False, ablation=ablation)
        result = finish(steps)[0]
        total -= result.log_prob
        tokens += len(result.token_ids)
    return total / tokens


def assert_every_head_equals_its_own_ablation(translator: Translator, pairs, importance) -> None:
    assert importance.metric == "nll" and importance.method == "ablation"
    assert importance.baseline == pytest.approx(forced_nll(translator, pairs, Ablation()), abs=1e-5)
    shape = translator.model.attention_shape()
    assert set(importance.scores) == set(shape)
    for kind, table in importance.scores.items():
        assert table.shape == shape[kind]
        for (layer, head), value in np.ndenumerate(table):
            expected = forced_nll(translator, pairs, Ablation.of([(kind, layer, head)]))
            assert abs(value - expected) < 1e-5, (kind, layer, head)
            assert importance.drops[kind][layer, head] == pytest.approx(value - importance.baseline)
    assert max(np.abs(table).max() for table in importance.drops.values()) > 1e-3  # the heads do matter


@pytest.mark.parametrize("arch", HEADED_ARCHS)
def test_each_heads_entry_equals_switching_it_off_alone(arch):
    translator = tiny_translator(arch)
    assert_every_head_equals_its_own_ablation(translator, PAIRS, ablation_importance(translator, PAIRS))


@pytest.mark.parametrize("arch", ["transformer-postln", "gru-transformer-decoder"])
def test_cutting_the_work_into_more_passes_gives_the_same_tables(arch):
    translator = tiny_translator(arch)
    calls = []
    whole = ablation_importance(translator, PAIRS)
    pieces = ablation_importance(translator, PAIRS, tokens_per_pass=12,
                                 progress=lambda done, total, head: calls.append((done, total, head)))
    heads = sum(layers * count for layers, count in translator.model.attention_shape().values())
    assert calls[-1] == (heads, heads, calls[-1][2]) and len(calls) == heads  # one head (and one pair) per pass
    few = ablation_importance(translator, PAIRS, tokens_per_pass=500)  # 4 copies a pass: some part at a later layer
    for other in (pieces, few):
        assert other.baseline == pytest.approx(whole.baseline, abs=1e-6)
        for kind in whole.scores:
            np.testing.assert_allclose(other.scores[kind], whole.scores[kind], atol=1e-6)


def test_a_progress_answer_of_false_stops_the_run():
    translator = tiny_translator("transformer-preln")
    assert ablation_importance(translator, PAIRS, tokens_per_pass=40, progress=lambda *_: False) is None


def test_the_en_es_demo_every_head_equals_its_own_ablation():
    translator = Translator(load_checkpoint(demo_path("en-es-transformer")), "cpu")
    pairs = demo_reference_pairs(demo_path("en-es-transformer"))[:3]
    assert_every_head_equals_its_own_ablation(translator, pairs, ablation_importance(translator, pairs))


def test_kinds_limit_the_tables_and_models_without_heads_are_one_line():
    translator = tiny_translator("transformer-preln")
    importance = ablation_importance(translator, PAIRS, kinds=["cross"])
    assert list(importance.scores) == ["cross"]
    with pytest.raises(AblationError, match="no attention heads to switch off"):
        ablation_importance(tiny_translator("gru-none"), PAIRS)
    with pytest.raises(AblationError, match="no enc_self attention"):
        ablation_importance(tiny_translator("gru-scaled-dot"), PAIRS, kinds=["enc_self"])


def test_unknown_characters_are_scored_as_the_unknown_token_and_counted():
    translator = tiny_translator("transformer-preln")
    pairs = [("abc", "cab"), ("abz", "zab"), ("hg", "g€h")]
    encoded, unknown = encode_references(translator, pairs)
    assert unknown == 2 and translator.target_tokenizer.unk_id in encoded[2][1]
    importance = ablation_importance(translator, pairs)
    assert importance.unknown_pairs == 2 and np.isfinite(importance.baseline)


def test_a_reference_longer_than_the_model_takes_is_one_line():
    translator = tiny_translator("transformer-preln")
    with pytest.raises(ImportanceError, match=r"pair 2: the reference has 71 tokens .* at most 64"):
        ablation_importance(translator, [("abc", "cab"), ("abc", "a" * 70)])


def test_a_model_with_other_head_counts_per_side_is_scored_head_by_head():
    """Encoder and decoder with their own head counts (Marian, BART configs): each kind's gates are as wide
    as its own layers."""
    torch.manual_seed(4)
    model = build_model(tiny_config("transformer-preln", dropout=0.0, heads=2, decoder_heads=4)).eval()
    tokenizer = CharTokenizer(list(LETTERS))
    translator = Translator(Checkpoint(model, tokenizer, tokenizer), "cpu")
    importance = ablation_importance(translator, PAIRS[:3])
    assert {kind: table.shape for kind, table in importance.scores.items()} == {
        "enc_self": (2, 2), "dec_self": (2, 4), "cross": (2, 4)}
    for kind, layer, head in (("enc_self", 1, 1), ("dec_self", 0, 3), ("cross", 1, 2)):
        expected = forced_nll(translator, PAIRS[:3], Ablation.of([(kind, layer, head)]))
        assert importance.scores[kind][layer, head] == pytest.approx(expected, abs=1e-5)
