"""The single-file checkpoint: exact round trips and a clear CheckpointError for every kind of bad file."""

from __future__ import annotations

import json
import struct

import pytest
import torch
from safetensors.torch import save_file

from models import build_model
from models.storage.checkpoint import load_checkpoint, read_metadata, save_checkpoint, unique_tensors
from models.nn.config import ARCHS
from models.errors import CheckpointError
from models.text.tokenizers import SentencePieceTokenizer

from tests.helpers import tiny_config, write_checkpoint_twice_the_free_memory


@pytest.mark.parametrize("arch", ARCHS)
def test_round_trip_restores_every_weight(tmp_path, char_tokenizer, arch):
    torch.manual_seed(1)
    model = build_model(tiny_config(arch))
    path = save_checkpoint(tmp_path / "m.safetensors", model, char_tokenizer, char_tokenizer, {"steps": 7})
    loaded = load_checkpoint(path)
    assert loaded.config == model.config
    assert loaded.provenance == {"steps": 7}
    original, restored = model.state_dict(), loaded.model.state_dict()
    assert original.keys() == restored.keys()
    for name in original:
        assert torch.equal(original[name], restored[name]), name
    assert not loaded.model.training


def test_tied_weights_are_stored_once_and_tied_again(tmp_path, char_tokenizer):
    model = build_model(tiny_config("transformer-postln", share_embeddings=True, tie_output=True))
    path = save_checkpoint(tmp_path / "tied.safetensors", model, char_tokenizer, char_tokenizer)
    loaded = load_checkpoint(path).model
    assert loaded.output.weight is loaded.tgt_embedding.tokens.weight
    assert loaded.src_embedding.tokens.weight is loaded.tgt_embedding.tokens.weight


def test_float16_checkpoint_is_half_the_size_and_close(tmp_path, char_tokenizer):
    model = build_model(tiny_config("transformer-preln"))
    full = save_checkpoint(tmp_path / "f32.safetensors", model, char_tokenizer, char_tokenizer)
    half = save_checkpoint(tmp_path / "f16.safetensors", model, char_tokenizer, char_tokenizer, dtype=torch.float16)
    assert half.stat().st_size < 0.6 * full.stat().st_size
    weight = load_checkpoint(half).model.output.weight
    assert torch.allclose(weight, model.output.weight, atol=1e-3)


def test_sentencepiece_tokenizers_travel_in_the_file(tmp_path):
    texts = [f"the {word} is here and there" for word in ("house", "river", "tree", "road", "light")] * 4
    tokenizer = SentencePieceTokenizer.train(texts, vocab_size=40)
    model = build_model(tiny_config("gru-additive", vocab_size=tokenizer.vocab_size))
    path = save_checkpoint(tmp_path / "spm.safetensors", model, tokenizer, tokenizer)
    loaded = load_checkpoint(path)
    assert loaded.source_tokenizer.encode("the river is here") == tokenizer.encode("the river is here")


def write_bytes(tmp_path, data: bytes):
    path = tmp_path / "bad.safetensors"
    path.write_bytes(data)
    return path


def test_missing_file(tmp_path):
    with pytest.raises(CheckpointError, match="no such file"):
        load_checkpoint(tmp_path / "absent.safetensors")


def test_folder(tmp_path):
    with pytest.raises(CheckpointError, match="a folder"):
        load_checkpoint(tmp_path)


def test_empty_file(tmp_path):
    with pytest.raises(CheckpointError, match="empty"):
        load_checkpoint(write_bytes(tmp_path, b""))


def test_not_safetensors(tmp_path):
    with pytest.raises(CheckpointError, match="not a readable safetensors file"):
        load_checkpoint(write_bytes(tmp_path, b"PK\x03\x04 this is a zip, say a torch.save file"))


def test_truncated_file(tmp_path, random_checkpoint):
    data = random_checkpoint.read_bytes()
    with pytest.raises(CheckpointError) as caught:
        load_checkpoint(write_bytes(tmp_path, data[: len(data) // 2]))
    assert str(caught.value).startswith(str(tmp_path / "bad.safetensors"))
    assert "\n" not in str(caught.value)


def test_foreign_safetensors(tmp_path):
    path = tmp_path / "foreign.safetensors"
    save_file({"encoder.weight": torch.zeros(2, 2)}, str(path), metadata={"format": "pt"})
    with pytest.raises(CheckpointError, match="not an attnviz checkpoint"):
        read_metadata(path)


def rewrite_metadata(source, target, **changes):
    """Copy a checkpoint, replacing metadata entries (the header is JSON after an 8-byte length)."""
    data = source.read_bytes()
    (length,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8: 8 + length])
    header["__metadata__"].update(changes)
    encoded = json.dumps(header).encode()
    encoded += b" " * (-len(encoded) % 8)
    target.write_bytes(struct.pack("<Q", len(encoded)) + encoded + data[8 + length:])
    return target


@pytest.mark.parametrize("changes, message", [
    ({"config": "{not json"}, "'config' is not valid JSON"),
    ({"config": json.dumps({"arch": "lstm-magic"})}, "arch must be one of"),
    ({"config": json.dumps({"arch": "gru-additive", "src_vocab_size": 13})}, "incomplete"),
    ({"format_version": "99"}, "version '99' is not supported"),
    ({"tokenizers": json.dumps({"source": {"kind": "char", "characters": ["a"]}})}, "missing tokenizer"),
])
def test_wrong_metadata(tmp_path, random_checkpoint, changes, message):
    path = rewrite_metadata(random_checkpoint, tmp_path / "wrong.safetensors", **changes)
    with pytest.raises(CheckpointError, match=message):
        load_checkpoint(path)


def test_config_that_disagrees_with_the_weights(tmp_path, random_checkpoint):
    config = read_metadata(random_checkpoint)["config"]
    config["d_ff"] = 128
    path = rewrite_metadata(random_checkpoint, tmp_path / "shape.safetensors", config=json.dumps(config))
    with pytest.raises(CheckpointError, match="has shape"):
        load_checkpoint(path)


def test_vocabulary_that_disagrees_with_the_model(tmp_path, random_checkpoint):
    tokenizers = {"source": {"kind": "char", "characters": list("xyz")},
                  "target": {"kind": "char", "characters": list("xyz")}}
    path = rewrite_metadata(random_checkpoint, tmp_path / "vocab.safetensors", tokenizers=json.dumps(tokenizers))
    with pytest.raises(CheckpointError, match="do not match the model"):
        load_checkpoint(path)


def test_save_leaves_no_partial_file(tmp_path, char_tokenizer):
    model = build_model(tiny_config("gru-none"))
    save_checkpoint(tmp_path / "m.safetensors", model, char_tokenizer, char_tokenizer)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.safetensors"]


LOAD_PEAK = """
import sys, torch


def peak():  # this process' own high-water mark (ru_maxrss would start from the parent's at the fork)
    return next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM:"))


before = peak()
from models.storage.checkpoint import WEIGHT_DTYPES, load_checkpoint
model = load_checkpoint(sys.argv[1], dtype=WEIGHT_DTYPES[sys.argv[2]]).model
print((peak() - before) * 1024)
"""


@pytest.mark.parametrize(("dtype", "share"), [("float32", 1.25), ("bfloat16", 0.7)])
def test_loading_holds_one_copy_of_the_weights(tmp_path, dtype, share):
    """Built without initialising weights that are overwritten, each tensor read into the memory it keeps:
    the process grows by the weights once (three copies before: the file's bytes, the tensors read from
    them, the initialised model), by half of them kept as bfloat16. Measured in a fresh interpreter, after
    torch is imported."""
    import subprocess
    import sys
    from pathlib import Path

    config = tiny_config("transformer-preln", vocab_size=4_000, d_model=512, d_ff=2048, heads=8,
                         encoder_layers=4, decoder_layers=4)
    model = build_model(config)
    path = save_checkpoint(tmp_path / "m.safetensors", model, word_tokenizer(4_000), word_tokenizer(4_000))
    weights = sum(tensor.numel() * 4 for tensor in model.state_dict().values())
    del model
    result = subprocess.run([sys.executable, "-c", LOAD_PEAK, str(path), dtype], capture_output=True, text=True,
                            timeout=300, cwd=Path(__file__).parents[1], check=True)
    grown = int(result.stdout.split()[-1])
    assert weights > 100e6
    assert grown < share * weights, f"loading grew the process by {grown / 1e6:.0f} MB for {weights / 1e6:.0f} MB"


CONVERTING_PEAK = """
import sys, torch
from models.storage.checkpoint import WEIGHT_DTYPES, load_checkpoint


def peak():
    return next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM:"))


before = peak()
model = load_checkpoint(sys.argv[1], dtype=WEIGHT_DTYPES["bfloat16"]).model
print((peak() - before) * 1024)
"""


def test_a_half_precision_load_never_holds_a_whole_float32_tensor(tmp_path):
    """Converted a chunk at a time, the float32 embedding (here nearly all the weights, as a 32,000-word
    vocabulary's is much of a real model's) never sits whole beside its bfloat16 copy: loading grows the process
    by half the float32 weights plus its two 32,000-word tokenizers, ~0.6× (before: the whole embedding more,
    ~1.3×)."""
    import subprocess
    import sys
    from pathlib import Path

    config = tiny_config("transformer-preln", vocab_size=32_000, d_model=1024, d_ff=256, heads=8,
                         encoder_layers=1, decoder_layers=1, share_embeddings=True, tie_output=True)
    model = build_model(config)
    path = save_checkpoint(tmp_path / "m.safetensors", model, word_tokenizer(32_000), word_tokenizer(32_000))
    weights = sum(tensor.numel() * 4 for tensor in unique_tensors(model).values())
    del model
    result = subprocess.run([sys.executable, "-c", CONVERTING_PEAK, str(path)], capture_output=True, text=True,
                            timeout=300, cwd=Path(__file__).parents[1], check=True)
    grown = int(result.stdout.split()[-1])
    assert weights > 150e6
    assert grown < 0.75 * weights, f"loading grew the process by {grown / 1e6:.0f} MB for {weights / 1e6:.0f} MB"


def word_tokenizer(size: int):
    from models.text.tokenizers import WordTokenizer

    words = ["<pad>", "<unk>", "<s>", "</s>"] + [f"w{index}" for index in range(size - 4)]
    return WordTokenizer(words, {"pad": 0, "unk": 1, "bos": 2, "eos": 3})


def test_describing_a_file_reads_no_weights_and_says_what_loading_says(tmp_path, random_checkpoint):
    from models.storage.checkpoint import describe_checkpoint, describe_file

    assert describe_file(random_checkpoint) == describe_checkpoint(load_checkpoint(random_checkpoint))
    data = random_checkpoint.read_bytes()
    (header_size,) = struct.unpack("<Q", data[:8])
    zeroed = tmp_path / "zeroed.safetensors"  # the same header over weights of another value: not read
    zeroed.write_bytes(data[:8 + header_size] + bytes(len(data) - 8 - header_size))
    assert describe_file(zeroed) == {**describe_file(random_checkpoint), "file": str(zeroed)}


def test_a_weight_of_nan_still_loads_with_a_warning(tmp_path, char_tokenizer):
    from models.errors import NumericalWarning

    model = build_model(tiny_config("transformer-postln"))
    with torch.no_grad():
        model.output.weight[3, 1] = float("nan")
    path = save_checkpoint(tmp_path / "nan.safetensors", model, char_tokenizer, char_tokenizer)
    with pytest.warns(NumericalWarning, match=r"1 weight tensor\(s\) hold NaN or infinite values \(output.weight\)"):
        loaded = load_checkpoint(path).model
    assert torch.isnan(loaded.output.weight[3, 1])


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_weights_translate_alike_and_trace_in_float32(dtype):
    """Weights kept in half precision: the demo translates its examples as in float32, the attention is traced
    as float32 and stays within half precision's rounding of the float32 trace."""
    import numpy as np

    from attnviz.state.demos import DEMO_FOLDER, demo_records
    from models.inference.translator import Translator

    path = DEMO_FOLDER / "en-es-transformer.safetensors"
    full, half = Translator(load_checkpoint(path)), Translator(load_checkpoint(path, dtype=dtype))
    assert {param.dtype for param in half.model.parameters()} == {dtype}
    assert {buffer.dtype for buffer in half.model.buffers() if buffer.is_floating_point()} == {dtype}
    for source, output in demo_records()["en-es-transformer"]["examples"].items():
        a, b = full.translate(source, need_weights=True), half.translate(source, need_weights=True)
        assert b.text == a.text == output
        for kind in a.trace.kinds:
            for layer_a, layer_b in zip(a.trace.attention[kind], b.trace.attention[kind]):
                assert layer_b.dtype == np.float32
                np.testing.assert_allclose(layer_b, layer_a, atol=0.05)


def test_weights_are_kept_only_in_a_floating_type_the_model_can_compute_in(random_checkpoint):
    with pytest.raises(ValueError, match="weights are kept as float32, bfloat16, float16"):
        load_checkpoint(random_checkpoint, dtype=torch.int8)


def test_weights_larger_than_the_free_memory_are_refused_in_one_line_before_reading(tmp_path, char_tokenizer):
    """A real checkpoint file whose weights need twice the memory this machine has free (a sparse file: its
    weights take no disk): one line naming what they need, before a byte of them is read."""
    from models.storage.checkpoint import available_memory

    available = available_memory()
    path = tmp_path / "huge.safetensors"
    offset = write_checkpoint_twice_the_free_memory(path, char_tokenizer)
    assert offset > 1.9 * available
    with pytest.raises(CheckpointError, match=r"huge.safetensors: the weights need ~\d+\.\d GB as float32, \d+\.\d "
                                              r"GB of memory is free; try --dtype bfloat16"):
        load_checkpoint(path)


def test_loading_reports_its_progress_tensor_by_tensor(random_checkpoint):
    reports = []
    load_checkpoint(random_checkpoint, progress=lambda done, total: reports.append((done, total)))
    stored = len(read_header_names(random_checkpoint))
    assert reports == [(done, stored) for done in range(1, stored + 1)]


def read_header_names(path):
    from models.storage.files import read_header

    return [name for name in read_header(path) if name != "__metadata__"]
