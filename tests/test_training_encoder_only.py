"""Training an encoder-only model as a masked-language model: BERT's 80/10/10 masking of 15 % of each sentence's
characters, drawn the same for the same seed; `attnviz train --arch encoder-only` writes a checkpoint that loads and
fills a typed "_", whose held-out masked-character loss went down, and refuses what it cannot do in one line."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from safetensors.torch import load_file

from attnviz.cli import main
from models import make_config
from models.errors import ConfigError
from models.inference.fill_mask import fill_masks
from models.inference.translator import Translator
from models.storage.checkpoint import load_checkpoint
from models.training.masked_lm import MASK_CHARACTER, choose_masks, mask_id, masked_tokenizer

WORDS = ["shepherd", "light", "water", "earth", "heaven", "father", "mother", "garden", "bread", "stone", "river",
         "mountain", "silver", "golden", "wisdom", "spirit"]


def _config(tokenizer):
    return dataclasses.replace(make_config("encoder-only", tokenizer.vocab_size, tokenizer.vocab_size, d_model=16,
                                           layers=1, heads=2, max_len=32), mask_id=mask_id(tokenizer))


def test_bert_masking_chooses_15_percent_and_replaces_them_80_10_10_the_same_per_seed():
    tokenizer = masked_tokenizer(WORDS)
    config = _config(tokenizer)
    replacements = torch.tensor([i for i in range(4, tokenizer.vocab_size) if i != config.mask_id])
    ids = replacements[torch.randint(len(replacements), (400, 30))]  # characters, never the mask itself
    ids[:, 25] = config.eos_id
    ids[:, 26:] = config.pad_id
    inputs, labels = choose_masks(ids, config, torch.Generator().manual_seed(7), replacements=replacements)
    again = choose_masks(ids, config, torch.Generator().manual_seed(7), replacements=replacements)
    assert torch.equal(inputs, again[0]) and torch.equal(labels, again[1])  # the same seed, the same masks
    other = choose_masks(ids, config, torch.Generator().manual_seed(8), replacements=replacements)
    assert not torch.equal(labels, other[1])
    chosen = labels != -100
    assert not chosen[:, 25:].any()  # the end token and padding are never chosen
    assert torch.equal(labels[chosen], ids[chosen]) and torch.equal(inputs[~chosen], ids[~chosen])
    share = float(chosen[:, :25].float().mean())
    assert abs(share - 0.15) < 0.01
    masked = float((inputs[chosen] == config.mask_id).float().mean())
    kept = float((inputs[chosen] == ids[chosen]).float().mean())
    replaced = 1 - masked - kept
    assert abs(masked - 0.8) < 0.03 and abs(kept - 0.1) < 0.03 and abs(replaced - 0.1) < 0.03
    # (kept includes the random draws that hit the character itself: 1 in len(replacements))
    assert set(inputs[chosen & (inputs != ids) & (inputs != config.mask_id)].tolist()) <= set(replacements.tolist())
    assert bool(chosen.any(dim=1).all())  # every sentence predicts one character at least


def test_the_mask_character_is_refused_in_training_sentences():
    with pytest.raises(ConfigError, match="mask character"):
        masked_tokenizer(["a_b"])
    assert MASK_CHARACTER in masked_tokenizer(WORDS).characters


def _train(tmp_path, name: str, seed: int, capsys):
    data = tmp_path / "pairs.tsv"
    data.write_text("".join(f"{word}\tx\n" for word in WORDS * 2), encoding="utf-8")
    valid = tmp_path / "valid.tsv"
    valid.write_text("shepherds\tx\nmountains\tx\n", encoding="utf-8")
    out = tmp_path / name
    assert main(["train", "--data", str(data), "--valid", str(valid), "--arch", "encoder-only", "-o", str(out),
                 "--steps", "30", "--seed", str(seed), "--batch-size", "8", "--lr", "3e-3", "--warmup", "5",
                 "--eval-every", "15", "--no-progress", "--set", "d_model=16", "--set", "layers=1", "--set",
                 "heads=2", "--set", "max_len=32"]) == 0
    return out, capsys.readouterr().err


def test_attnviz_train_encoder_only_writes_a_model_that_fills_masks(tmp_path, capsys):
    out, log = _train(tmp_path, "a.safetensors", 3, capsys)
    losses = [float(value) for value in __import__("re").findall(r"held-out masked loss ([0-9.]+)", log)]
    assert len(losses) >= 2 and losses[-1] < losses[0], log
    assert "accuracy" in log
    checkpoint = load_checkpoint(out)
    assert checkpoint.model.config.arch == "encoder-only" and not checkpoint.model.decodes
    translator = Translator(checkpoint, "cpu")
    result = fill_masks(translator, translator.source("sh_pherd"))
    assert [prediction.position for prediction in result.predictions] == [2]
    assert len(result.text) == len("shepherd") and "_" not in result.text
    again, _ = _train(tmp_path, "b.safetensors", 3, capsys)
    weights, same = load_file(str(out)), load_file(str(again))
    assert all(torch.equal(weights[name], same[name]) for name in weights)  # deterministic per seed
    other, _ = _train(tmp_path, "c.safetensors", 4, capsys)
    assert not all(torch.equal(weights[name], load_file(str(other))[name]) for name in weights)


def test_what_encoder_only_training_cannot_do_is_one_line(tmp_path, capsys):
    data = tmp_path / "pairs.tsv"
    data.write_text("team\tx\n", encoding="utf-8")
    for extra, expected in ((["--tokenizer", "sentencepiece"], "--tokenizer sentencepiece"),
                            (["--resume"], "--resume"), (["--set", "mask_id=3"], "mask_id")):
        code = main(["train", "--data", str(data), "--valid", str(data), "--arch", "encoder-only", "-o",
                     str(tmp_path / "x.safetensors"), "--steps", "1", *extra])
        err = capsys.readouterr().err
        assert code == 1 and err.startswith("attnviz: error: ") and expected in err and err.count("\n") == 1, err


def test_the_help_lists_the_encoder_only_settings(capsys):
    with pytest.raises(SystemExit):
        main(["train", "--arch", "encoder-only", "--help"])
    out = capsys.readouterr().out
    assert "--set keys of encoder-only" in out and "80/10/10" in out and "type_vocab_size=0" in out
