"""The nanogpt importer against nanoGPT's own forward pass, written here from its model.py's formulas.

Each ``ckpt.pt`` is written by ``torch.save`` as nanoGPT's train.py writes it (``model``: a state dict of random
weights under model.py's names, ``lm_head`` tied to ``wte``; ``model_args``; an AdamW state dict; train.py's
``config``; ``iter_num``; ``best_val_loss``), once with the ``_orig_mod.`` prefix torch.compile adds, with a
``meta.pkl`` as shakespeare_char's prepare.py writes it. Checked: logits (1e-4) and every head's attention (1e-5)
against the reference in float64, 20 greedy tokens through start/step against a loop over the reference, LayerNorms
without bias (``bias=False``, and ``model_args`` without ``bias``), a GPT-2 BPE model read with the tokenizer.json
it is given, the refusals (a pickled object of another class never runs; a missing meta.pkl; a GPT-2 BPE model
without its tokenizer) and ``attnviz convert`` then ``attnviz info`` on the real CLI.
"""

from __future__ import annotations

import math
import pickle

import pytest
import torch

from attnviz.cli import main
from models import load_checkpoint
from models.errors import CheckpointError
from models.importers import convert, detect_format, inspect

CHARS = "\n !$&',-.3:;?ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"  # shakespeare_char's 65
N_LAYER, N_HEAD, N_EMBD, BLOCK = 2, 4, 32, 64
STEPS = 20
PROMPTS = ["First Citizen:\nBefore we proceed", "ROMEO:\n\n", "\n"]


def model_args(*, bias: bool, vocab_size: int = len(CHARS)) -> dict:
    return dict(n_layer=N_LAYER, n_head=N_HEAD, n_embd=N_EMBD, block_size=BLOCK, bias=bias, vocab_size=vocab_size,
                dropout=0.2)


def state_dict(args: dict, seed: int = 0) -> dict[str, torch.Tensor]:
    """Random weights under the names of nanoGPT's GPT.state_dict(), large enough that attention is far from
    uniform; ``lm_head.weight`` is ``transformer.wte.weight`` itself (weight tying)."""
    generator = torch.Generator().manual_seed(seed)
    E, bias = args["n_embd"], args["bias"]

    def normal(*shape, std=0.3, mean=0.0):
        return mean + std * torch.randn(*shape, generator=generator)

    state = {"transformer.wte.weight": normal(args["vocab_size"], E), "transformer.wpe.weight": normal(BLOCK, E)}
    for index in range(args["n_layer"]):
        layer = f"transformer.h.{index}."
        parts = [("ln_1", None), ("attn.c_attn", (3 * E, E)), ("attn.c_proj", (E, E)), ("ln_2", None),
                 ("mlp.c_fc", (4 * E, E)), ("mlp.c_proj", (E, 4 * E))]
        for name, shape in parts:
            state[f"{layer}{name}.weight"] = normal(E, std=0.1, mean=1.0) if shape is None else normal(*shape)
            if bias:
                state[f"{layer}{name}.bias"] = normal(E if shape is None else shape[0], std=0.1)
    state["transformer.ln_f.weight"] = normal(E, std=0.1, mean=1.0)
    if bias:
        state["transformer.ln_f.bias"] = normal(E, std=0.1)
    state["lm_head.weight"] = state["transformer.wte.weight"]
    return state


def train_config(args: dict) -> dict:
    """train.py's ``config``: its globals of plain types, as shakespeare_char's config file sets them."""
    return dict(out_dir="out-shakespeare-char", eval_interval=250, log_interval=10, eval_iters=200, eval_only=False,
                always_save_checkpoint=False, init_from="scratch", wandb_log=False, wandb_project="shakespeare-char",
                wandb_run_name="mini-gpt", dataset="shakespeare_char", gradient_accumulation_steps=1, batch_size=64,
                block_size=BLOCK, n_layer=args["n_layer"], n_head=args["n_head"], n_embd=args["n_embd"],
                dropout=0.2, bias=args["bias"], learning_rate=1e-3, max_iters=5000, weight_decay=0.1, beta1=0.9,
                beta2=0.99, grad_clip=1.0, decay_lr=True, warmup_iters=100, lr_decay_iters=5000, min_lr=1e-4,
                backend="nccl", device="cuda", dtype="bfloat16", compile=True)


def optimizer_state(state: dict[str, torch.Tensor]) -> dict:
    """An AdamW state dict after one step, as train.py's optimizer holds it (two parameter groups)."""
    parameters = [torch.nn.Parameter(tensor.clone()) for name, tensor in state.items() if name != "lm_head.weight"]
    decay = [p for p in parameters if p.dim() >= 2]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                                   {"params": [p for p in parameters if p.dim() < 2], "weight_decay": 0.0}],
                                  lr=1e-3, betas=(0.9, 0.99))
    for parameter in parameters:
        parameter.grad = torch.ones_like(parameter)
    optimizer.step()
    return optimizer.state_dict()


def write_ckpt(folder, *, bias: bool = True, compiled: bool = False, vocab_size: int = len(CHARS),
               meta: bool = True, **extra):
    """``folder/ckpt.pt`` as train.py saves it (and meta.pkl as prepare.py writes it); returns (path, state)."""
    folder.mkdir(parents=True, exist_ok=True)
    args = model_args(bias=bias, vocab_size=vocab_size)
    state = state_dict(args)
    saved = {f"_orig_mod.{key}": tensor for key, tensor in state.items()} if compiled else state
    checkpoint = {"model": saved, "optimizer": optimizer_state(state), "model_args": args, "iter_num": 5000,
                  "best_val_loss": torch.tensor(1.4697), "config": train_config(args), **extra}
    torch.save(checkpoint, folder / "ckpt.pt")
    if meta:
        write_meta(folder / "meta.pkl")
    return folder / "ckpt.pt", state


def write_meta(path) -> None:
    """shakespeare_char's prepare.py: ``pickle.dump({'vocab_size', 'itos', 'stoi'}, f)``."""
    stoi = {ch: i for i, ch in enumerate(CHARS)}
    itos = {i: ch for i, ch in enumerate(CHARS)}
    with open(path, "wb") as handle:
        pickle.dump({"vocab_size": len(CHARS), "itos": itos, "stoi": stoi}, handle)


# nanoGPT's forward, from its model.py

def layer_norm(x, weight, bias):
    """model.py's LayerNorm: F.layer_norm(x, weight.shape, weight, bias, 1e-5) (bias None with bias=False)."""
    mean = x.mean(-1, keepdim=True)
    variance = ((x - mean) ** 2).mean(-1, keepdim=True)
    normed = (x - mean) / torch.sqrt(variance + 1e-5) * weight
    return normed if bias is None else normed + bias


def gelu(x):
    """nn.GELU(): the exact one, x · Φ(x)."""
    return 0.5 * x * (1.0 + torch.erf(x / math.sqrt(2.0)))


def reference(state: dict[str, torch.Tensor], ids: list[int]):
    """nanoGPT's GPT.forward in float64: logits [T, V] and each layer's attention [H, T, T]."""
    w = {name: tensor.double() for name, tensor in state.items()}

    def get(name):
        return w.get(name)

    def linear(x, name):
        out = x @ w[f"{name}.weight"].T
        return out if get(f"{name}.bias") is None else out + w[f"{name}.bias"]

    T, E, H = len(ids), N_EMBD, N_HEAD
    D = E // H
    x = w["transformer.wte.weight"][ids] + w["transformer.wpe.weight"][:T]
    attentions = []
    for index in range(N_LAYER):
        layer = f"transformer.h.{index}."
        h = layer_norm(x, w[f"{layer}ln_1.weight"], get(f"{layer}ln_1.bias"))
        q, k, v = linear(h, f"{layer}attn.c_attn").split(E, dim=1)
        q, k, v = (part.view(T, H, D).transpose(0, 1) for part in (q, k, v))  # [H, T, D]
        scores = q @ k.transpose(-2, -1) * (1.0 / math.sqrt(D))
        scores = scores.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
        attention = torch.softmax(scores, dim=-1)
        attentions.append(attention)
        y = (attention @ v).transpose(0, 1).reshape(T, E)
        x = x + linear(y, f"{layer}attn.c_proj")
        h = layer_norm(x, w[f"{layer}ln_2.weight"], get(f"{layer}ln_2.bias"))
        x = x + linear(gelu(linear(h, f"{layer}mlp.c_fc")), f"{layer}mlp.c_proj")
    x = layer_norm(x, w["transformer.ln_f.weight"], get("transformer.ln_f.bias"))
    return x @ w["lm_head.weight"].T, attentions


def reference_greedy(state, prompt: list[int], steps: int) -> list[int]:
    """sample.py's generate with the most likely token each step: the whole sequence fed again every step."""
    ids = list(prompt)
    for _ in range(steps):
        logits, _ = reference(state, ids)
        ids.append(int(logits[-1].argmax()))
    return ids[len(prompt):]


def our_greedy(model, prompt: list[int], steps: int) -> list[int]:
    """Our decoder-only model's start (the prompt but its last token) and cached steps."""
    output = []
    with torch.no_grad():
        state, _ = model.start(torch.tensor([prompt[:-1]]))
        token = prompt[-1]
        for _ in range(steps):
            token = int(model.step(torch.tensor([token]), state, need_weights=False).logits[0].argmax())
            output.append(token)
    return output


def encode(text: str) -> list[int]:
    return [CHARS.index(character) for character in text]


@pytest.fixture(scope="module", params=[(True, False), (False, True)], ids=["bias", "no-bias-compiled"])
def imported(request, tmp_path_factory):
    """(state, our checkpoint, the ckpt.pt path): with biases; without them and saved from a compiled model."""
    bias, compiled = request.param
    path, state = write_ckpt(tmp_path_factory.mktemp("nanogpt") / "out", bias=bias, compiled=compiled)
    return state, convert(path), path


def test_the_checkpoint_is_detected_and_described(imported):
    state, checkpoint, path = imported
    assert detect_format(path) == "nanogpt"
    config = checkpoint.model.config
    bias = "transformer.ln_f.bias" in state
    assert (config.arch, config.layers, config.heads, config.d_model, config.d_ff, config.max_len) == \
        ("decoder-only", N_LAYER, N_HEAD, N_EMBD, 4 * N_EMBD, BLOCK)
    assert (config.positions, config.norm_kind, config.activation, config.gated_ffn, config.tie_output) == \
        ("learned", "layer_norm", "gelu", False, True)
    assert config.norm_bias is config.qkv_bias is config.out_bias is config.ffn_bias is bias
    assert config.eos_id == config.pad_id == CHARS.index("\n")
    assert checkpoint.model.attention_shape() == {"dec_self": (N_LAYER, N_HEAD)}
    record = checkpoint.provenance["imported_from"]
    assert record["format"] == "nanogpt" and record["read_from_file"]["iter_num"] == 5000
    assert record["read_from_file"]["best_val_loss"] == pytest.approx(1.4697)
    assert record["read_from_file"]["dataset"] == "shakespeare_char"


def test_logits_and_every_head_equal_nanogpts_forward(imported):
    state, checkpoint, _ = imported
    ids = encode(PROMPTS[0])
    expected_logits, expected_attention = reference(state, ids)
    cut = 5
    with torch.no_grad():
        logits, intermediates = checkpoint.model(torch.tensor([ids[:cut]]), torch.tensor([ids[cut:]]),
                                                 need_weights=True)
    assert (logits[0].double() - expected_logits[cut:]).abs().max() < 1e-4
    assert float(expected_logits.std()) > 1.0  # weights large enough to tell models apart
    for ours, theirs in zip(intermediates.attention["dec_self"], expected_attention, strict=True):
        assert ours.shape == (1, N_HEAD, len(ids), len(ids))
        assert (ours[0].double() - theirs).abs().max() < 1e-5
    assert float(expected_attention[1].max(-1).values[:, 4:].mean()) > 0.3  # far from uniform


def test_greedy_tokens_equal_nanogpts(imported):
    """Twenty tokens, the prompt's last one fed as the first step; one prompt ends with the newline that is also
    the padding id (a single prompt is never padded) and one is sample.py's default, the newline alone."""
    state, checkpoint, _ = imported
    for text in PROMPTS:
        prompt = encode(text)
        expected = reference_greedy(state, prompt, STEPS)
        assert our_greedy(checkpoint.model, prompt, STEPS) == expected, text
        assert len(set(expected)) > 1


def test_the_tokenizer_is_nanogpts_stoi(imported):
    _, checkpoint, _ = imported
    tokenizer = checkpoint.source_tokenizer
    text = "ROMEO:\nBut soft,  what light!"
    assert tokenizer.normalize(text) == text
    assert tokenizer.encode(tokenizer.normalize(text)) == encode(text)
    assert tokenizer.tokens(encode("a b\n")) == ["a", "␣", "b", "↵"]
    assert checkpoint.target_tokenizer.decode(encode("Thou art")) == "Thou art"


def test_a_pickled_object_of_another_class_is_refused_and_never_runs(tmp_path):
    marker = tmp_path / "ran"
    path, _ = write_ckpt(tmp_path / "out", scaler=Tracker(str(marker)))
    with pytest.raises(CheckpointError) as error:
        convert(path)
    text = str(error.value)
    assert "\n" not in text and f"{__name__}.Tracker" in text and "needs arbitrary unpickling" in text
    assert not marker.exists()


class Tracker:
    """A pickled object whose restoring would write a file."""

    def __init__(self, marker: str):
        self.marker = marker

    def __setstate__(self, state):
        open(state["marker"], "w").close()


def test_a_missing_meta_pkl_is_one_line_naming_it(tmp_path):
    path, _ = write_ckpt(tmp_path / "out", meta=False)
    with pytest.raises(CheckpointError) as error:
        convert(path)
    text = str(error.value)
    assert "\n" not in text and "give --set tokenizer=PATH (the meta.pkl its prepare.py wrote, " \
                                 "data/shakespeare_char/meta.pkl, or its folder" in text
    assert inspect(path).missing == {"tokenizer": text.split("tokenizer=")[1].split(" (read from")[0]}


def test_meta_pkl_in_a_folder_the_user_names(tmp_path):
    path, state = write_ckpt(tmp_path / "out", meta=False)
    write_meta(tmp_path / "meta.pkl")
    checkpoint = convert(path, settings={"tokenizer": str(tmp_path)})
    assert checkpoint.source_tokenizer.encode("Hi") == encode("Hi")
    assert checkpoint.provenance["imported_from"]["supplied"] == {"tokenizer": str(tmp_path)}


def test_a_gpt2_bpe_model_without_its_tokenizer_is_one_line(tmp_path):
    path, _ = write_ckpt(tmp_path / "out", vocab_size=50304, meta=False)
    with pytest.raises(CheckpointError) as error:
        convert(path)
    text = str(error.value)
    assert "\n" not in text and "GPT-2's BPE" in text and "--set tokenizer=PATH" in text


def test_attnviz_convert_then_info(imported, tmp_path, capsys):
    state, _, path = imported
    out = tmp_path / "shakespeare.safetensors"
    assert main(["convert", str(path), "-o", str(out)]) == 0, capsys.readouterr().err
    capsys.readouterr()
    assert main(["info", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "decoder-only" in printed and "nanogpt" in printed
    loaded = load_checkpoint(out)
    ids = encode(PROMPTS[0])
    with torch.no_grad():
        logits, _ = loaded.model(torch.tensor([ids[:3]]), torch.tensor([ids[3:]]))
    assert (logits[0].double() - reference(state, ids)[0][3:]).abs().max() < 1e-4


def test_the_checkpoint_opens_where_a_model_is_asked_for(imported, capsys):
    """``attnviz info ckpt.pt`` (as ``-c ckpt.pt``): converted once with the meta.pkl beside it."""
    _, _, path = imported
    assert main(["info", str(path)]) == 0, capsys.readouterr().err
    assert "nanogpt" in capsys.readouterr().out


def test_a_checkpoint_without_its_tokenizer_is_one_line_on_the_cli(tmp_path, capsys):
    path, _ = write_ckpt(tmp_path / "out", meta=False)
    assert main(["info", str(path)]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("attnviz: error:") and "\n" not in err and "data/shakespeare_char/meta.pkl" in err


def write_gpt2_tokenizer(folder) -> None:
    """A byte-level BPE tokenizer.json laid out as GPT-2's: 50,257 ids, ``<|endoftext|>`` the last (50256)."""
    tokenizers = pytest.importorskip("tokenizers")
    from tokenizers import decoders, models, pre_tokenizers

    alphabet = pre_tokenizers.ByteLevel.alphabet()
    vocab = {piece: index for index, piece in enumerate(sorted(alphabet))}
    merges = [("Ġ", "t"), ("h", "e"), ("Ġt", "he"), ("o", "r"), ("Ġw", "or")]
    for first, second in merges:
        vocab.setdefault(first, len(vocab))
        vocab.setdefault(second, len(vocab))
        vocab.setdefault(first + second, len(vocab))
    vocab.update({f"filler{index}": index for index in range(len(vocab), 50256)})
    tokenizer = tokenizers.Tokenizer(models.BPE(vocab=vocab, merges=merges))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.add_special_tokens(["<|endoftext|>"])
    folder.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(folder / "tokenizer.json"))


def test_a_gpt2_bpe_model_reads_the_tokenizer_json_it_is_given(tmp_path):
    """train.py's GPT-2 vocabulary rounded up to 50304: the end token is ``<|endoftext|>``, text is encoded as the
    tokenizer.json encodes it, and the logits are nanoGPT's."""
    tokenizers = pytest.importorskip("tokenizers")
    path, state = write_ckpt(tmp_path / "out", vocab_size=50304, meta=False)
    write_gpt2_tokenizer(tmp_path / "gpt2")
    assert tokenizers.Tokenizer.from_file(str(tmp_path / "gpt2" / "tokenizer.json")).token_to_id("<|endoftext|>") \
        == 50256
    checkpoint = convert(path, settings={"tokenizer": str(tmp_path / "gpt2" / "tokenizer.json")})
    config = checkpoint.model.config
    assert config.eos_id == config.pad_id == 50256 and config.vocab_size == 50304
    text = "the world turns"
    ids = tokenizers.Tokenizer.from_file(str(tmp_path / "gpt2" / "tokenizer.json")).encode(text).ids
    assert checkpoint.source_tokenizer.encode(text) == ids and len(ids) > 3
    with torch.no_grad():
        logits, _ = checkpoint.model(torch.tensor([ids[:2]]), torch.tensor([ids[2:]]))
    assert (logits[0].double() - reference(state, ids)[0][2:]).abs().max() < 1e-4


@pytest.mark.parametrize("bias", [True, False])
def test_model_args_without_bias_read_it_from_the_tensors(tmp_path, bias):
    """Checkpoints from before nanoGPT's ``bias`` setting: the biases the file holds say it."""
    args = model_args(bias=bias)
    del args["bias"]
    path, state = write_ckpt(tmp_path / "out", bias=bias, model_args=args)
    checkpoint = convert(path)
    assert checkpoint.model.config.norm_bias is checkpoint.model.config.qkv_bias is bias
    ids = encode(PROMPTS[0])
    with torch.no_grad():
        logits, _ = checkpoint.model(torch.tensor([ids[:3]]), torch.tensor([ids[3:]]))
    assert (logits[0].double() - reference(state, ids)[0][3:]).abs().max() < 1e-4


def test_a_meta_pkl_that_is_not_nanogpts_is_one_line(tmp_path):
    path, _ = write_ckpt(tmp_path / "out", meta=False)
    with open(tmp_path / "out" / "meta.pkl", "wb") as handle:
        pickle.dump({"vocab_size": 2, "itos": {0: "a", "1": "b"}, "stoi": {"a": 0, "b": 1}}, handle)
    with pytest.raises(CheckpointError) as error:
        convert(path)
    assert "itos must map the ids 0..N-1 to single characters" in str(error.value)
