"""Import of Sockeye 3 model folders, against folders Sockeye itself wrote.

Sockeye 3.1 pins torch < 1.14 and numpy < 2: it cannot be installed beside this project's torch and numpy 2, so
it cannot run in this suite. It does run in a virtual environment that sees the system's torch and keeps its
own numpy 1.x; there its own ``sockeye-train`` wrote the folders under tests/data/sockeye/ (a few hundred
updates on a tiny corpus), and its own code computed what is compared here: logits (``SockeyeModel.forward``),
every head of every attention layer (its ``DotAttentionCell`` probabilities) and ``sockeye-translate --greedy``
output. tests/data/sockeye/make_fixtures.py says exactly how; rerun it there to renew them.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from attnviz.cli import main
from models.errors import CheckpointError
from models.importers import convert, detect_format
from models.inference.translator import Translator
from tests.helpers import fixture_copy, toolkit_outputs

DATA = Path(__file__).parent / "data" / "sockeye"
VARIANTS = ("transformer-preln", "transformer-postln")
SENTENCES = ["the cat sees a big house", "a small dog runs near the tree", "the bird eats a red fish"]
KINDS = {"self_attention": "enc_self", "autoregr_layer": "dec_self", "enc_attention": "cross"}
MAX_LEN = 40  # make_fixtures.py: sockeye-translate --max-output-length 40


def _reference(name: str) -> dict[str, np.ndarray]:
    return toolkit_outputs(DATA / name, "sockeye_outputs.npz")


def _copy(name: str, tmp_path: Path) -> Path:
    return fixture_copy(DATA / name, tmp_path, "sockeye_outputs.npz")


@pytest.mark.parametrize("name", VARIANTS)
def test_logits_and_every_head_equal_sockeye(name):
    assert detect_format(DATA / name) == "sockeye" == detect_format(DATA / name / "params.best")
    checkpoint = convert(DATA / name)
    reference = _reference(name)
    config = checkpoint.model.config
    compared = 0
    for index, sentence in enumerate(SENTENCES):
        src = reference[f"{index}/src"]
        assert checkpoint.source_tokenizer.encode(sentence) + [config.eos_id] == src.tolist()
        with torch.no_grad():
            logits, intermediates = checkpoint.model(torch.tensor(src)[None],
                                                     torch.tensor(reference[f"{index}/tgt_in"])[None],
                                                     need_weights=True)
        assert (logits[0] - torch.tensor(reference[f"{index}/logits"])).abs().max() < 1e-4
        for key, theirs in reference.items():
            if not key.startswith(f"{index}/attention/"):
                continue
            _, layer, block = key.split("/")[2].split(".")[:4][1:]
            ours = intermediates.attention[KINDS[block]][int(layer)][0]
            assert ours.shape == theirs.shape and (ours - torch.tensor(theirs)).abs().max() < 1e-5, key
            compared += 1
    assert compared == (config.encoder_layers + 2 * config.decoder_layers) * len(SENTENCES)


@pytest.mark.parametrize("name", VARIANTS)
def test_greedy_output_equals_sockeye_translate(name):
    reference = _reference(name)
    translator = Translator(convert(DATA / name), device="cpu")
    eos = translator.config.eos_id
    outputs = []
    for index, sentence in enumerate(SENTENCES):
        result = translator.translate(sentence, max_len=MAX_LEN)
        ours = [token for token in result.token_ids if token != eos]
        assert ours == reference[f"{index}/greedy"].tolist(), sentence
        outputs.append(result.text)
    assert len(set(outputs)) == len(SENTENCES)  # a model that says something different per sentence


def test_the_cli_converts_the_folder(tmp_path, capsys):
    folder = _copy("transformer-postln", tmp_path)
    output = tmp_path / "sockeye.safetensors"
    assert main(["convert", str(folder), "-o", str(output)]) == 0
    assert main(["info", str(output)]) == 0
    assert "sockeye" in capsys.readouterr().out
    assert main(["translate", "-c", str(output), SENTENCES[1]]) == 0
    assert capsys.readouterr().out.strip() == Translator(convert(folder), device="cpu").translate(SENTENCES[1]).text


def test_unsupported_sockeye_models_are_refused_in_one_line(tmp_path):
    folder = _copy("transformer-preln", tmp_path)
    config = folder / "config"
    text = config.read_text(encoding="utf-8")
    config.write_text(text.replace("decoder_type: transformer", "decoder_type: ssru_transformer", 1),
                      encoding="utf-8")
    with pytest.raises(CheckpointError, match=r"config: decoder_type ssru_transformer \(SSRU layers\) is not "
                                              r"supported; this version imports Sockeye 3 Transformers"):
        convert(folder)
    config.write_text(text.replace("num_source_factors: 1", "num_source_factors: 2", 1), encoding="utf-8")
    with pytest.raises(CheckpointError, match=r"source or target factors is not supported"):
        convert(folder)
    config.write_text(text, encoding="utf-8")
    vocab = folder / "vocab.src.0.json"
    vocab.write_text('{"<unk>": 0, "<pad>": 1, "<s>": 2, "</s>": 3}', encoding="utf-8")
    with pytest.raises(CheckpointError, match=r"vocab\.src\.0\.json: holds ids for 4 tokens \(4 entries\); the model "
                                              r"config says \d+$"):
        convert(folder)


def test_the_config_is_read_as_plain_data_without_building_objects(tmp_path):
    """Sockeye's config holds Python tags; a tag that would build an object elsewhere is only data here."""
    folder = _copy("transformer-preln", tmp_path)
    config = folder / "config"
    config.write_text(config.read_text(encoding="utf-8") + "extra: !!python/object/apply:os.system ['echo hi']\n",
                      encoding="utf-8")
    with pytest.raises(CheckpointError, match=r"config: cannot be read as Sockeye's model config"):
        convert(folder)
