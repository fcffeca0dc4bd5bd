"""Training: every architecture learns a tiny task, checkpoints reload, runs are deterministic, resuming is
bit-identical, and bad settings or corpora fail with one-line errors.

The task is reversing 3–6-letter strings over 8 letters, at character level, with models of a few
thousand weights (torch runs on one thread, tests/conftest.py: faster for such tiny models anyway).
"""

from __future__ import annotations

import math
import random

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file

from models import ARCHS, make_config
from models.storage.checkpoint import Checkpoint, load_checkpoint
from models.text.pairs import read_pairs
from models.text.splits import split_pairs
from models.errors import CheckpointError, ConfigError, DataError
from models.text.tokenizers import CharTokenizer, SentencePieceTokenizer
from models.training.trainer import TrainingConfig, build_tokenizers, learning_rate_at, state_path, train
from models.inference.translator import Translator

LETTERS = "abcdefgh"


def reversal_pairs(count: int, seed: int) -> list[tuple[str, str]]:
    rng = random.Random(seed)
    words = sorted({"".join(rng.choice(LETTERS) for _ in range(rng.randint(3, 6))) for _ in range(count)})
    return [(word, word[::-1]) for word in words]


def small_model_config(arch: str, source, target, dropout: float = 0.0):
    if arch.startswith("transformer"):
        sizes = dict(d_model=32, heads=2, d_ff=64, encoder_layers=1, decoder_layers=1)
    else:
        sizes = dict(hidden=48, decoder_layers=1)
    return make_config(arch, source.vocab_size, target.vocab_size, max_len=16, dropout=dropout, **sizes)


def quick(**overrides) -> TrainingConfig:
    settings = dict(steps=20, batch_size=8, learning_rate=5e-3, warmup_steps=5, label_smoothing=0.1,
                    eval_every=0, save_every=0, validation_sentences=2, seed=1, progress=False)
    return TrainingConfig(**{**settings, **overrides})


def weights(path) -> dict[str, torch.Tensor]:
    return load_file(str(path))


def assert_same_weights(first, second) -> None:
    a, b = weights(first), weights(second)
    assert a.keys() == b.keys()
    different = [name for name in a if not torch.equal(a[name], b[name])]
    assert not different, f"weights differ: {different[:5]}"


# --- every architecture learns ---------------------------------------------------------------------------

TASK = reversal_pairs(200, seed=0)
HELD_OUT = [(word, word[::-1]) for word in ("hgfedc", "abcdef", "ddeeff", "gacbh") if word not in dict(TASK)]


@pytest.mark.parametrize("arch", ARCHS)
def test_every_arch_learns_reversal_and_reloads(arch, tmp_path):
    source, target = build_tokenizers(TASK)
    out = tmp_path / f"{arch}.safetensors"
    config = quick(steps=300, batch_size=32, warmup_steps=30, label_smoothing=0.0, eval_every=75,
                   validation_sentences=4, seed=0)
    summary = train(small_model_config(arch, source, target), source, target, TASK, HELD_OUT, out_path=out,
                    config=config,
                    provenance={"corpus": "reversal"})

    uniform = math.log(target.vocab_size)  # an untrained model's loss per token
    assert summary.step == 300 and summary.train_loss < 0.25 * uniform
    assert summary.valid_loss is not None and 0.0 <= summary.chrf <= 100.0 and 0.0 <= summary.bleu <= 100.0
    trained = Translator(Checkpoint(summary.model, source, target), "cpu")
    if arch != "gru-none":  # without attention a GRU squeezes the word into one vector: loss only
        assert summary.train_loss < 0.15
        correct = sum(trained.translate(word).text == reversed_word for word, reversed_word in TASK)
        assert correct >= 0.95 * len(TASK)

    loaded = load_checkpoint(out)
    assert loaded.provenance["arch"] == arch and loaded.provenance["steps"] == 300
    assert loaded.provenance["corpus"] == "reversal" and loaded.provenance["train_pairs"] == len(TASK)
    assert loaded.provenance["metrics"]["valid_loss"] == pytest.approx(summary.valid_loss)
    reloaded = Translator(loaded, "cpu")
    for word, _ in TASK[:20] + HELD_OUT:
        assert reloaded.translate(word).token_ids == trained.translate(word).token_ids


# --- determinism and resume ------------------------------------------------------------------------------

SMALL = reversal_pairs(28, seed=3)  # 4 batches of 8 an epoch (the last one wraps): resuming crosses epochs


def small_run(tmp_path, name: str, arch: str = "transformer-preln", **overrides):
    source, target = build_tokenizers(SMALL)
    out = tmp_path / f"{name}.safetensors"
    model_config = small_model_config(arch, source, target, dropout=0.1)
    resume = overrides.pop("resume", False)
    summary = train(model_config, source, target, SMALL[4:], SMALL[:4], out_path=out, config=quick(**overrides),
                    resume=resume)
    return out, summary


def test_same_seed_gives_identical_weights_and_another_seed_does_not(tmp_path):
    first, _ = small_run(tmp_path, "first")
    second, _ = small_run(tmp_path, "second")
    assert_same_weights(first, second)
    other, _ = small_run(tmp_path, "other", seed=2)
    with pytest.raises(AssertionError):
        assert_same_weights(first, other)


@pytest.mark.parametrize("arch", ["transformer-preln", "gru-additive"])
def test_resume_is_bit_identical_to_training_straight(arch, tmp_path):
    # Validation and saves at steps that do not line up with the stop: they must not change the weights.
    straight, straight_summary = small_run(tmp_path, "straight", arch, steps=20, eval_every=3, save_every=7)
    resumed, _ = small_run(tmp_path, "resumed", arch, steps=10, eval_every=3, save_every=7)
    with safe_open(str(state_path(resumed)), framework="pt") as handle:
        assert '"step": 10' in handle.metadata()["state"]
        assert any(key.startswith("optimizer.") for key in handle.keys())
    with pytest.raises(AssertionError):  # half-trained really differs
        assert_same_weights(straight, resumed)
    _, summary = small_run(tmp_path, "resumed", arch, steps=20, eval_every=3, save_every=7, resume=True)
    assert summary.step == 20
    assert_same_weights(straight, resumed)
    assert load_checkpoint(resumed).provenance["steps"] == 20
    assert summary.train_loss == pytest.approx(straight_summary.train_loss)


def test_resume_refuses_a_missing_state_or_changed_settings(tmp_path):
    with pytest.raises(CheckpointError, match="no training state"):
        small_run(tmp_path, "never", resume=True)
    small_run(tmp_path, "run", steps=4)
    with pytest.raises(ConfigError, match="learning_rate was 0.005, now 0.001"):
        small_run(tmp_path, "run", steps=8, learning_rate=1e-3, resume=True)
    with pytest.raises(ConfigError, match="another model config"):
        small_run(tmp_path, "run", "transformer-postln", steps=8, resume=True)


def test_the_last_checkpoint_holds_the_final_step_and_metrics(tmp_path):
    # Step 6 is also a periodic save: the final validation must still come first.
    out, summary = small_run(tmp_path, "periodic", steps=6, eval_every=4, save_every=3)
    provenance = load_checkpoint(out).provenance
    assert provenance["steps"] == 6 and provenance["processes"] == 1 and provenance["training"]["seed"] == 1
    assert provenance["metrics"] == {"train_loss": summary.train_loss, "valid_loss": summary.valid_loss,
                                     "chrf": summary.chrf, "char_bleu": summary.bleu}  # a character-level target
    assert state_path(out).name == "periodic.train-state.safetensors" and state_path(out).is_file()
    assert not list(tmp_path.glob("*.partial"))


def test_schedule_warms_up_linearly_then_decays_as_inverse_square_root():
    rates = [learning_rate_at(step, 1.0, 4) for step in (1, 2, 4, 16, 64)]
    assert rates == pytest.approx([0.25, 0.5, 1.0, 0.5, 0.25])
    assert learning_rate_at(9, 1.0, 0) == pytest.approx(1 / 3)


# --- bad settings ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("setting, message", [
    ({"steps": 0}, "steps must be at least 1"),
    ({"batch_size": 0}, "batch_size must be at least 1"),
    ({"learning_rate": 0.0}, "learning_rate must be positive"),
    ({"label_smoothing": 1.0}, "label_smoothing must be in"),
    ({"warmup_steps": -1}, "warmup_steps must be 0 or more"),
    ({"clip_norm": -1.0}, "clip_norm must be"),
])
def test_bad_training_settings_are_one_line_config_errors(setting, message, tmp_path):
    with pytest.raises(ConfigError, match=message) as error:
        small_run(tmp_path, "bad", **setting)
    assert "\n" not in str(error.value)
    assert not (tmp_path / "bad.safetensors").exists()


def test_empty_corpus_and_mismatched_tokenizers_are_config_errors(tmp_path):
    source, target = build_tokenizers(SMALL)
    model_config = small_model_config("gru-additive", source, target)
    with pytest.raises(ConfigError, match="no pairs"):
        train(model_config, source, target, [], [], out_path=tmp_path / "x.safetensors", config=quick())
    other = CharTokenizer("xyz")
    with pytest.raises(ConfigError, match="vocabularies"):
        train(model_config, other, target, SMALL, [], out_path=tmp_path / "x.safetensors", config=quick())
    with pytest.raises(ConfigError, match="tokenizer must be one of"):
        build_tokenizers(SMALL, kind="bpe")
    with pytest.raises(ConfigError, match="no pairs"):
        build_tokenizers([])


def test_build_tokenizers_kinds_and_sharing():
    source, target = build_tokenizers([("ab", "xy")])
    assert source.characters == ["a", "b"] and target.characters == ["x", "y"]
    shared_source, shared_target = build_tokenizers([("ab", "xy")], shared=True)
    assert shared_source is shared_target and shared_source.characters == ["a", "b", "x", "y"]
    pairs = [(f"the house number {i}", f"la casa número {i}") for i in range(40)]
    source, target = build_tokenizers(pairs, kind="sentencepiece", vocab_size=60)
    assert isinstance(source, SentencePieceTokenizer) and source.vocab_size <= 60
    assert target.decode(target.encode("la casa")) == "la casa"


# --- PAIRS.tsv -------------------------------------------------------------------------------------------

def write(tmp_path, data: bytes, name: str = "pairs.tsv"):
    path = tmp_path / name
    path.write_bytes(data)
    return path


def test_read_pairs_reads_tabs_skips_blank_lines_and_strips_line_ends(tmp_path):
    path = write(tmp_path, "\ufeffhello\thola\r\n\n  \ngood night \tbuenas noches\n".encode())
    assert read_pairs(path) == [("hello", "hola"), ("good night", "buenas noches")]


@pytest.mark.parametrize("data, where, message", [
    (b"a\tb\nno tab here\n", ":2:", "found no TAB"),
    (b"a\tb\n\nx\ty\tz\n", ":3:", "found 2 TABs"),
    (b"\tb\n", ":1:", "the source side is empty"),
    (b"a\tb\nc\t  \n", ":2:", "the target side is empty"),
    (b"a\tb\nc\td\n\xe9t\xe9\tsummer\n", ":3:", "not UTF-8"),
])
def test_read_pairs_errors_name_the_file_and_line(tmp_path, data, where, message):
    path = write(tmp_path, data)
    with pytest.raises(DataError, match=message) as error:
        read_pairs(path)
    assert str(error.value).startswith(f"{path}{where}") and "\n" not in str(error.value)


@pytest.mark.parametrize("data", [b"", b"\n \n\n"])
def test_read_pairs_refuses_an_empty_file(tmp_path, data):
    path = write(tmp_path, data)
    with pytest.raises(DataError, match="no sentence pairs") as error:
        read_pairs(path)
    assert str(error.value).startswith(str(path))


def test_read_pairs_refuses_a_missing_file(tmp_path):
    with pytest.raises(DataError, match="no such file"):
        read_pairs(tmp_path / "absent.tsv")


def test_split_pairs_is_deterministic_and_keeps_a_source_on_one_side():
    pairs = [(f"sentence {i % 150}", f"frase {i}") for i in range(300)]  # each source twice
    train_pairs, valid = split_pairs(pairs, 0.2, seed=5)
    assert (train_pairs, valid) == split_pairs(list(pairs), 0.2, seed=5)
    assert not {s for s, _ in train_pairs} & {s for s, _ in valid}
    assert 30 <= len(valid) <= 90 and len(train_pairs) + len(valid) == len(pairs)
    assert split_pairs(pairs, 0.2, seed=6) != (train_pairs, valid)
    assert split_pairs(pairs, 0.0, seed=5) == (pairs, [])
    with pytest.raises(ConfigError, match="valid_fraction"):
        split_pairs(pairs, 1.0, seed=5)


def test_the_command_line_trains_with_the_librarys_defaults():
    from attnviz.cli import build_parser
    from models.nn.config import TrainingConfig

    args = build_parser().parse_args(["train", "--data", "x.tsv", "--arch", "gru-additive", "--out", "m.safetensors"])
    defaults = TrainingConfig()
    assert (args.steps, args.lr, args.warmup, args.batch_size, args.eval_every, args.save_every, args.valid_sentences,
            args.label_smoothing, args.clip, args.seed) == (
        defaults.steps, defaults.learning_rate, defaults.warmup_steps, defaults.batch_size, defaults.eval_every,
        defaults.save_every, defaults.validation_sentences, defaults.label_smoothing, defaults.clip_norm, defaults.seed)
