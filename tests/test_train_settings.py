"""Training your own model from the command line: the --set keys are listed with their defaults, a misspelt one
gets its nearest name, d_ff follows d_model, the progress says what the training loss includes, and BLEU of a
character-level target counts characters."""

from __future__ import annotations

import pytest
import sacrebleu

from attnviz.cli import main
from models.nn.config import make_config
from models.storage.checkpoint import load_checkpoint
from models.text.scores import corpus_scores
from models.training.trainer import progress_line
from tests.helpers import write_pairs

PIG_LATIN = [("hello", "ellohay"), ("world", "orldway"), ("the", "ethay"), ("air", "airway"), ("joy", "oyjay"),
             ("strength", "engthstray"), ("impress", "impressway"), ("mat", "atmay"), ("cat", "atcay"),
             ("dog", "ogday")]


@pytest.fixture
def pairs(tmp_path):
    return write_pairs(tmp_path / "pairs.tsv", PIG_LATIN)


def test_train_help_lists_the_set_keys_of_the_chosen_architecture_with_defaults(capsys):
    with pytest.raises(SystemExit) as done:
        main(["train", "--arch", "gru-additive", "--help"])
    out = capsys.readouterr().out
    assert done.value.code == 0
    assert "--set keys of gru-additive" in out and "hidden=128" in out and 'additive_activation="relu"' in out
    assert "d_model=" not in out.split("--set keys of")[1]  # only the chosen architecture's
    with pytest.raises(SystemExit):
        main(["train", "--arch", "transformer-postln", "--help"])
    out = capsys.readouterr().out
    assert 'norm_position="post"' in out and "final_norm=false" in out and "d_ff follows d_model" in out
    with pytest.raises(SystemExit):
        main(["train", "--help"])
    out = capsys.readouterr().out
    assert "d_model=256" in out and "hidden=128" in out  # without --arch: every family's


def test_a_misspelt_set_key_gets_the_nearest_name_and_the_list(capsys, tmp_path, pairs):
    code = main(["train", "--data", str(pairs), "--arch", "gru-additive", "-o", str(tmp_path / "m.safetensors"),
                 "--tokenizer", "char", "--set", "hiden=8"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 1 and len(err) == 1
    assert "gru-additive has no settings named hiden (did you mean hidden?)" in err[0]
    assert "its --set keys: hidden, dropout, max_len" in err[0]


def test_d_ff_follows_d_model_unless_set():
    assert make_config("transformer-preln", 10, 10).d_ff == 1024  # the default pair, 256 and 4 × 256
    assert make_config("transformer-preln", 10, 10, d_model=64).d_ff == 256
    assert make_config("transformer-postln", 10, 10, d_model=64, d_ff=100).d_ff == 100


def test_character_bleu_counts_characters():
    outputs = [target for _, target in PIG_LATIN]
    word_bleu = sacrebleu.corpus_bleu(outputs, [outputs]).score  # one-word outputs: no 4-gram of words to match
    assert word_bleu == 0.0 and sacrebleu.corpus_chrf(outputs, [outputs]).score == pytest.approx(100.0)
    assert corpus_scores(outputs, outputs, characters=True) == (pytest.approx(100.0), pytest.approx(100.0))
    wrong = [target[::-1] for target in outputs]
    assert corpus_scores(wrong, outputs, characters=True)[1] == pytest.approx(
        sacrebleu.corpus_bleu(wrong, [outputs], tokenize="char").score)
    assert corpus_scores(outputs, outputs, characters=False)[1] == word_bleu


def test_the_progress_says_the_training_loss_includes_label_smoothing():
    metrics = {"train_loss": 0.81234, "valid_loss": 0.5, "chrf": 98.0, "char_bleu": 97.0}
    line = progress_line(300, 12.4, metrics, label_smoothing=0.1)
    assert line == ("step 300 (12 s): train_loss 0.812 (label smoothing 0.1 included)  valid_loss 0.500  "
                    "chrf 98.000  char_bleu 97.000")
    assert "label smoothing" not in progress_line(300, 12.4, metrics, label_smoothing=0.0)


def test_a_small_run_from_the_command_line(capsys, tmp_path, pairs):
    out = tmp_path / "pig.safetensors"
    code = main(["train", "--data", str(pairs), "--valid", str(pairs), "--arch", "transformer-preln", "-o", str(out),
                 "--steps", "2", "--tokenizer", "char", "--no-progress", "--set", "d_model=16", "--set", "heads=2",
                 "--set", "encoder_layers=1", "--set", "decoder_layers=1", "--valid-sentences", "3"])
    err = capsys.readouterr().err
    assert code == 0, err
    assert "train_loss" in err and "(label smoothing 0.1 included)" in err and "BLEU on characters" in err
    checkpoint = load_checkpoint(out)
    assert checkpoint.config.d_ff == 64
    assert "char_bleu" in checkpoint.provenance["metrics"] and "bleu" not in checkpoint.provenance["metrics"]
