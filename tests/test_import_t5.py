"""Import of Hugging Face T5 folders (v1.0 and v1.1), checked against ``transformers`` itself, offline.

Tiny ``T5ForConditionalGeneration`` models are built from a ``T5Config`` with seeded random weights and written
with ``save_pretrained``. The tokenizer is a sentencepiece model trained here: the v1.0 folder carries it as
``spiece.model`` only (ids as sentencepiece gives them, ``</s>`` appended, as T5's sentencepiece tokenizer
does), the v1.1 folder a ``tokenizer.json`` written by transformers' own ``T5Tokenizer`` from its pieces.
The v1.1 model has its own ``lm_head`` (untied, no logit scaling), a per-head size with heads × d_kv ≠ d_model
and a deeper decoder. ``relative_attention_max_distance`` is small so that the farthest buckets are used.
Decoding settings are aligned with ours as in the Marian tests: padding banned (our decoders never emit it).
"""

from __future__ import annotations

import io
import json
import os
import shutil

import numpy as np
import pytest
import sentencepiece as spm
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
transformers = pytest.importorskip("transformers")  # a test extra: pip install -e ".[test]"

from models.storage.checkpoint import load_checkpoint, save_checkpoint
from models.inference.decoding import Capture, beam_search, finish, forced, greedy
from models.errors import CheckpointError
from models.importers import convert, detect_format
from models.inference.translator import Translator
from tests.helpers import assert_same_forward  # noqa: E402

SENTENCES = ["the cat sat on the mat", "where is the house", "i like green apples", "the dog runs in the park",
             "we are going to the beach", "she reads a book every night", "the water is cold"]
PAD, EOS = 0, 1
EXTRA_IDS = 4
MAX_NEW = 12


def train_spm() -> bytes:
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(SENTENCES), model_writer=model, vocab_size=40,
                                   hard_vocab_limit=False, character_coverage=1.0, num_threads=1, minloglevel=2,
                                   pad_id=PAD, eos_id=EOS, unk_id=2, bos_id=-1)
    return model.getvalue()


def build(folder, version: str):
    """``version``: ``v1.0``, ``v1.1`` or ``mt5`` (v1.1's layout under its own model classes)."""
    proto = train_spm()
    processor = spm.SentencePieceProcessor(model_proto=proto)
    if version == "v1.0":
        (folder / "spiece.model").write_bytes(proto)
        (folder / "tokenizer_config.json").write_text(json.dumps({"extra_ids": EXTRA_IDS}), encoding="utf-8")
    else:
        pieces = [(processor.id_to_piece(i), processor.get_score(i)) for i in range(processor.get_piece_size())]
        transformers.T5Tokenizer(vocab=pieces, extra_ids=EXTRA_IDS).save_pretrained(folder)
    v11 = version != "v1.0"
    config_class, model_class = (transformers.MT5Config, transformers.MT5ForConditionalGeneration) \
        if version == "mt5" else (transformers.T5Config, transformers.T5ForConditionalGeneration)
    config = config_class(
        vocab_size=processor.get_piece_size() + EXTRA_IDS + 4,  # ids beyond the tokenizer's, as real T5 has
        d_model=16, d_kv=6 if v11 else 4, d_ff=32, num_layers=2, num_decoder_layers=3 if v11 else 2, num_heads=4,
        relative_attention_num_buckets=8, relative_attention_max_distance=8, dropout_rate=0.1,
        feed_forward_proj="gated-gelu" if v11 else "relu", tie_word_embeddings=not v11, pad_token_id=PAD,
        eos_token_id=EOS, decoder_start_token_id=PAD)
    torch.manual_seed(0 if v11 else 1)
    model = model_class(config)
    with torch.no_grad():
        if v11:
            model.lm_head.weight = torch.nn.Parameter(torch.randn(config.vocab_size, config.d_model) * 0.5)
        for name, parameter in model.named_parameters():  # far from the init, so outputs depend on the input
            if "layer_norm" not in name:
                parameter.add_(torch.randn_like(parameter) * 0.3)
    model.save_pretrained(folder)
    original = model_class.from_pretrained(str(folder), attn_implementation="eager")
    return folder, original.eval(), processor


@pytest.fixture(scope="module", params=["v1.0", "v1.1"])
def family(request, tmp_path_factory):
    return (request.param, *build(tmp_path_factory.mktemp(request.param.replace(".", "")), request.param))


def source_ids(version, folder, processor, text: str) -> list[int]:
    """What transformers' tokenizer (tokenizer.json) or T5's sentencepiece tokenizer gives for ``text``."""
    if version != "v1.0":
        return transformers.T5Tokenizer.from_pretrained(str(folder))(text).input_ids
    return processor.encode(text) + [EOS]


def test_the_folder_is_detected_and_its_tokenizer_frames_sources(family):
    version, folder, original, processor = family
    assert detect_format(folder) == detect_format(folder / "model.safetensors") == "hf-t5"
    checkpoint = convert(folder)
    config = checkpoint.config
    assert (config.positions, config.norm_kind, config.scale_attention, config.relative_buckets,
            config.relative_max_distance) == ("none", "rms", False, 8, 8)
    assert (config.gated_ffn, config.activation, config.tie_output) == \
        ((True, "gelu_tanh", False) if version == "v1.1" else (False, "relu", True))
    assert config.logit_scale == (1.0 if version == "v1.1" else 16 ** -0.5)
    assert (config.bos_id, config.eos_id, config.pad_id) == (PAD, EOS, PAD)
    translator = Translator(checkpoint)
    for text in [*SENTENCES, "zebra quux"]:
        assert translator.source(text).ids == source_ids(version, folder, processor, text)
    tokenizer = checkpoint.target_tokenizer
    assert tokenizer.token(original.config.vocab_size - 1).startswith("<id ")
    assert tokenizer.decode(processor.encode(SENTENCES[0])) == SENTENCES[0]
    extra = [tokenizer.token(i) for i in range(40, 40 + EXTRA_IDS)]
    assert sorted(extra) == [f"<extra_id_{n}>" for n in range(EXTRA_IDS)]


def test_logits_and_every_head_equal_transformers(family, tmp_path):
    version, folder, original, processor = family
    checkpoint = convert(folder)
    path = save_checkpoint(tmp_path / "t5.safetensors", checkpoint.model, checkpoint.source_tokenizer,
                           checkpoint.target_tokenizer, checkpoint.provenance)
    for model in (checkpoint.model, load_checkpoint(path).model):
        assert_forward_equal(model, original, version, folder, processor)


def assert_forward_equal(model, original, version, folder, processor) -> None:
    """Logits (weighted and fused paths) and every head of all three kinds equal transformers' eager forward,
    on a padded batch whose longest source is beyond relative_attention_max_distance."""
    batch = [source_ids(version, folder, processor, text) for text in
             (SENTENCES[0] + " " + SENTENCES[4] + " " + SENTENCES[5], SENTENCES[1], SENTENCES[2])]
    width = max(map(len, batch))
    assert width > 20  # distances beyond relative_attention_max_distance share the last bucket
    src = torch.tensor([ids + [PAD] * (width - len(ids)) for ids in batch])
    tgt = torch.randint(3, original.config.vocab_size, (3, 14), generator=torch.Generator().manual_seed(3))
    tgt[:, 0] = PAD
    depth = original.config.num_decoder_layers
    layers = {"enc_self": 2, "dec_self": depth, "cross": depth}
    with torch.no_grad():
        expected = original(input_ids=src, attention_mask=(src != PAD).long(), decoder_input_ids=tgt,
                            output_attentions=True)
        logits, intermediates = model(src, tgt, need_weights=True)
        assert_same_forward(expected, logits, intermediates, layers=layers)
        unweighted, _ = model(src, tgt, need_weights=False)  # the fused path, bias folded into its mask
        assert (unweighted - expected.logits).abs().max() < 1e-4


def test_mt5_has_the_v1_1_layout(tmp_path):
    folder, original, processor = build(tmp_path, "mt5")
    assert detect_format(folder) == "hf-t5"
    checkpoint = convert(folder)
    assert checkpoint.config.gated_ffn and not checkpoint.config.tie_output
    assert_forward_equal(checkpoint.model, original, "mt5", folder, processor)


def test_relative_buckets_equal_t5s_for_every_distance():
    from transformers.models.t5.modeling_t5 import T5Attention

    from models.nn.transformer import relative_position_buckets

    distance = torch.arange(-3000, 3001)
    for buckets, max_distance in ((32, 128), (8, 8), (64, 300), (6, 50), (7, 20), (4, 3)):
        for bidirectional in (True, False):
            ours = relative_position_buckets(distance, buckets, max_distance, bidirectional=bidirectional)
            theirs = T5Attention._relative_position_bucket(distance, bidirectional=bidirectional,
                                                           num_buckets=buckets, max_distance=max_distance)
            assert torch.equal(ours, theirs), (buckets, max_distance, bidirectional)


def test_bad_relative_bias_settings_are_one_line():
    from models.nn.config import make_config
    from models.errors import ConfigError

    for settings in ({"relative_buckets": 3, "relative_max_distance": 20},
                     {"relative_buckets": 8, "relative_max_distance": 4}, {"relative_buckets": 4},
                     {"relative_buckets": 1 << 13, "relative_max_distance": 1 << 14}):
        with pytest.raises(ConfigError, match="relative_buckets") as error:
            make_config("transformer-preln", 20, 20, **settings)
        assert "\n" not in str(error.value)
    config = make_config("transformer-preln", 20, 20, relative_buckets=8, relative_max_distance=16, positions="none")
    assert config.relative_buckets == 8


def generation(config, beams: int = 1):
    """Greedy or beam search (ranked by summed log-probability: length_penalty 0, the one rule ours and
    transformers' share); without transformers' cache when the decoder is deeper than the encoder (its cache
    is sized by the encoder's depth there: an IndexError in transformers 5.23)."""
    return transformers.GenerationConfig(max_new_tokens=MAX_NEW, num_beams=beams, do_sample=False,
                                         bad_words_ids=[[PAD]], decoder_start_token_id=PAD, eos_token_id=EOS,
                                         pad_token_id=PAD, length_penalty=0.0,
                                         use_cache=config.num_layers == config.num_decoder_layers)


def test_greedy_equals_generate_and_the_cached_trace_equals_the_forced_pass(family):
    version, folder, original, processor = family
    checkpoint = convert(folder)
    outputs = []
    for text in SENTENCES:
        ids = source_ids(version, folder, processor, text)
        with torch.no_grad():
            generated = original.generate(torch.tensor([ids]), generation_config=generation(original.config))
        expected = generated[0, 1:].tolist()
        result = finish(greedy(checkpoint.model, ids, Capture(max_len=MAX_NEW)))[0]
        assert result.token_ids == expected, text
        outputs.append(tuple(result.token_ids))
        target = result.token_ids[:-1] if result.token_ids[-1] == EOS else result.token_ids
        one_pass = finish(forced(checkpoint.model, ids, target))[0]
        if result.token_ids[-1] == EOS:  # forced decoding appends the end token
            assert one_pass.token_ids == result.token_ids
        for kind in ("enc_self", "dec_self", "cross"):
            for cached, full in zip(result.trace.attention[kind], one_pass.trace.attention[kind]):
                rows = cached.shape[1]
                assert np.abs(cached - full[:, :rows, : cached.shape[2]]).max() < 1e-5
    assert len(set(outputs)) > 1


def test_beam_search_equals_generate(family):
    version, folder, original, processor = family
    checkpoint = convert(folder)
    differs_from_greedy = 0
    for text in SENTENCES[:4]:
        ids = source_ids(version, folder, processor, text)
        with torch.no_grad():
            generated = original.generate(torch.tensor([ids]), generation_config=generation(original.config, 4))
        expected = generated[0, 1:].tolist()
        ours = finish(beam_search(checkpoint.model, ids, Capture(max_len=MAX_NEW), beam=4,
                                  length_penalty=0.0))[0].token_ids
        assert ours == expected, text
        differs_from_greedy += ours != finish(greedy(checkpoint.model, ids, Capture(max_len=MAX_NEW)))[0].token_ids
    assert differs_from_greedy  # the beams were really searched


def test_an_unused_weight_is_refused_by_name(family, tmp_path):
    from safetensors.torch import save_file

    _, folder, original, _ = family
    changed = tmp_path / "changed"
    shutil.copytree(folder, changed)
    state = {name: tensor.clone().contiguous() for name, tensor in original.state_dict().items()}
    per_layer = "encoder.block.1.layer.0.SelfAttention.relative_attention_bias.weight"  # a table of its own
    save_file({**state, per_layer: torch.zeros(8, 4)}, changed / "model.safetensors")
    with pytest.raises(CheckpointError, match=rf"unexpected weights, not part of the T5 layout: {per_layer}$"):
        convert(changed)
    encoder_only = {name: tensor for name, tensor in state.items() if not name.startswith("decoder.")}
    save_file(encoder_only, changed / "model.safetensors")
    with pytest.raises(CheckpointError, match=r"encoder-only T5 .*no decoder to show$"):
        convert(changed)


def test_folders_written_before_transformers_5_read_the_same(family, tmp_path):
    """Older folders: config.json says ``tie_word_embeddings: false`` for v1.1 and no ``scale_decoder_outputs``;
    ``pytorch_model.bin`` holds every tied copy and a relative-bias table on the first cross-attention that
    transformers never reads (t5-small has one)."""
    version, folder, original, _ = family
    older = tmp_path / "older"
    shutil.copytree(folder, older)
    data = json.loads((older / "config.json").read_text(encoding="utf-8"))
    data.pop("scale_decoder_outputs")
    data["tie_word_embeddings"] = version == "v1.0"
    (older / "config.json").write_text(json.dumps(data), encoding="utf-8")
    state = {name: tensor.clone() for name, tensor in original.state_dict().items()}
    state["encoder.embed_tokens.weight"] = state["decoder.embed_tokens.weight"] = state["shared.weight"]
    state["decoder.block.0.layer.1.EncDecAttention.relative_attention_bias.weight"] = torch.randn(8, 4)
    (older / "model.safetensors").unlink()
    torch.save(state, older / "pytorch_model.bin")
    converted, current = convert(older), convert(folder)
    assert converted.config == current.config
    for name, tensor in current.model.state_dict().items():
        assert torch.equal(converted.model.state_dict()[name], tensor), name


def test_other_t5_families_are_refused_naming_what_is_supported(tmp_path):
    for model_type in ("longt5", "umt5"):
        (tmp_path / "config.json").write_text(json.dumps({"model_type": model_type}), encoding="utf-8")
        with pytest.raises(CheckpointError, match=rf"a Hugging Face {model_type} model; this version imports model "
                                                  r"types marian, bart, mbart, m2m_100, pegasus, blenderbot-small, "
                                                  r"fsmt, t5, mt5, gpt2, llama, mistral, qwen2, qwen3, gemma2$"):
            detect_format(tmp_path)


def test_checkpoints_without_the_t5_switches_save_the_config_older_versions_read(family):
    from models.nn.config import LATER_FIELDS, config_from_dict, config_to_dict, make_config

    new = ("relative_buckets", "relative_max_distance", "scale_attention", "gated_ffn", "feed_forward_bias")
    plain = config_to_dict(make_config("transformer-preln", 20, 20))
    assert not set(new) & set(plain) and set(new) <= set(LATER_FIELDS)
    loaded = config_from_dict(plain)
    assert (loaded.relative_buckets, loaded.scale_attention, loaded.gated_ffn, loaded.feed_forward_bias) == \
        (0, True, False, True)
    _, folder, _, _ = family
    saved = config_to_dict(convert(folder).config)
    assert saved["relative_buckets"] == 8 and saved["scale_attention"] is False
    assert config_from_dict(saved) == convert(folder).config


def test_the_cli_converts_the_folder_and_translates_as_the_library_does(family, tmp_path, capsys):
    from attnviz.cli import main

    version, folder, _, _ = family
    output = tmp_path / "t5.safetensors"
    assert main(["convert", str(folder), "-o", str(output)]) == 0
    assert "hf-t5" in capsys.readouterr().err
    expected = Translator(load_checkpoint(output), "cpu").translate(SENTENCES[3], max_len=6).text
    assert main(["translate", "-c", str(output), "--max-len", "6", SENTENCES[3]]) == 0
    assert capsys.readouterr().out == expected + "\n"
    assert main(["info", str(output), "--json"]) == 0
    record = json.loads(capsys.readouterr().out)["provenance"]["imported_from"]
    assert record["format"] == "hf-t5" and record["tokenization"] == ("spiece.model" if version == "v1.0" else
                                                                   "tokenizer.json")
