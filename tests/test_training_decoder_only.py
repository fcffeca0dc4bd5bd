"""Training a decoder-only model: each pair is one sequence (the prompt, the separator <s>, the target, </s>), the
loss is taken on the target positions only, and `attnviz train --arch decoder-only` writes a checkpoint that loads,
translates and whose loss went down."""

from __future__ import annotations

import re

import pytest
import torch
import torch.nn.functional as F

from attnviz.cli import main
from models import build_model, make_config
from models.errors import ConfigError
from models.inference.batches import collate, cut_sequence, encode_pairs, sequence_length
from models.inference.translator import Translator
from models.storage.checkpoint import load_checkpoint
from models.text.piglatin import to_pig_latin
from models.text.tokenizers import CharTokenizer
from models.training.trainer import TrainingConfig, _loss_sum, build_tokenizers, train

PAIRS = [("team", "eamtay"), ("a", "away")]


def tiny_model(tokenizer, **settings):
    torch.manual_seed(0)
    config = make_config("decoder-only", tokenizer.vocab_size, tokenizer.vocab_size, d_model=16, layers=2, heads=2,
                         max_len=32, dropout=0.0, **settings)
    return build_model(config).eval()


def test_one_training_sequence_is_prompt_separator_target_end():
    source, target = build_tokenizers(PAIRS, "char", shared=True)
    model = tiny_model(source)
    config = model.config
    assert (config.bos_id, config.eos_id, config.pad_id, config.prompt_separator) == (2, 3, 0, True)
    assert (source.token(2), source.token(3)) == ("<s>", "</s>")
    examples = encode_pairs(PAIRS, source, target=target, model_config=config, name="training")
    batch = collate(examples, config, torch.device("cpu"))

    def ids(text):
        return [source.encode(character)[0] for character in text]

    fed = torch.cat([batch.src, batch.tgt_in], dim=1).tolist()
    # team <s> eamtay (the expected outputs: eamtay </s>); a <s> away, padded after the shorter prompt and target
    assert fed[0] == ids("team") + [2] + ids("eamtay")
    assert fed[1] == ids("a") + [0, 0, 0] + [2] + ids("away") + [0, 0]
    assert batch.tgt_out.tolist() == [ids("eamtay") + [3], ids("away") + [3, 0, 0]]
    assert source.tokens(fed[0]) == ["t", "e", "a", "m", "<s>", "e", "a", "m", "t", "a", "y"]
    assert [sequence_length(example, config) for example in examples] == [11, 6]
    assert batch.tokens == 7 + 5


def test_the_loss_is_taken_on_the_target_positions_only():
    """The loss of a pair is the language model's cross-entropy from the separator's position on (each predicts
    the next target token, the last one </s>), never on predicting the prompt; a padded batch adds up its pairs."""
    source, target = build_tokenizers(PAIRS, "char", shared=True)
    model = tiny_model(source)
    config = model.config
    examples = encode_pairs(PAIRS, source, target=target, model_config=config, name="training")
    with torch.no_grad():
        alone = []
        for example in examples:
            batch = collate([example], config, torch.device("cpu"))
            sequence = torch.cat([batch.src, batch.tgt_in], dim=1)  # [1, S + 1 + T]
            every, _ = model(sequence[:, :0], sequence)  # the whole sequence as a plain language model
            prompt_len = batch.src.shape[1]
            expected = F.cross_entropy(every[0, prompt_len:], batch.tgt_out[0], reduction="sum")
            everywhere = F.cross_entropy(every[0, :-1], sequence[0, 1:], reduction="sum")
            loss = _loss_sum(model, batch, pad_id=config.pad_id, label_smoothing=0.0)
            assert float(loss) == pytest.approx(float(expected), rel=1e-5)
            assert float(loss) != pytest.approx(float(everywhere), rel=1e-3)
            alone.append(float(loss))
        both = _loss_sum(model, collate(examples, config, torch.device("cpu")), pad_id=0, label_smoothing=0.0)
    assert float(both) == pytest.approx(sum(alone), rel=1e-5)


def test_a_long_pair_is_cut_to_fill_the_models_positions():
    assert cut_sequence(list(range(5)), list(range(10, 14)), 16) == (list(range(5)), list(range(10, 14)))
    assert cut_sequence(list(range(20)), list(range(30, 33)), 16) == (list(range(12)), list(range(30, 33)))
    assert cut_sequence(list(range(20)), list(range(30, 50)), 16) == (list(range(7)), list(range(30, 38)))
    tokenizer = CharTokenizer.build(["ab"])
    config = make_config("decoder-only", tokenizer.vocab_size, tokenizer.vocab_size, max_len=8, d_model=16)
    ((prompt, answer),) = encode_pairs([("ab" * 5, "ba" * 5)], tokenizer, target=tokenizer, model_config=config,
                                       name="training")
    assert len(prompt) + 1 + len(answer) == 8 and len(prompt) == 3


def test_a_decoder_only_model_takes_one_vocabulary_and_its_layout_is_fixed():
    with pytest.raises(ConfigError, match="one vocabulary .* --shared-vocab"):
        make_config("decoder-only", 10, 12)
    with pytest.raises(ConfigError, match="no settings named prompt_separator"):
        make_config("decoder-only", 10, 10, prompt_separator=False)
    config = make_config("decoder-only", 10, 10, d_model=64)
    assert (config.positions, config.norm_kind, config.activation, config.gated_ffn, config.d_ff) == (
        "rotary", "rms", "swish", True, 256)


def test_training_refuses_two_tokenizers_for_one_decoder_only_model(tmp_path):
    source, target = CharTokenizer(list("abc")), CharTokenizer(list("xyz"))
    config = make_config("decoder-only", source.vocab_size, target.vocab_size, d_model=16, layers=1, heads=2)
    with pytest.raises(ConfigError, match="one tokenizer; build them with shared=True"):
        train(config, source, target, [("abc", "xyz")], [], out_path=tmp_path / "m.safetensors",
              config=TrainingConfig(steps=1, progress=False))
    assert not (tmp_path / "m.safetensors").exists()


def test_train_help_lists_the_decoder_only_settings_and_layout(capsys):
    with pytest.raises(SystemExit):
        main(["train", "--arch", "decoder-only", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "--set keys of decoder-only" in out and "rope_theta=10000.0" in out and "norm_kind=\"rms\"" in out
    assert "loss on the target positions only" in out and "prompt_separator" not in out


def test_the_command_line_trains_a_decoder_only_model_whose_loss_goes_down(capsys, tmp_path):
    words = ["team", "queen", "apple", "string", "school", "river", "yellow", "shopping", "impress", "rhythm",
             "hello", "world", "quiet", "mountain", "strength", "joy"]
    data = tmp_path / "pairs.tsv"
    data.write_text("".join(f"{word}\t{to_pig_latin(word)}\n" for word in words), encoding="utf-8")
    out = tmp_path / "pig.safetensors"
    code = main(["train", "--data", str(data), "--valid", str(data), "--arch", "decoder-only", "-o", str(out),
                 "--tokenizer", "char", "--steps", "40", "--batch-size", "8", "--lr", "3e-3", "--warmup", "5",
                 "--eval-every", "10", "--valid-sentences", "2", "--no-progress", "--seed", "2",
                 "--set", "d_model=32", "--set", "layers=2", "--set", "heads=2", "--set", "max_len=32"])
    err = capsys.readouterr().err
    assert code == 0, err
    losses = [float(value) for value in re.findall(r"valid_loss ([0-9.]+)", err)]
    assert len(losses) == 4 and losses[-1] < 0.8 * losses[0], err
    assert "chrf" in err and f"saved {out} after 40 steps" in err

    checkpoint = load_checkpoint(out)
    config = checkpoint.model.config
    assert (config.arch, config.d_model, config.layers, config.prompt_separator) == ("decoder-only", 32, 2, True)
    assert checkpoint.source_tokenizer.to_dict() == checkpoint.target_tokenizer.to_dict()
    assert checkpoint.provenance["steps"] == 40
    assert checkpoint.provenance["metrics"]["valid_loss"] == pytest.approx(losses[-1], abs=1e-3)
    result = Translator(checkpoint, "cpu").translate("team", max_len=12)
    assert main(["translate", "-c", str(out), "--max-len", "12", "team"]) == 0
    assert capsys.readouterr().out.strip() == result.text
