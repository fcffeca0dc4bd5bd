"""The hf-causal importer's files and refusals, and the decoder-only config and build: sharded safetensors with their
index, ``pytorch_model.bin``, ``generation_config.json``'s end-token lists, ``attnviz convert`` writing a checkpoint
that loads, one line for each folder it cannot import (remote code never runs), and models of real sizes built on
the meta device."""

from __future__ import annotations

import json
import os

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
transformers = pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

from attnviz.cli import main  # noqa: E402
from models import load_checkpoint  # noqa: E402
from models.errors import CheckpointError, ConfigError  # noqa: E402
from models.importers import convert, detect_format  # noqa: E402
from models.nn.build import build_model, parameters_on_meta  # noqa: E402
from models.nn.config import DecoderOnlyConfig, config_from_dict, config_to_dict  # noqa: E402
from tests.test_decoder_only import EOS, SENTENCES, build, encode, theirs  # noqa: E402


def same_logits(checkpoint, original, folder) -> bool:
    ids = encode(folder, SENTENCES[0])
    with torch.no_grad():
        logits, _ = checkpoint.model(torch.tensor([ids[:2]]), torch.tensor([ids[2:]]))
    return bool((logits - theirs(original, ids).logits[:, 2:]).abs().max() < 1e-4)


def test_sharded_safetensors_are_read_through_their_index(tmp_path):
    folder = tmp_path / "qwen2"
    original = build(folder, "qwen2")
    for path in folder.glob("*.safetensors"):
        path.unlink()
    original.save_pretrained(folder, max_shard_size="40KB")
    assert (folder / "model.safetensors.index.json").is_file() and len(list(folder.glob("model-*.safetensors"))) > 1
    assert detect_format(folder) == "hf-causal"
    assert same_logits(convert(folder), original, folder)


def test_a_shard_the_index_names_must_be_there(tmp_path):
    folder = tmp_path / "qwen2"
    original = build(folder, "qwen2")
    (folder / "model.safetensors").unlink()
    original.save_pretrained(folder, max_shard_size="40KB")
    next(folder.glob("model-*.safetensors")).unlink()
    with pytest.raises(CheckpointError, match="names a shard"):
        convert(folder)


def test_pytorch_model_bin_is_read_safely(tmp_path):
    folder = tmp_path / "llama"
    original = build(folder, "llama")
    (folder / "model.safetensors").unlink()
    torch.save(original.state_dict(), folder / "pytorch_model.bin")  # as transformers 4 wrote it
    assert same_logits(convert(folder), original, folder)


def test_generation_config_end_token_lists_and_bos(tmp_path):
    folder = tmp_path / "llama"
    build(folder, "llama")
    (folder / "generation_config.json").write_text(json.dumps({"bos_token_id": 3, "eos_token_id": [EOS, 7, 9]}))
    config = convert(folder).model.config
    assert (config.bos_id, config.eos_id, config.stop_ids) == (3, EOS, (7, 9))


def test_attnviz_convert_writes_a_checkpoint_that_loads(tmp_path, capsys):
    folder = tmp_path / "gemma2"
    original = build(folder, "gemma2")
    out = tmp_path / "gemma2.safetensors"
    assert main(["convert", str(folder), "-o", str(out)]) == 0, capsys.readouterr().err
    loaded = load_checkpoint(out)
    assert loaded.model.config.arch == "decoder-only" and loaded.model.sliding_windows() == [4, 0, 4]
    assert same_logits(loaded, original, folder)


def _rewrite_config(folder, **changes) -> None:
    path = folder / "config.json"
    data = json.loads(path.read_text())
    data.update(changes)
    path.write_text(json.dumps(data))


def _one_line(error) -> str:
    text = str(error.value)
    assert "\n" not in text
    return text


@pytest.mark.parametrize(("changes", "expected"), [
    ({"model_type": "falcon", "architectures": ["FalconForCausalLM"]}, "a Hugging Face falcon model; this version "
                                                                       "imports decoder-only model types gpt2, llama"),
    ({"model_type": "mixtral", "architectures": ["MixtralForCausalLM"], "num_local_experts": 8},
     "mixtral is a mixture-of-experts model"),
    ({"model_type": "mamba", "architectures": ["MambaForCausalLM"]}, "mamba is a state-space model"),
    ({"model_type": "llava", "architectures": ["LlavaForConditionalGeneration"], "vision_config": {}},
     "llava is a multimodal model"),
    ({"architectures": ["LlamaForSequenceClassification", "LlamaForCausalLMX"]}, "attnviz imports the language model"),
    ({"rope_parameters": {"rope_type": "yarn", "factor": 4.0, "rope_theta": 10000.0}}, "rope scaling 'yarn'"),
    ({"partial_rotary_factor": 0.5}, "partial_rotary_factor 0.5 is not supported"),
])
def test_folders_it_cannot_import_are_one_line_each(tmp_path, changes, expected):
    folder = tmp_path / "llama"
    build(folder, "llama")
    _rewrite_config(folder, **changes)
    with pytest.raises(CheckpointError) as error:
        convert(folder)
    assert expected in _one_line(error)


def test_remote_code_is_refused_and_never_runs(tmp_path):
    folder = tmp_path / "llama"
    build(folder, "llama")
    marker = tmp_path / "ran"
    (folder / "modeling_custom.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
    _rewrite_config(folder, auto_map={"AutoModelForCausalLM": "modeling_custom.CustomForCausalLM"})
    with pytest.raises(CheckpointError) as error:
        convert(folder)
    assert "names its own model code (auto_map: modeling_custom.CustomForCausalLM)" in _one_line(error)
    assert not marker.exists()


def test_a_missing_tokenizer_is_one_line(tmp_path):
    folder = tmp_path / "mistral"
    build(folder, "mistral")
    (folder / "tokenizer.json").unlink()
    with pytest.raises(CheckpointError) as error:
        convert(folder)
    assert "has no tokenizer.json" in _one_line(error)


def test_a_tokenizer_larger_than_the_embedding_is_one_line(tmp_path):
    folder = tmp_path / "qwen3"
    build(folder, "qwen3", vocab_size=100)  # the tokenizer has 300 ids
    with pytest.raises(CheckpointError) as error:
        convert(folder)
    assert "beyond the model's vocabulary of 100" in _one_line(error)


def test_no_end_token_is_one_line(tmp_path):
    folder = tmp_path / "qwen2"
    build(folder, "qwen2", eos_token_id=None)
    with pytest.raises(CheckpointError) as error:
        convert(folder)
    assert "no end token" in _one_line(error)


LLAMA_1B = dict(arch="decoder-only", vocab_size=128_256, d_model=2048, layers=16, heads=32, kv_heads=8, d_ff=8192,
                max_len=131_072, rope_theta=500_000.0, rope_scaling="llama3", rope_factor=32.0,
                rope_original_max_len=8192, tie_output=True, bos_id=128_000, eos_id=128_001, pad_id=128_001,
                stop_ids=(128_008, 128_009))


def test_a_model_of_real_size_is_built_on_meta_and_its_config_saves_verbatim():
    config = DecoderOnlyConfig(**LLAMA_1B)
    with parameters_on_meta():
        model = build_model(config)
    assert all(parameter.device.type == "meta" for parameter in model.parameters())
    assert model.parameter_count() == 1_235_814_400  # Llama 3.2 1B's published count
    assert model.kv_groups()[:5] == [0, 0, 0, 0, 1]
    saved = json.loads(json.dumps(config_to_dict(config)))
    assert config_from_dict(saved) == config


@pytest.mark.parametrize(("changes", "expected"), [
    ({"kv_heads": 5}, "heads (32) must be a multiple of kv_heads (5)"),
    ({"window_layers": "LG"}, "window_layers must hold one L (local) or G (global) per layer (16)"),
    ({"positions": "alibi"}, "positions must be one of learned, rotary"),
    ({"rope_factor": 0.0}, "llama3 rope scaling needs"),
    ({"stop_ids": (128_008, 200_000)}, "stop_ids must be token ids below the vocabulary size"),
    ({"rope_theta": 1e13}, "rope_theta must be a finite number of at most"),
])
def test_a_bad_config_is_one_line(changes, expected):
    with pytest.raises(ConfigError, match=expected.replace("(", r"\(").replace(")", r"\)")):
        DecoderOnlyConfig(**{**LLAMA_1B, **changes}).validate()


def test_a_transformers_4_config_reads_the_same(tmp_path):
    """config.json as transformers 4 wrote it: ``rope_theta`` and ``rope_scaling`` at the top, no ``layer_types``."""
    folder = tmp_path / "llama"
    original = build(folder, "llama")
    data = json.loads((folder / "config.json").read_text())
    parameters = data.pop("rope_parameters")
    data["rope_theta"] = parameters.pop("rope_theta")
    data["rope_scaling"] = parameters
    (folder / "config.json").write_text(json.dumps(data))
    checkpoint = convert(folder)
    assert checkpoint.model.config.rope_scaling == "llama3" and same_logits(checkpoint, original, folder)
    gemma = tmp_path / "gemma2"
    original = build(gemma, "gemma2")
    _rewrite_config(gemma, layer_types=None)
    checkpoint = convert(gemma)
    assert checkpoint.model.sliding_windows() == [4, 0, 4] and same_logits(checkpoint, original, gemma)


def test_learned_positions_end_in_one_line(tmp_path):
    from models.errors import InputError

    folder = tmp_path / "gpt2"
    build(folder, "gpt2")
    model = convert(folder).model
    with pytest.raises(InputError, match="reach position 65; this model has 64 positions"):
        model(torch.zeros(1, 60, dtype=torch.long) + 5, torch.zeros(1, 5, dtype=torch.long) + 5)
