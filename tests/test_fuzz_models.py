"""Hostile model files: headers that claim huge models of every architecture, weights that are not numbers the
model computes with, and trusted pickles whose modules carry hooks and methods of their own.

Every case runs the real CLI under the limits of tests/test_fuzz.py (``run_cli``: exit 0 or one ``attnviz:
error:`` line and exit 1, no traceback, under 5 s, resident memory growing by less than 1 GB, no file made) and,
for the huge sizes, with the process's address space limited to what it uses plus ``HEADROOM``: a model built
or allocated before its sizes were checked fails there as it would on a machine with that little memory, instead
of passing unnoticed in virtual memory. One case of each kind also runs as a child process, as a user runs it.
"""

from __future__ import annotations

import contextlib
import copy
import io
import json
import resource
import struct
import subprocess
import sys
import zipfile
from collections import OrderedDict
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from models.nn.config import TRANSFORMER_ARCHS, RNN_ARCHS
from models.text.tokenizers import CharTokenizer
from tests.helpers import LETTERS, tiny_config, write_sparse_checkpoint
from tests.test_fuzz import WORST, _status, assert_process_error, run_cli

HEADROOM = 1 << 30  # bytes of address space a case may take beyond what the process already has
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module", autouse=True)
def report_worst():
    yield
    print(f"\nhostile model files: {WORST['cases']} CLI cases, worst {WORST['seconds']:.2f} s, "
          f"worst memory growth {WORST['growth_kb'] / 1024:.0f} MB")


@contextlib.contextmanager
def address_space_limited(headroom: int = HEADROOM):
    """``ulimit -v`` of this process's current size plus ``headroom`` for the duration (the hard limit is kept,
    so the old limit comes back)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    limit = _status("VmSize") * 1024 + headroom
    resource.setrlimit(resource.RLIMIT_AS, (limit if hard == resource.RLIM_INFINITY else min(limit, hard), hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def characters(count: int) -> CharTokenizer:
    """A character vocabulary of ``count`` tokens in all (the 4 specials and ``count - 4`` characters)."""
    chars = [chr(code) for code in range(0x100, 0x100 + count + 0x800) if not 0xD800 <= code <= 0xDFFF]
    return CharTokenizer(chars[: count - 4])


# Huge sizes: each field of each architecture that a model's memory grows with, within the config's bounds (beyond
# them the config is refused as such: tests/test_fuzz.py), each case's weights many gigabytes. The GRU family's
# hidden size of 30,000 is the file the window once crashed on (10.8 GB asked for by the first nn.GRU).
HUGE = [(arch, changes) for arch in TRANSFORMER_ARCHS for changes in (
    {"d_model": 30000}, {"d_ff": 100_000, "d_model": 8192}, {"decoder_d_ff": 100_000, "d_model": 8192},
    {"heads": 1024, "d_head": 16384}, {"decoder_heads": 1024, "d_head": 16384},
    {"encoder_layers": 96, "d_model": 4096}, {"decoder_layers": 96, "d_model": 4096},
    {"vocab": 300_000, "d_model": 4096})]
HUGE += [(arch, changes) for arch in RNN_ARCHS for changes in ({"hidden": 30000}, {"vocab": 300_000, "hidden": 4096})]
HUGE += [("rnn-luong", changes) for changes in (
    {"embedding_size": 30000, "hidden": 4096}, {"annotation_size": 30000}, {"decoder_layers": 96, "hidden": 4096},
    {"rnn_cell": "lstm", "hidden": 30000}, {"bidirectional": True, "hidden": 30000})]
HUGE += [("gru-transformer-decoder", {"decoder_layers": 96, "hidden": 4096})]


def huge_checkpoint(path: Path, arch: str, changes: dict) -> int:
    """A real checkpoint file of that model, its weights a sparse file (no disk, no memory to write); returns how
    many numbers its weights are."""
    changes = dict(changes)
    vocab = changes.pop("vocab", len(LETTERS) + 4)
    tokenizer = characters(vocab) if vocab > len(LETTERS) + 4 else CharTokenizer(list(LETTERS))
    return write_sparse_checkpoint(path, tiny_config(arch, vocab_size=vocab, **changes), tokenizer) // 4


@pytest.mark.parametrize("arch, changes", HUGE, ids=[f"{arch}-{','.join(changes)}" for arch, changes in HUGE])
def test_a_header_of_a_huge_model_is_refused_before_anything_is_allocated(capsys, tmp_path, arch, changes):
    path = tmp_path / "huge.safetensors"
    huge_checkpoint(path, arch, changes)
    with address_space_limited():
        _, _, err = run_cli(capsys, ["translate", "-c", path, "abc"], allowed=(1,))
    assert str(path) in err and "the weights need ~" in err and "GB of memory is free" in err


def test_attnviz_info_describes_a_huge_model_without_allocating_it(capsys, tmp_path):
    """Describing needs no weights: the model is built without memory, whatever its size."""
    path = tmp_path / "huge.safetensors"
    numbers = huge_checkpoint(path, "gru-additive", {"hidden": 30000})
    with address_space_limited():
        _, out, _ = run_cli(capsys, ["info", path], allowed=(0,))
    assert numbers > 10 ** 10 and f"gru-additive  ({numbers:,} parameters)" in out


def test_a_header_that_claims_more_than_its_file_holds_is_refused_before_building(capsys, tmp_path):
    """The same header over a file cut short: refused from the header and the file's size alone."""
    path = tmp_path / "huge.safetensors"
    huge_checkpoint(path, "gru-additive", {"hidden": 30000})
    with open(path, "r+b") as handle:
        handle.truncate(handle.seek(0, 2) // 2)
    with address_space_limited():
        for command in (["info", path], ["translate", "-c", path, "abc"]):
            _, _, err = run_cli(capsys, command, allowed=(1,))
            assert "does not fit its place in the file: cut short?" in err


@pytest.mark.parametrize("count", [300_000, 100_000])
def test_a_header_listing_a_hundred_thousand_tensors_is_refused_at_once(capsys, tmp_path, count):
    """Empty tensors by the hundred thousand (a 67 MB header of a million took 45 s to refuse, parsed again and
    again)."""
    demo = ROOT / "resources/checkpoints/piglatin-gru-additive.safetensors"
    data = demo.read_bytes()
    length = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + length])
    header.update({f"x{number}": {"dtype": "F32", "shape": [0], "data_offsets": [0, 0]} for number in range(count)})
    encoded = json.dumps(header).encode()
    path = tmp_path / "many.safetensors"
    path.write_bytes(struct.pack("<Q", len(encoded)) + encoded + data[8 + length:])
    out = tmp_path / "out.safetensors"
    for command in (["info", path], ["translate", "-c", path, "abc"], ["convert", path, "-o", out]):
        _, _, err = run_cli(capsys, command, allowed=(1,))
        assert "objects; at most 131,072" in err or "tensors; at most 65,536" in err


def test_a_foreign_safetensors_file_larger_than_the_free_memory_is_refused_before_reading(capsys, tmp_path):
    """A real safetensors file (sparse: no disk) whose one tensor, 3.6 GB, is more than the memory left."""
    path = tmp_path / "weights.safetensors"
    header = json.dumps({"transformer.encoder.layers.0.linear1.weight": {
        "dtype": "F32", "shape": [30000, 30000], "data_offsets": [0, 30000 * 30000 * 4]}}).encode()
    with open(path, "wb") as handle:
        handle.write(struct.pack("<Q", len(header)) + header)
        handle.truncate(8 + len(header) + 30000 * 30000 * 4)
    with address_space_limited():
        _, _, err = run_cli(capsys, ["convert", path, "-o", tmp_path / "out.safetensors"], allowed=(1,))
    assert f"{path}: its tensors need ~3.4 GB of memory" in err


@pytest.mark.parametrize("legacy", [False, True], ids=["zip", "legacy"])
def test_a_torch_file_larger_than_the_free_memory_is_refused_before_unpickling(tmp_path, legacy):
    """A real torch.save file of 256 MB, read with 128 MB of memory left."""
    from models.errors import CheckpointError
    from models.importers import safe_load

    path = tmp_path / "large.pt"
    torch.save({"weight": torch.zeros(64 << 20)}, path, _use_new_zipfile_serialization=not legacy)
    with address_space_limited(headroom=128 << 20), pytest.raises(CheckpointError, match="its tensors need ~0.3 GB"):
        safe_load.load(path)


@pytest.mark.parametrize("changes", [
    {"hidden": -1}, {"hidden": 0}, {"decoder_layers": 0}, {"decoder_layers": -3}, {"decoder_heads": 0},
    {"embedding_size": -1}, {"annotation_size": -5}, {"max_len": 0}, {"hidden": 10 ** 9}, {"hidden": 2 ** 64},
], ids=lambda changes: ",".join(f"{key}={value}" for key, value in changes.items()))
def test_negative_zero_and_unbounded_sizes_of_a_recurrent_model(capsys, tmp_path, changes):
    from tests.test_checkpoint import rewrite_metadata

    demo = ROOT / "resources/checkpoints/piglatin-gru-additive.safetensors"
    data = demo.read_bytes()
    config = json.loads(json.loads(data[8:8 + struct.unpack("<Q", data[:8])[0]])["__metadata__"]["config"])
    path = rewrite_metadata(demo, tmp_path / "bad.safetensors", config=json.dumps({**config, **changes}))
    _, _, err = run_cli(capsys, ["translate", "-c", path, "abc"], allowed=(1,))
    assert str(path) in err and f"{next(iter(changes))} must be" in err


def test_the_recurrent_header_of_hidden_size_30000_in_a_process_limited_to_6_gb(tmp_path):
    """As a user runs it, on a machine with 6 GB: one line, exit 1."""
    path = tmp_path / "gru-30000.safetensors"
    huge_checkpoint(path, "gru-additive", {"hidden": 30000})
    result = limited_process(["translate", "-c", str(path), "abc"], limit=6 << 30)
    assert_process_error(result, str(path), "the weights need ~57.0 GB as float32")


def limited_process(args: list, limit: int) -> subprocess.CompletedProcess:
    """The CLI in a child process whose address space is at most ``limit`` bytes."""
    def limited():
        resource.setrlimit(resource.RLIMIT_AS, (limit, resource.getrlimit(resource.RLIMIT_AS)[1]))

    return subprocess.run([sys.executable, "-m", "attnviz", *args], capture_output=True, timeout=120, check=False,
                          cwd=ROOT, preexec_fn=limited)


# Weights that are not numbers the model computes with

def with_weight(source: Path, path: Path, name: str, change) -> Path:
    """A copy of the checkpoint ``source`` with the tensor ``name`` replaced by ``change(tensor)``."""
    from safetensors import safe_open

    with safe_open(str(source), "pt") as opened:
        metadata = opened.metadata()
    tensors = load_file(str(source))
    tensors[name] = change(tensors[name])
    save_file(tensors, str(path), metadata=metadata)
    return path


NOT_FLOATS = {"int64": lambda t: (t * 100).to(torch.int64), "int32": lambda t: t.to(torch.int32),
              "int8": lambda t: t.to(torch.int8), "uint8": lambda t: t.to(torch.uint8), "bool": lambda t: t > 0}


@pytest.mark.parametrize("demo, weight", [("piglatin-gru-additive", "encoder.gru.weight_ih_l0"),
                                          ("piglatin-gru-additive", "decoder.output.bias"),
                                          ("piglatin-gru-transformer-decoder", "decoder.output.weight"),
                                          ("en-es-transformer", "src_embedding.tokens.weight")])
@pytest.mark.parametrize("dtype", sorted(NOT_FLOATS))
def test_integer_or_boolean_weights_are_one_line_naming_the_tensor(capsys, tmp_path, demo, weight, dtype):
    source = ROOT / f"resources/checkpoints/{demo}.safetensors"
    path = with_weight(source, tmp_path / "integers.safetensors", weight, NOT_FLOATS[dtype])
    for command in (["translate", "-c", path, "abc"], ["info", path]):
        _, _, err = run_cli(capsys, command, allowed=(1,))
        assert f"{path}: weight {weight} is stored as {dtype}; the model needs floating-point numbers" in err


def test_weights_of_another_floating_precision_are_converted(capsys, tmp_path):
    source = ROOT / "resources/checkpoints/piglatin-gru-additive.safetensors"
    path = with_weight(source, tmp_path / "double.safetensors", "encoder.gru.weight_ih_l0", lambda t: t.double())
    assert run_cli(capsys, ["translate", "-c", path, "Jesus wept."])[1] == \
        run_cli(capsys, ["translate", "-c", source, "Jesus wept."])[1]


@pytest.mark.parametrize("dtype", ["C64", "C128", "I4", "F8_E4M3"])
def test_a_complex_or_unknown_dtype_in_a_header_is_one_line(capsys, tmp_path, dtype):
    source = ROOT / "resources/checkpoints/piglatin-gru-additive.safetensors"
    data = source.read_bytes()
    length = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + length])
    header["encoder.gru.weight_ih_l0"]["dtype"] = dtype
    encoded = json.dumps(header).encode()
    path = tmp_path / "complex.safetensors"
    path.write_bytes(struct.pack("<Q", len(encoded)) + encoded + data[8 + length:])
    _, _, err = run_cli(capsys, ["translate", "-c", path, "abc"], allowed=(1,))
    assert f"tensor 'encoder.gru.weight_ih_l0' has an unknown dtype '{dtype}'" in err


def test_an_integer_weight_in_a_child_process(tmp_path):
    source = ROOT / "resources/checkpoints/piglatin-gru-additive.safetensors"
    path = with_weight(source, tmp_path / "integers.safetensors", "encoder.gru.weight_ih_l0", NOT_FLOATS["int64"])
    result = limited_process(["translate", "-c", str(path), "abc"], limit=resource.RLIM_INFINITY)
    assert_process_error(result, "weight encoder.gru.weight_ih_l0 is stored as int64")


@pytest.fixture(scope="module")
def tutorial(tmp_path_factory):
    """The nn.Transformer tutorial's model (tests/test_import_nn_transformer.py), seeded, with its vocabularies."""
    from tests.test_import_nn_transformer import build_tutorial

    return build_tutorial(False, tmp_path_factory.mktemp("tutorial"))


FOREIGN_NOT_FLOATS = {**NOT_FLOATS, "complex64": lambda t: t.to(torch.complex64)}


@pytest.mark.parametrize("dtype", sorted(FOREIGN_NOT_FLOATS))
def test_a_foreign_state_dict_with_an_integer_weight_is_one_line(capsys, tmp_path, tutorial, dtype):
    original, _, _, src_vocab, tgt_vocab = tutorial
    state = original.state_dict()
    state["generator.weight"] = FOREIGN_NOT_FLOATS[dtype](state["generator.weight"])
    path = tmp_path / "transformer.pt"
    torch.save(state, path)
    out = tmp_path / "out.safetensors"
    _, _, err = run_cli(capsys, ["convert", path, "-o", out, "--set", "nhead=4", "--set", "norm_first=false",
                                 "--src-vocab", src_vocab, "--tgt-vocab", tgt_vocab], allowed=(1,))
    assert f"weight generator.weight is stored as {dtype}; the nn-transformer layout needs floating-point" in err
    assert not out.exists()


# Trusted pickles: reading their tensors never calls anything they carry

class HookedLinear(torch.nn.Linear):
    """A module class of the file's own (read with trust as an inert stand-in)."""


def hooked(module: torch.nn.Module, kind: str) -> torch.nn.Module:
    """``module`` carrying, in the pickle, one kind of thing that would run if its methods were called."""
    child = next(iter(module.children()))
    if kind == "state-dict-hooks":
        module._state_dict_hooks[0] = int  # state_dict() would call int(module, destination, prefix, ...)
        child._state_dict_hooks[0] = int
    elif kind == "state-dict-pre-hooks":
        module._state_dict_pre_hooks[0] = int
    elif kind == "methods-in-the-instance":
        module.__dict__.update(state_dict=int, named_parameters=int, parameters=int, named_buffers=int, modules=int,
                               named_modules=int, children=int, named_children=int)
        child.__dict__["_save_to_state_dict"] = int
    elif kind == "itself-inside":
        module._modules["again"] = module
    elif kind == "odd-dictionaries":  # state_dict() would ask whether a buffer's name is in 7
        if not any(True for _ in module.buffers()):
            child.register_buffer("counts", torch.zeros(2))
        for inner in module.modules():
            if inner._buffers:
                inner.__dict__["_non_persistent_buffers_set"] = 7
        child._modules["not-a-module"] = None
    return module


HOOKS = ["state-dict-hooks", "state-dict-pre-hooks", "methods-in-the-instance", "itself-inside", "odd-dictionaries"]


@pytest.mark.parametrize("kind", HOOKS)
def test_a_trusted_model_with_hooks_converts_without_running_them(capsys, tmp_path, tutorial, kind):
    """The whole pickled tutorial model, carrying hooks or methods of its own: converted from the tensors it
    holds, exactly as its state dict, and nothing it carries is called."""
    from models.storage.checkpoint import load_checkpoint

    original, _, _, src_vocab, tgt_vocab = tutorial
    expected = original.state_dict()
    path, out = tmp_path / "whole.pt", tmp_path / "out.safetensors"
    torch.save(hooked(copy.deepcopy(original), kind), path)
    run_cli(capsys, ["convert", "--trust", path, "-o", out, "--src-vocab", src_vocab, "--tgt-vocab", tgt_vocab],
            allowed=(0,))
    converted = load_checkpoint(out).model.state_dict()
    assert torch.equal(converted["output.weight"], expected["generator.weight"])
    assert torch.equal(converted["src_embedding.tokens.weight"], expected["src_tok_emb.embedding.weight"])


@pytest.mark.parametrize("trust, value", [(False, 7), (True, 7), (True, int)], ids=["7", "7-trusted", "int-trusted"])
def test_tensors_whose_pickled_state_replaces_their_methods_are_read_as_tensors(capsys, tmp_path, tutorial, trust,
                                                                              value):
    """A parameter's pickled state sets attributes on it (torch's weights-only reader allows plain values, so
    ``weight.float = 7`` needs no trust): they never take the place of torch's own methods."""
    from models.storage.checkpoint import load_checkpoint

    original, _, _, src_vocab, tgt_vocab = tutorial
    state = copy.deepcopy(original).state_dict(keep_vars=True)
    for name in ("detach", "float", "numel", "element_size", "untyped_storage", "is_floating_point", "to"):
        setattr(state["generator.weight"], name, value)
    path, out = tmp_path / "transformer.pt", tmp_path / "out.safetensors"
    torch.save(state, path)
    run_cli(capsys, ["convert", path, "-o", out, "--set", "nhead=4", "--set", "norm_first=false", "--src-vocab",
                     src_vocab, "--tgt-vocab", tgt_vocab, *(["--trust"] if trust else [])], allowed=(0,))
    assert torch.equal(load_checkpoint(out).model.output.weight, original.generator.weight.detach())


def test_a_trusted_model_whose_layer_settings_are_odd_asks_for_them(capsys, tmp_path, tutorial):
    """The settings read from a pickled nn.TransformerEncoderLayer are taken only as the types torch gives them:
    odd ones say nothing, and the file's settings are asked for in one line."""
    original, _, _, src_vocab, tgt_vocab = tutorial
    model = copy.deepcopy(original)
    for layer in model.transformer.encoder.layers:
        layer.__dict__["norm_first"] = "yes"
        layer.self_attn.__dict__["num_heads"] = [4]
    path = tmp_path / "whole.pt"
    torch.save(model, path)
    _, _, err = run_cli(capsys, ["convert", "--trust", path, "-o", tmp_path / "out.safetensors", "--src-vocab",
                                 src_vocab, "--tgt-vocab", tgt_vocab], allowed=(1,))
    assert "--set nhead=N" in err and "--set norm_first=" in err


def torch_zip_of(value) -> bytes:
    buffer = io.BytesIO()
    torch.save(value, buffer)
    return buffer.getvalue()


@pytest.mark.parametrize("kind", HOOKS)
def test_a_trusted_module_of_no_known_layout_with_hooks_is_one_line(capsys, tmp_path, kind):
    holder = torch.nn.Sequential(OrderedDict(layer=HookedLinear(2, 2)))
    path = tmp_path / "hooked.pt"
    path.write_bytes(torch_zip_of(hooked(holder, kind)))
    _, _, err = run_cli(capsys, ["convert", "--trust", path, "-o", tmp_path / "out.safetensors"], allowed=(1,))
    assert "match no format this version imports" in err


def test_a_trusted_zip_with_integer_state_dict_hooks_in_a_child_process(tmp_path):
    module = torch.nn.Linear(2, 2)
    module._state_dict_hooks[0] = int
    path = tmp_path / "hooked.pt"
    path.write_bytes(torch_zip_of(module))
    assert zipfile.is_zipfile(path)
    result = limited_process(["convert", "--trust", str(path), "-o", str(tmp_path / "out.safetensors")],
                             limit=resource.RLIM_INFINITY)
    assert_process_error(result, str(path), "match no format this version imports")
    assert not (tmp_path / "out.safetensors").exists()


@pytest.mark.parametrize("index2word", [{0: "SOS", 2: "EOS"}, {0: "SOS", 1: ["EOS"]}, {"0": "SOS", "1": "EOS"},
                                        {0: "SOS", 1.5: "EOS"}], ids=["gap", "list-token", "text-ids", "float-id"])
def test_a_trusted_tutorial_file_whose_vocabulary_is_odd_is_one_line(capsys, tmp_path, index2word):
    """The seq2seq tutorial's modules pickled whole with their ``Lang`` objects (tests/test_import_pytorch_seq2seq.py),
    the input language's ids odd."""
    from tests.test_import_pytorch_seq2seq import HIDDEN, SRC_WORDS, TGT_WORDS, AttnDecoderRNN, EncoderRNN, Lang

    source_lang = Lang(SRC_WORDS)
    source_lang.index2word = index2word
    path = tmp_path / "whole.pt"
    torch.save({"encoder": EncoderRNN(2 + len(SRC_WORDS), HIDDEN),
                "decoder": AttnDecoderRNN(HIDDEN, 2 + len(TGT_WORDS)),
                "input_lang": source_lang, "output_lang": Lang(TGT_WORDS)}, path)
    _, _, err = run_cli(capsys, ["convert", "--trust", path, "-o", tmp_path / "out.safetensors"], allowed=(1,))
    assert str(path) in err
