"""The hf-encoder importer's refusals and the encoder-only config and build: one line for each folder it cannot
import, for a config that cannot be, and for decoding, which an encoder-only model does not do; models of real sizes
built on the meta device; ``attnviz info`` and ``attnviz translate`` on a bare encoder."""

from __future__ import annotations

import json
import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
transformers = pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

from attnviz.cli import main  # noqa: E402
from models.errors import CheckpointError, ConfigError, InputError  # noqa: E402
from models.importers import convert  # noqa: E402
from models.inference.decoding import finish  # noqa: E402
from models.inference.translator import Translator  # noqa: E402
from models.nn.build import build_model, parameters_on_meta  # noqa: E402
from models.nn.config import config_from_dict, config_to_dict  # noqa: E402
from models.nn.encoder_config import EncoderOnlyConfig  # noqa: E402
from tests.test_encoder_only import build  # noqa: E402


def _rewrite(path, **changes) -> None:
    data = json.loads(path.read_text())
    data.update(changes)
    path.write_text(json.dumps(data))


def _one_line(error) -> str:
    text = str(error.value)
    assert "\n" not in text
    return text


@pytest.fixture(scope="module")
def bert_folder(tmp_path_factory):
    folder = tmp_path_factory.mktemp("bert")
    build(folder, "bert")
    return folder


def _copy(folder, tmp_path):
    import shutil

    return shutil.copytree(folder, tmp_path / "copy")


@pytest.mark.parametrize(("changes", "expected"), [
    ({"architectures": ["BertForSequenceClassification"]},
     "holds a BertForSequenceClassification; attnviz imports the masked language model or the bare encoder "
     "(BertForMaskedLM, BertModel)"),
    ({"position_embedding_type": "relative_key"}, "position_embedding_type 'relative_key' is not supported"),
    ({"hidden_act": "swiglu"}, "activation 'swiglu' is not supported"),
])
def test_folders_it_cannot_import_are_one_line_each(bert_folder, tmp_path, changes, expected):
    folder = _copy(bert_folder, tmp_path)
    _rewrite(folder / "config.json", **changes)
    with pytest.raises(CheckpointError) as error:
        convert(folder)
    assert expected in _one_line(error)


def test_another_model_type_names_the_types_imported(bert_folder, tmp_path):
    folder = _copy(bert_folder, tmp_path)
    _rewrite(folder / "config.json", model_type="electra", architectures=["ElectraForMaskedLM"])
    with pytest.raises(CheckpointError) as error:
        convert(folder)
    assert "a Hugging Face electra model; this version imports model types" in _one_line(error)
    assert _one_line(error).endswith("bert, roberta, distilbert")


def test_a_tokenizer_larger_than_the_token_table_is_refused(bert_folder, tmp_path):
    folder = _copy(bert_folder, tmp_path)
    vocab_size = json.loads((folder / "config.json").read_text())["vocab_size"]
    definition = json.loads((folder / "tokenizer.json").read_text())
    definition["added_tokens"].append({"id": vocab_size + 7, "content": "[EXTRA]", "single_word": False,
                                       "lstrip": False, "rstrip": False, "normalized": False, "special": True})
    (folder / "tokenizer.json").write_text(json.dumps(definition))
    with pytest.raises(CheckpointError) as error:
        convert(folder)
    assert f"has token id {vocab_size + 7}, beyond the model's vocabulary of {vocab_size}" in _one_line(error)


def test_a_folder_without_a_tokenizer_is_refused_by_the_cli_in_one_line(bert_folder, tmp_path, capsys):
    folder = _copy(bert_folder, tmp_path)
    (folder / "tokenizer.json").unlink()
    with pytest.raises(CheckpointError) as error:
        convert(folder)
    assert "the folder has no tokenizer.json" in _one_line(error)
    assert main(["convert", str(folder), "-o", str(tmp_path / "out.safetensors")]) == 1
    err = capsys.readouterr().err
    assert err.startswith("attnviz: error: ") and err.count("\n") == 1 and "no tokenizer.json" in err
    assert not (tmp_path / "out.safetensors").exists()


def test_an_encoder_only_model_refuses_to_decode_in_one_line(bert_folder):
    translator = Translator(convert(bert_folder), "cpu")
    with pytest.raises(InputError) as error:
        finish(translator.decode(translator.source("the cat sat .")))
    assert "an encoder-only model does not decode" in _one_line(error)


def test_a_bare_encoders_sentence_is_printed_with_the_head_missing_said(tmp_path, capsys):
    folder = tmp_path / "bare"
    build(folder, "distilbert", head=False)
    out = tmp_path / "bare.safetensors"
    assert main(["convert", str(folder), "-o", str(out)]) == 0
    capsys.readouterr()
    assert main(["translate", "-c", str(out), "the cat sat on the [MASK] ."]) == 0
    captured = capsys.readouterr()
    assert captured.out == "the cat sat on the [MASK] .\n"
    assert "attnviz: note: input 1: this model has no masked-language-model head" in captured.err
    assert main(["info", "-c", str(out), "--json"]) == 0
    described = json.loads(capsys.readouterr().out)
    assert described["arch"] == "encoder-only" and described["attention_kinds"] == ["enc_self"]


def test_the_config_round_trips_and_says_what_is_wrong_in_one_line():
    config = EncoderOnlyConfig(arch="encoder-only", vocab_size=100, position_style="after_padding", pad_id=1,
                               mask_id=4)
    assert config_from_dict(config_to_dict(config)) == config
    for changes, expected in (({"position_style": "rotary"}, "position_style must be one of index, after_padding"),
                              ({"mask_id": 100}, "mask_id must be -1 (none) or a token id below"),
                              ({"heads": 3}, "d_model (256) must be divisible by heads (3)")):
        with pytest.raises(ConfigError) as error:
            config_from_dict({**config_to_dict(config), **changes})
        assert expected in _one_line(error)


def test_a_bert_base_sized_model_is_built_on_meta_without_weight_memory():
    config = EncoderOnlyConfig(arch="encoder-only", vocab_size=30522, d_model=768, layers=12, heads=12, d_ff=3072,
                               pad_id=0, bos_id=101, eos_id=102, mask_id=103)
    with parameters_on_meta():
        model = build_model(config)
    assert all(parameter.device.type == "meta" for parameter in model.parameters())
    assert model.head.output.weight is model.embedding.tokens.weight  # tied: one parameter
    assert 109_000_000 < model.parameter_count() < 111_000_000  # bert-base-uncased's 110M with its MLM head
    assert model.attention_shape() == {"enc_self": (12, 12)}


def test_commands_that_need_decoding_or_a_target_say_so_in_one_line(bert_folder, tmp_path, capsys):
    out = tmp_path / "bert.safetensors"
    assert main(["convert", str(bert_folder), "-o", str(out)]) == 0
    pairs = tmp_path / "pairs.tsv"
    pairs.write_text("the cat sat .\tthe cat sat .\nthe dog .\tthe dog .\n", encoding="utf-8")
    capsys.readouterr()
    assert main(["evaluate", "-c", str(out), "--data", str(pairs)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("attnviz: error: an encoder-only model ") and err.count("\n") == 1, err
    for command in ("importance", "stats"):  # these score the masked tokens (plain lines masked by hash)
        assert main([command, "-c", str(out), "--data", str(pairs)]) == 0, command
    capsys.readouterr()
    assert main(["stats", "-c", str(out), "--data", str(pairs), "--decode"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("attnviz: error: ") and err.count("\n") == 1, err


def test_export_of_a_sentence_without_a_mask_writes_no_predictions(bert_folder, tmp_path, capsys):
    import numpy as np

    out = tmp_path / "bert.safetensors"
    assert main(["convert", str(bert_folder), "-o", str(out)]) == 0
    npz = tmp_path / "plain.npz"
    assert main(["export", "-c", str(out), "the cat sat .", "-o", str(npz)]) == 0
    assert "attnviz: note: no token was masked" in capsys.readouterr().err
    with np.load(npz) as arrays:
        assert arrays["fill_ids"].shape == (0, 0) and arrays["masked_positions"].shape == (0,)
        assert arrays["enc_self_L0"].shape[1] == len(arrays["src_ids"]) == 6  # [CLS] the cat sat . [SEP]
