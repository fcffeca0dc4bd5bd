"""Memory of real-size decoder-only models, checked at small size: a half-precision folder converts into one copy
of its weights in its own precision, and loading onto a device reads each tensor straight into that device's
memory a chunk at a time (benchmarks/decoder_only.py measures both at the Qwen2.5-0.5B and Llama-3.2-1B shapes)."""

from __future__ import annotations

import tracemalloc

import pytest
import torch

transformers = pytest.importorskip("transformers")
safetensors_torch = pytest.importorskip("safetensors.torch")

from attnviz.cli import main  # noqa: E402
from models import load_checkpoint  # noqa: E402
from models.importers import convert  # noqa: E402
from models.storage.checkpoint import CONVERT_CHUNK, iter_safetensors  # noqa: E402
from tests.test_decoder_only import SENTENCES, build, encode, theirs  # noqa: E402


def bfloat16_folder(folder, family: str):
    """A random-weight model of ``family`` saved in bfloat16; returns transformers' model read from it as float32
    (bfloat16 widens to float32 exactly; its rotary tables computed in float32)."""
    original = build(folder, family)
    for path in folder.glob("*.safetensors"):
        path.unlink()
    original.to(torch.bfloat16).save_pretrained(folder)
    return transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32,
                                                             attn_implementation="eager").eval()


def test_a_bfloat16_folder_converts_into_its_own_weights_bit_for_bit(tmp_path, capsys):
    folder = tmp_path / "qwen2"
    original = bfloat16_folder(folder, "qwen2")
    stored = safetensors_torch.load_file(str(folder / "model.safetensors"))
    assert {tensor.dtype for tensor in stored.values()} == {torch.bfloat16}
    model = convert(folder).model
    assert {param.dtype for param in model.parameters()} == {torch.bfloat16}
    assert torch.equal(model.state_dict()["tokens.weight"], stored["model.embed_tokens.weight"])
    assert torch.equal(model.state_dict()["layers.1.attention.key.weight"],
                       stored["model.layers.1.self_attn.k_proj.weight"])
    out = tmp_path / "qwen2.safetensors"
    assert main(["convert", str(folder), "-o", str(out)]) == 0
    assert {tensor.dtype for name, tensor in iter_safetensors(out)} == {torch.bfloat16}
    checkpoint = load_checkpoint(out)  # as float32: the same numbers as the folder's, widened
    ids = encode(folder, SENTENCES[0])
    with torch.no_grad():
        logits, _ = checkpoint.model(torch.tensor([ids[:2]]), torch.tensor([ids[2:]]))
    assert (logits - theirs(original, ids).logits[:, 2:]).abs().max() < 1e-4


def test_a_bfloat16_folder_whose_weights_are_rearranged_converts_to_float32_unchanged(tmp_path):
    folder = tmp_path / "gpt2"
    original = bfloat16_folder(folder, "gpt2")  # Conv1D weights are transposed into ours: float32 as before
    model = convert(folder).model
    assert {param.dtype for param in model.parameters()} == {torch.float32}
    ids = encode(folder, SENTENCES[1])
    with torch.no_grad():
        logits, _ = model(torch.tensor([ids[:2]]), torch.tensor([ids[2:]]))
    assert (logits - theirs(original, ids).logits[:, 2:]).abs().max() < 1e-4


def _peak_python_bytes(read) -> int:
    tracemalloc.start()
    try:
        read()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_loading_onto_a_device_holds_one_chunk_on_the_host_never_a_whole_tensor(tmp_path):
    path = tmp_path / "big.safetensors"
    big = 3 * CONVERT_CHUNK // 4  # float32 elements: a tensor three chunks long
    safetensors_torch.save_file({"big": torch.ones(big), "small": torch.arange(10.0)}, str(path))
    on_device = {}
    # The meta device stands in for a GPU: the same path (a tensor made on the device, filled chunk by chunk).
    host_peak = _peak_python_bytes(lambda: on_device.update(iter_safetensors(path, device="meta")))
    assert {name: (tensor.device.type, tuple(tensor.shape)) for name, tensor in on_device.items()} == \
        {"big": ("meta", (big,)), "small": ("meta", (10,))}
    assert host_peak < 1.25 * CONVERT_CHUNK
    assert _peak_python_bytes(lambda: list(iter_safetensors(path))) >= 3 * CONVERT_CHUNK  # the CPU's own copy


def test_load_checkpoint_puts_each_weight_on_the_device_as_it_is_read(tmp_path):
    folder = tmp_path / "qwen2"
    build(folder, "qwen2")
    out = tmp_path / "qwen2.safetensors"
    assert main(["convert", str(folder), "-o", str(out)]) == 0
    for dtype in (torch.float32, torch.bfloat16):
        model = load_checkpoint(out, "meta", dtype=dtype).model
        assert {(param.device.type, param.dtype) for param in model.parameters()} == {("meta", dtype)}
        assert model.tokens.weight is model.output.weight  # tied, as on the CPU
