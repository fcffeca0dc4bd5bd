"""Decoder-only language models imported from Hugging Face folders, checked against ``transformers`` itself.

For each family (GPT-2, Llama with grouped-query attention and Llama 3 rope scaling, Mistral with a sliding window
shorter than the sequence, Qwen2 with q/k/v biases and a tied output, Qwen3 with q/k norms and one key/value head,
Gemma 2 with soft-capping, alternating local/global layers and its own query scale) a tiny model with random weights
is built by transformers here (eager attention), written with ``save_pretrained`` beside a byte-level BPE
``tokenizer.json`` trained here, converted by our importer and compared: logits to 1e-4, every head's weights to
1e-5 (one prompt, and two prompts of different lengths in one batch), the cached ``start``/``step`` path against
one ``forward``, greedy continuations against ``generate``, and head ablation against the same head's columns of
the output projection zeroed in transformers' model.
"""

from __future__ import annotations

import os

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
transformers = pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")

from models.importers import convert, detect_format  # noqa: E402
from models.nn.ablation import Ablation, HeadGates  # noqa: E402
from models.storage.checkpoint import load_checkpoint, save_checkpoint  # noqa: E402

SENTENCES = ["the cat sat on the mat", "where is the house", "i like green apples", "the dog runs in the park",
             "we are going to the beach", "she reads a book every night", "the water is cold"]
SPECIALS = ["<pad>", "<s>", "</s>", "<unk>"]
PAD, BOS, EOS = 0, 1, 2
EXTRA = 5  # the embedding has a few ids the tokenizer never produces, as real models do
STEPS = 20

COMMON = dict(hidden_size=32, intermediate_size=48, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2,
              max_position_embeddings=128, bos_token_id=BOS, eos_token_id=EOS, pad_token_id=PAD)
FAMILIES = {
    "gpt2": ("GPT2Config", "GPT2LMHeadModel",
             dict(n_embd=32, n_layer=3, n_head=4, n_positions=64, bos_token_id=BOS, eos_token_id=EOS)),
    "llama": ("LlamaConfig", "LlamaForCausalLM",
              dict(COMMON, tie_word_embeddings=False,
                   rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                 "original_max_position_embeddings": 32})),
    "mistral": ("MistralConfig", "MistralForCausalLM", dict(COMMON, sliding_window=5, tie_word_embeddings=False)),
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM", dict(COMMON, tie_word_embeddings=True)),
    "qwen3": ("Qwen3Config", "Qwen3ForCausalLM", dict(COMMON, num_key_value_heads=1, head_dim=16,
                                                      tie_word_embeddings=False)),
    "gemma2": ("Gemma2Config", "Gemma2ForCausalLM",
               dict(COMMON, head_dim=8, sliding_window=4, query_pre_attn_scalar=16, attn_logit_softcapping=2.0,
                    final_logit_softcapping=3.0)),
}


def write_tokenizer(folder, *, with_bos: bool) -> int:
    """A byte-level BPE tokenizer.json (prompts start with ``<s>`` when ``with_bos``, as Llama's); returns its size."""
    from tokenizers import decoders, models, pre_tokenizers, processors, trainers

    tokenizer = tokenizers.Tokenizer(models.BPE(unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=SPECIALS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tokenizer.train_from_iterator(SENTENCES, trainer)
    if with_bos:
        tokenizer.post_processor = processors.TemplateProcessing(single=["<s>", "$A"], special_tokens=[("<s>", BOS)])
    tokenizer.save(str(folder / "tokenizer.json"))
    return tokenizer.get_vocab_size()


def build(folder, family: str, **overrides):
    """A random-weight transformers model of ``family`` saved in ``folder`` with its tokenizer.json; returns it."""
    config_class, model_class, settings = FAMILIES[family]
    folder.mkdir(parents=True, exist_ok=True)
    vocab_size = write_tokenizer(folder, with_bos=family != "gpt2") + EXTRA
    config = getattr(transformers, config_class)(**{"vocab_size": vocab_size, **settings, **overrides})
    torch.manual_seed(0)
    model = getattr(transformers, model_class)(config).eval()
    model.config._attn_implementation = "eager"
    with torch.no_grad():  # weights large enough that attention is far from uniform and greedy choices are clear
        for name, parameter in model.named_parameters():
            if "norm" in name or name.endswith(("ln_1.weight", "ln_2.weight", "ln_f.weight")):
                parameter.copy_((0.0 if family == "gemma2" else 1.0) + 0.1 * torch.randn_like(parameter))
            else:
                parameter.normal_(0.0, 0.3)
    model.save_pretrained(folder)
    return model


def encode(folder, text: str) -> list[int]:
    return tokenizers.Tokenizer.from_file(str(folder / "tokenizer.json")).encode(text).ids


@pytest.fixture(scope="module", params=list(FAMILIES))
def imported(request, tmp_path_factory):
    """(family, transformers model, our checkpoint, folder)."""
    folder = tmp_path_factory.mktemp(request.param) / "model"
    original = build(folder, request.param)
    return request.param, original, convert(folder), folder


def theirs(original, ids: list[int]):
    with torch.no_grad():
        return original(torch.tensor([ids]), output_attentions=True)


def test_the_folder_is_detected_and_described(imported):
    family, original, checkpoint, folder = imported
    assert detect_format(folder) == "hf-causal"
    config = checkpoint.model.config
    assert config.arch == "decoder-only" and config.eos_id == EOS
    assert checkpoint.model.attention_shape() == {"dec_self": (3, 4)}
    kv = original.config.n_head if family == "gpt2" else original.config.num_key_value_heads
    assert checkpoint.model.kv_groups() == [head * kv // 4 for head in range(4)]
    expected = {"mistral": [5, 5, 5], "gemma2": [4, 0, 4]}.get(family, [0, 0, 0])
    assert checkpoint.model.sliding_windows() == expected


def test_logits_and_every_head_equal_transformers(imported):
    family, original, checkpoint, folder = imported
    ids = encode(folder, SENTENCES[4]) + encode(folder, SENTENCES[5])  # longer than Mistral's and Gemma's windows
    expected = theirs(original, ids)
    cut = 5
    with torch.no_grad():
        logits, intermediates = checkpoint.model(torch.tensor([ids[:cut]]), torch.tensor([ids[cut:]]),
                                                 need_weights=True)
    assert (logits - expected.logits[:, cut:]).abs().max() < 1e-4
    assert len(intermediates.attention["dec_self"]) == len(expected.attentions) == 3
    for ours, reference in zip(intermediates.attention["dec_self"], expected.attentions):
        assert ours.shape == reference.shape == (1, 4, len(ids), len(ids))
        assert (ours - reference).abs().max() < 1e-5
    mask = intermediates.masks["dec_self"]
    assert mask.shape == (1, 1, len(ids), len(ids)) and bool(torch.equal(mask[0, 0], torch.ones(len(ids), len(ids),
                                                                                                dtype=torch.bool).tril()))


def test_a_batch_of_prompts_of_different_lengths_gives_each_its_own_numbers(imported):
    family, original, checkpoint, folder = imported
    prompts = [encode(folder, SENTENCES[4]) + encode(folder, SENTENCES[1]), encode(folder, SENTENCES[2])]
    continuation = [encode(folder, SENTENCES[0])[:6], encode(folder, SENTENCES[6])[:6]]
    width = max(map(len, prompts))
    src = torch.tensor([prompt + [checkpoint.model.pad_id] * (width - len(prompt)) for prompt in prompts])
    with torch.no_grad():
        logits, intermediates = checkpoint.model(src, torch.tensor(continuation), need_weights=True)
    for row, (prompt, tail) in enumerate(zip(prompts, continuation)):
        expected = theirs(original, prompt + tail)
        assert (logits[row] - expected.logits[0, len(prompt):]).abs().max() < 1e-4
        kept = list(range(len(prompt))) + list(range(width, width + len(tail)))
        for ours, reference in zip(intermediates.attention["dec_self"], expected.attentions):
            assert (ours[row][:, kept][:, :, kept] - reference[0]).abs().max() < 1e-5
            padding = [index for index in range(width) if index not in kept]
            assert float(ours[row][:, kept][:, :, padding].abs().sum()) == 0.0  # padding never attended


def test_start_and_step_with_the_cache_equal_one_forward(imported):
    family, original, checkpoint, folder = imported
    prompts = [encode(folder, SENTENCES[3]), encode(folder, SENTENCES[2])]
    continuation = torch.tensor([encode(folder, SENTENCES[0])[:7], encode(folder, SENTENCES[5])[:7]])
    width = max(map(len, prompts))
    src = torch.tensor([prompt + [checkpoint.model.pad_id] * (width - len(prompt)) for prompt in prompts])
    model = checkpoint.model
    with torch.no_grad():
        # forward: the prompt is src plus the first fed token; start takes the prompt minus that token
        logits, whole = model(src[:, :-1], torch.cat([src[:, -1:], continuation], 1), need_weights=True)
        state, prefix = model.start(src[:, :-1])
        length = width - 1
        for layer, weights in enumerate(prefix.attention["dec_self"]):
            assert weights.shape == (2, 4, length, length)
            assert (weights - whole.attention["dec_self"][layer][:, :, :length, :length]).abs().max() < 1e-5
        fed = torch.cat([src[:, -1:], continuation], 1)
        for t in range(fed.shape[1]):
            out = model.step(fed[:, t], state)
            assert (out.logits - logits[:, t]).abs().max() < 1e-4
            assert out.masks["dec_self"].shape == (2, length + t + 1)
            for layer, row in enumerate(out.attention["dec_self"]):
                assert row.shape == (2, 4, length + t + 1)
                assert (row - whole.attention["dec_self"][layer][:, :, length + t, : length + t + 1]).abs().max() < 1e-5


def greedy(model, prompt: list[int], steps: int) -> list[int]:
    """Greedy continuation through start/step: until the end token or ``steps`` tokens."""
    output: list[int] = []
    with torch.no_grad():
        state, _ = model.start(torch.tensor([prompt[:-1]]))
        token = prompt[-1]
        for _ in range(steps):
            token = int(model.step(torch.tensor([token]), state, need_weights=False).logits[0].argmax())
            output.append(token)
            if token == EOS:
                break
    return output


def test_greedy_continuation_equals_generate(imported):
    family, original, checkpoint, folder = imported
    for text in SENTENCES[:3]:
        prompt = encode(folder, text)
        with torch.no_grad():
            expected = original.generate(torch.tensor([prompt]), do_sample=False, max_new_tokens=STEPS,
                                         pad_token_id=EOS, eos_token_id=EOS)[0, len(prompt):].tolist()
        assert greedy(checkpoint.model, prompt, STEPS) == expected, text


def _zero_head_output(original, family: str, layer: int, head: int) -> None:
    """transformers' model with one head's part of the output projection zeroed: that head adds nothing."""
    size = original.config.hidden_size // original.config.num_attention_heads if family == "gpt2" \
        else original.model.layers[layer].self_attn.head_dim
    with torch.no_grad():
        if family == "gpt2":  # Conv1D: [in, out]
            original.transformer.h[layer].attn.c_proj.weight[head * size:(head + 1) * size] = 0.0
        else:
            original.model.layers[layer].self_attn.o_proj.weight[:, head * size:(head + 1) * size] = 0.0


def test_head_ablation_zeroes_that_heads_output(imported, tmp_path):
    family, _, checkpoint, folder = imported
    original = build(tmp_path / "again", family)  # a copy to modify
    ids = encode(folder, SENTENCES[6]) + encode(folder, SENTENCES[3])
    ablation = Ablation.of([("dec_self", 1, 2), ("dec_self", 2, 0)])
    with torch.no_grad():
        plain, _ = checkpoint.model(torch.tensor([ids[:3]]), torch.tensor([ids[3:]]))
        ablated, intermediates = checkpoint.model(torch.tensor([ids[:3]]), torch.tensor([ids[3:]]), need_weights=True,
                                                  ablation=ablation)
    _zero_head_output(original, family, 1, 2)
    _zero_head_output(original, family, 2, 0)
    expected = theirs(original, ids)
    assert (ablated - expected.logits[:, 3:]).abs().max() < 1e-4
    assert (ablated - plain).abs().max() > 1e-3  # the heads mattered
    assert (intermediates.attention["dec_self"][1] - expected.attentions[1]).abs().max() < 1e-5  # still traced


def test_the_converted_checkpoint_saves_and_loads(imported, tmp_path):
    family, original, checkpoint, folder = imported
    path = save_checkpoint(tmp_path / "lm.safetensors", checkpoint.model, checkpoint.source_tokenizer,
                           checkpoint.target_tokenizer, checkpoint.provenance)
    loaded = load_checkpoint(path)
    assert loaded.model.config == checkpoint.model.config
    ids = encode(folder, SENTENCES[1])
    with torch.no_grad():
        logits, _ = loaded.model(torch.tensor([ids[:2]]), torch.tensor([ids[2:]]))
    assert (logits - theirs(original, ids).logits[:, 2:]).abs().max() < 1e-4
    assert loaded.source_tokenizer.encode(SENTENCES[1]) == ids  # framed as the folder's tokenizer frames it


def test_head_gates_switch_a_head_off_in_their_copy_of_the_batch(imported):
    """HeadGates as head importance uses them: the batch runs once below the first gated layer, then once per copy,
    each copy with its own gate; a gate of 0 is the same as ablating the head."""
    family, _, checkpoint, folder = imported
    prompts = [encode(folder, SENTENCES[3]), encode(folder, SENTENCES[1])]
    width = max(map(len, prompts))
    src = torch.tensor([prompt + [checkpoint.model.pad_id] * (width - len(prompt)) for prompt in prompts])
    tgt = torch.tensor([encode(folder, SENTENCES[0])[:5], encode(folder, SENTENCES[2])[:5]])
    gate = torch.ones(4, 4)
    gate[2:, 3] = 0.0  # copy 1 (rows 2, 3) switches layer 1's head 3 off
    gates = HeadGates({("dec_self", 1): gate}, copies=2, widen_at=("dec_self", 1))
    with torch.no_grad():
        gated, _ = checkpoint.model(src, tgt, ablation=gates)
        plain, _ = checkpoint.model(src, tgt)
        ablated, _ = checkpoint.model(src, tgt, ablation=Ablation.of([("dec_self", 1, 3)]))
    assert gated.shape[0] == 4
    assert (gated[:2] - plain).abs().max() < 1e-5 and (gated[2:] - ablated).abs().max() < 1e-5


def test_a_one_token_prompt_starts_from_nothing(imported):
    family, original, checkpoint, folder = imported
    ids = encode(folder, SENTENCES[2])
    expected = theirs(original, ids)
    with torch.no_grad():
        state, prefix = checkpoint.model.start(torch.tensor([ids[:0]]))
        assert [weights.shape for weights in prefix.attention["dec_self"]] == [(1, 4, 0, 0)] * 3
        for t, token in enumerate(ids):
            out = checkpoint.model.step(torch.tensor([token]), state)
            assert (out.logits[0] - expected.logits[0, t]).abs().max() < 1e-4
            for layer, row in enumerate(out.attention["dec_self"]):
                assert (row[0] - expected.attentions[layer][0, :, t, : t + 1]).abs().max() < 1e-5
