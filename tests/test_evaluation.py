"""Scoring checkpoints: exact match, chrF/BLEU, by-length accuracy and the attention alignment score."""

from __future__ import annotations

import random

import numpy as np
import pytest

from attnviz.cli import main
from models import make_config
from models.storage.checkpoint import load_checkpoint
from models.analysis.evaluation import _aligned, evaluate
from models.text.tokenizers import CharTokenizer
from models.training.trainer import TrainingConfig, train
from models.inference.translator import Translator
from tests.helpers import write_pairs


def test_alignment_counts_copied_tokens_attending_their_source():
    cross = np.zeros((2, 4, 3), dtype=np.float32)  # [heads, T, S]
    cross[:, 0, 2] = cross[:, 1, 1] = cross[:, 2, 0] = cross[:, 3, 0] = 1.0
    assert _aligned(cross, [2, 1, 0, None]) == (3, 3)
    assert _aligned(cross, [2, 0, 0, None]) == (2, 3)


@pytest.fixture(scope="module")
def reversal(tmp_path_factory):
    rng = random.Random(0)
    words = sorted({"".join(rng.choice("abcdef") for _ in range(rng.randint(3, 6))) for _ in range(300)})
    pairs = [(word, word[::-1]) for word in words]
    tokenizer = CharTokenizer(list("abcdef"))
    config = make_config("gru-additive", tokenizer.vocab_size, tokenizer.vocab_size, hidden=48, max_len=16, dropout=0.0)
    path = tmp_path_factory.mktemp("reversal") / "reverse.safetensors"
    train(config, tokenizer, tokenizer, pairs, pairs[:5], out_path=path,
          config=TrainingConfig(steps=400, batch_size=16, learning_rate=1e-2, warmup_steps=30, eval_every=0,
                                save_every=0, validation_sentences=0, seed=2, progress=False))
    return path, pairs


def test_a_trained_reversal_model_scores_and_aligns(reversal):
    path, pairs = reversal
    translator = Translator(load_checkpoint(path), "cpu")
    copy = lambda text: list(range(len(text) - 1, -1, -1)) + [None]  # noqa: E731 (output i copies n-1-i)
    scores = evaluate(translator, pairs[:60], copy_sources=copy)
    assert scores.exact > 0.9 and scores.chrf > 90
    assert sum(total for _, total in scores.by_length.values()) == 60
    hits = total = 0  # the alignment score recomputed from each trace by hand
    for source, reference in pairs[:60]:
        result = translator.translate(source, need_weights=True)
        if result.text != reference:
            continue
        rows = result.trace.attention["cross"][0][0]  # one layer, one head: [T, S]
        for row, copied in enumerate(copy(source)):
            if copied is not None:
                hits, total = hits + int(rows[row].argmax() == copied), total + 1
    assert scores.aligned_tokens == total > 150
    assert scores.alignment == pytest.approx(hits / total)


def test_evaluate_command(capsys, tmp_path, reversal):
    path, pairs = reversal
    data = tmp_path / "test.tsv"
    write_pairs(data, pairs[:20])
    assert main(["evaluate", "-c", str(path), "--data", str(data), "--beam", "2"]) == 0
    out = capsys.readouterr().out
    assert "examples 20" in out and "exact match" in out and "chrF" in out
