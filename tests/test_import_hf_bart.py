"""Import of Hugging Face BART and mBART folders, checked against ``transformers`` itself, offline.

Tiny models are built from a ``BartConfig``/``MBartConfig`` with random weights and written with
``save_pretrained``; the byte-level BPE ``tokenizer.json`` is trained here with the ``tokenizers`` library
(BART frames sources as ``<s> … </s>``, the mBART folder as ``… </s> en_XX``, as their tokenizers do).
Decoding settings are aligned with ours as in the Marian tests: padding banned, no forced tokens.
"""

from __future__ import annotations

import json
import os
import shutil

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
transformers = pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")

from models.storage.checkpoint import load_checkpoint, save_checkpoint
from models.errors import CheckpointError
from models.importers import convert, detect_format
from tests.helpers import assert_greedy_equals_generate, assert_same_forward  # noqa: E402

SENTENCES = ["the cat sat on the mat", "where is the house", "i like green apples", "the dog runs in the park",
             "we are going to the beach", "she reads a book every night", "the water is cold"]
SPECIALS = ["<s>", "<pad>", "</s>", "<unk>"]
PAD, EOS = 1, 2
MAX_NEW = 12


def write_tokenizer(folder, language_code: str | None) -> int:
    """A byte-level BPE tokenizer.json; returns its vocabulary size."""
    from tokenizers import decoders, models, pre_tokenizers, processors, trainers

    tokenizer = tokenizers.Tokenizer(models.BPE(unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=SPECIALS + ([language_code] if language_code else []),
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tokenizer.train_from_iterator(SENTENCES, trainer)
    code = language_code
    single = ["$A", "</s>", code] if code else ["<s>", "$A", "</s>"]
    specials = [(token, tokenizer.token_to_id(token)) for token in ({*single} - {"$A"})]
    tokenizer.post_processor = processors.TemplateProcessing(single=single, special_tokens=specials)
    tokenizer.save(str(folder / "tokenizer.json"))
    return tokenizer.get_vocab_size()


def build(folder, kind: str, **overrides):
    vocab_size = write_tokenizer(folder, "en_XX" if kind == "mbart" else None)
    config_class = transformers.BartConfig if kind == "bart" else transformers.MBartConfig
    model_class = transformers.BartForConditionalGeneration if kind == "bart" else \
        transformers.MBartForConditionalGeneration
    settings = dict(vocab_size=vocab_size + 3, d_model=16, encoder_layers=2, decoder_layers=2,  # ids beyond the
                    encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=32,  # tokenizer's
                    decoder_ffn_dim=32, max_position_embeddings=40, pad_token_id=PAD, bos_token_id=0,
                    eos_token_id=EOS, decoder_start_token_id=EOS, forced_bos_token_id=None,
                    forced_eos_token_id=None, scale_embedding=kind == "mbart")
    config = config_class(**{**settings, **overrides})
    torch.manual_seed(0)
    model = model_class(config)
    with torch.no_grad():  # far from the 0.02-std init, so that outputs depend on the input
        for name, parameter in model.named_parameters():
            if "layer_norm" not in name and "layernorm" not in name:
                parameter.add_(torch.randn_like(parameter) * 0.3).mul_(2.0)
        model.final_logits_bias.normal_(0.0, 0.5)
        model.final_logits_bias[0, EOS] += 4.5  # some outputs end early, some run to the limit
    model.save_pretrained(folder)
    original = model_class.from_pretrained(str(folder), attn_implementation="eager").eval()
    return folder, original, tokenizers.Tokenizer.from_file(str(folder / "tokenizer.json"))


@pytest.fixture(scope="module", params=["bart", "mbart"])
def family(request, tmp_path_factory):
    return (request.param, *build(tmp_path_factory.mktemp(request.param), request.param))


def generation(beams: int = 1):
    return transformers.GenerationConfig(max_new_tokens=MAX_NEW, num_beams=beams, do_sample=False,
                                         bad_words_ids=[[PAD]],
                                         decoder_start_token_id=EOS, eos_token_id=EOS, pad_token_id=PAD,
                                         forced_bos_token_id=None, forced_eos_token_id=None)


def test_the_folder_is_detected_and_its_tokenizer_frames_sources(family):
    kind, folder, _, tokenizer = family
    assert detect_format(folder) == detect_format(folder / "model.safetensors") == "hf-bart"
    checkpoint = convert(folder)
    config = checkpoint.config
    assert (config.positions, config.position_offset, config.embedding_norm) == ("learned", 2, True)
    assert config.norm_position == ("pre" if kind == "mbart" else "post") and config.activation == "gelu"
    for text in [*SENTENCES, "zebra quux"]:
        assert checkpoint.source_tokenizer.encode(text) == tokenizer.encode(text).ids
    ids = tokenizer.encode(SENTENCES[0], add_special_tokens=False).ids
    assert checkpoint.target_tokenizer.decode(ids) == tokenizer.decode(ids)


def test_logits_and_every_head_equal_transformers(family, tmp_path):
    _, folder, original, tokenizer = family
    assert_converted_forward_equal(convert(folder), original, tokenizer, tmp_path / "bart.safetensors")


def assert_converted_forward_equal(checkpoint, original, tokenizer, path, heads=None) -> None:
    """The converted model, and the same saved and loaded again, give transformers' logits and every head's
    weights on three sentences and a random forced target."""
    batch = [tokenizer.encode(text).ids for text in SENTENCES[:3]]
    width = max(map(len, batch))
    src = torch.tensor([ids + [PAD] * (width - len(ids)) for ids in batch])
    tgt = torch.randint(3, original.config.vocab_size, (3, 6), generator=torch.Generator().manual_seed(3))
    tgt[:, 0] = EOS
    path = save_checkpoint(path, checkpoint.model, checkpoint.source_tokenizer, checkpoint.target_tokenizer,
                           checkpoint.provenance)
    with torch.no_grad():
        expected = original(input_ids=src, attention_mask=(src != PAD).long(), decoder_input_ids=tgt,
                            output_attentions=True)
        for model in (checkpoint.model, load_checkpoint(path).model):
            logits, intermediates = model(src, tgt, need_weights=True)
            assert_same_forward(expected, logits, intermediates, **({} if heads is None else {"heads": heads}))


def test_greedy_outputs_equal_generate(family):
    _, folder, original, tokenizer = family
    assert_greedy_equals_generate(convert(folder), original, SENTENCES, lambda sentence: tokenizer.encode(sentence).ids,
                                  generation_config=generation(), max_new=MAX_NEW)


def test_an_extra_weight_or_a_differing_tied_copy_is_refused_by_name(family, tmp_path):
    from safetensors.torch import save_file

    kind, folder, original, _ = family
    changed = tmp_path / "changed"
    shutil.copytree(folder, changed)
    state = {name: tensor.clone().contiguous() for name, tensor in original.state_dict().items()}
    save_file({**state, "model.encoder.adapter.weight": torch.zeros(2)}, changed / "model.safetensors")
    with pytest.raises(CheckpointError, match=rf"unexpected weights, not part of the {kind} layout: "
                                              r"model.encoder.adapter.weight$"):
        convert(changed)
    save_file({**state, "lm_head.weight": state["lm_head.weight"] + 1.0}, changed / "model.safetensors")
    with pytest.raises(CheckpointError, match=r"weight lm_head.weight differs from model.shared.weight"):
        convert(changed)


def test_other_model_types_are_refused_naming_what_is_supported(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "prophetnet"}), encoding="utf-8")
    with pytest.raises(CheckpointError, match=r"a Hugging Face prophetnet model; this version imports model types "
                                              r"marian, bart, mbart, m2m_100, pegasus, blenderbot-small, fsmt, "
                                              r"t5, mt5, gpt2, llama, mistral, qwen2, qwen3, gemma2$"):
        detect_format(tmp_path)


def test_checkpoints_without_learned_positions_save_the_config_older_versions_read(family):
    from models.nn.config import config_from_dict, config_to_dict, make_config

    plain = config_to_dict(make_config("transformer-preln", 20, 20))
    assert "position_offset" not in plain and config_from_dict(plain).position_offset == 0
    _, folder, _, _ = family
    saved = config_to_dict(convert(folder).config)
    assert saved["position_offset"] == 2 and config_from_dict(saved).positions == "learned"


def test_byte_level_pieces_are_labelled_with_the_text_they_stand_for(family):
    from models.text.tokenizers import byte_level_label

    kind, folder, _, tokenizer = family
    checkpoint = convert(folder)
    source = checkpoint.source_tokenizer
    ids = tokenizer.encode("the cat sat", add_special_tokens=False).ids
    raw = [tokenizer.id_to_token(index) for index in ids]
    assert any(piece.startswith("Ġ") for piece in raw)  # the file writes word starts as Ġ ...
    labels = source.tokens(ids)
    assert "".join(labels).replace("▁", " ") == "the cat sat"  # ... the axes show the text, ▁ for the space
    assert all("Ġ" not in label for label in labels)
    assert source.token(EOS) == "</s>" and source.token(PAD) == "<pad>"  # specials keep their names
    assert byte_level_label("cafÃ©") == "café" and byte_level_label("Ã") == "<0xC3>"  # part of a character
    assert byte_level_label("Ā") == "<0x00>" and byte_level_label("Âł") == "<0xC2><0xA0>"  # invisible characters: bytes


@pytest.mark.parametrize("kind", ["bart", "mbart"])
def test_heads_and_feed_forward_widths_may_differ_per_side(kind, tmp_path):
    folder, original, tokenizer = build(tmp_path, kind, encoder_attention_heads=4, decoder_attention_heads=8,
                                        encoder_ffn_dim=24, decoder_ffn_dim=40)
    checkpoint = convert(folder)
    assert checkpoint.model.attention_shape() == {"enc_self": (2, 4), "dec_self": (2, 8), "cross": (2, 8)}
    assert_converted_forward_equal(checkpoint, original, tokenizer, tmp_path / "sided.safetensors",
                                   heads={"enc_self": 4, "dec_self": 8, "cross": 8})
    assert_greedy_equals_generate(checkpoint, original, SENTENCES, lambda sentence: tokenizer.encode(sentence).ids,
                                  generation_config=generation(), max_new=MAX_NEW)
