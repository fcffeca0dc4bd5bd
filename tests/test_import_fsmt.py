"""Import of Hugging Face FSMT folders (fairseq's WMT'19 models), checked against ``transformers`` itself,
offline.

A tiny ``FSMTForConditionalGeneration`` with seeded random weights is written with ``save_pretrained`` beside
the files of its tokenizer written here: merges learned here (``tests.helpers.learn_bpe``) on Moses-tokenised
English and German (``sacremoses``, as fairseq's preprocessing), ``merges.txt`` with a count column,
``vocab-src.json`` lacking a few merge results and ``vocab-tgt.json`` in another order. transformers' own
``FSMTTokenizer`` reads them for the reference. The teacher-forced forward runs with ``use_cache=False``, the
path on which transformers builds FSMT's causal mask. Decoding settings: padding banned, no forced tokens.
"""

from __future__ import annotations

import json
import os
import shutil

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
transformers = pytest.importorskip("transformers")
sacremoses = pytest.importorskip("sacremoses")

from models.storage.checkpoint import load_checkpoint, save_checkpoint
from models.errors import CheckpointError
from models.importers import convert, detect_format
from tests.helpers import assert_greedy_equals_generate, learn_bpe  # noqa: E402
from tests.hf_fixtures import TINY_SEQ2SEQ, assert_converted_forward_equal, saved_random_model

ENGLISH = ["The cat sat on the mat.", "Where is the house?", "I like green apples!", "The dog's ball is red.",
           "We are going to the beach, now.", "She reads a book every night.", "The water is cold."]
GERMAN = ["Die Katze saß auf der Matte.", "Wo ist das Haus?", "Ich mag grüne Äpfel!", "Der Ball des Hundes ist rot.",
          "Wir gehen jetzt an den Strand.", "Sie liest jeden Abend ein Buch.", "Das Wasser ist kalt."]
SPECIALS = ["<s>", "<pad>", "</s>", "<unk>"]
PAD, EOS = 1, 2
MAX_NEW = 12
LEFT_OUT = 3  # merge results missing from vocab-src.json


def write_tokenizer_files(folder) -> tuple[int, int]:
    """vocab-src.json, vocab-tgt.json and merges.txt as FSMT's are; returns the two vocabulary sizes."""
    words = [word for lang, texts in (("en", ENGLISH), ("de", GERMAN))
             for text in texts for word in sacremoses.MosesTokenizer(lang=lang).tokenize(text, escape=True)]
    learned, symbols = learn_bpe(words, 150)
    merges = [" ".join(merge) for merge in learned]
    results = {"".join(merge.split()) for merge in merges}
    dropped = [symbol for symbol in symbols if symbol in results][4: 4 + LEFT_OUT]
    source = SPECIALS + [symbol for symbol in symbols if symbol not in dropped]
    target = SPECIALS + symbols[::-1]
    for name, tokens in (("vocab-src.json", source), ("vocab-tgt.json", target)):
        (folder / name).write_text(json.dumps({token: index for index, token in enumerate(tokens)}), encoding="utf-8")
    (folder / "merges.txt").write_text("".join(f"{merge} {100 - rank % 90}\n" for rank, merge in enumerate(merges)),
                                       encoding="utf-8")
    return len(source), len(target)


@pytest.fixture(scope="module")
def fsmt(tmp_path_factory):
    return build_fsmt(tmp_path_factory.mktemp("fsmt"))


def build_fsmt(folder):
    """A tiny FSMT folder with random weights far from the init; the model read back with eager attention."""
    src_size, tgt_size = write_tokenizer_files(folder)
    tokenizer = transformers.FSMTTokenizer(langs=["en", "de"], src_vocab_file=str(folder / "vocab-src.json"),
                                           tgt_vocab_file=str(folder / "vocab-tgt.json"),
                                           merges_file=str(folder / "merges.txt"))
    tokenizer.save_pretrained(folder)
    config = transformers.FSMTConfig(**TINY_SEQ2SEQ, langs=["en", "de"], src_vocab_size=src_size,
                                     tgt_vocab_size=tgt_size, forced_eos_token_id=None)

    def end_bias(model) -> None:  # FSMT has no final logits' bias: the last norm's bias raises </s> instead
        projection = model.model.decoder.output_projection.weight
        norm = model.model.decoder.layers[-1].final_layer_norm
        norm.bias.normal_(0.0, 0.5)
        projection[EOS] += 1.5 * norm.bias  # some outputs end early, some run to the limit

    original = saved_random_model(folder, transformers.FSMTForConditionalGeneration, config,
                                  keep=("layer_norm", "embed_positions"), adjust=end_bias)
    return folder, original, tokenizer


def generation():
    return transformers.GenerationConfig(max_new_tokens=MAX_NEW, num_beams=1, do_sample=False, bad_words_ids=[[PAD]],
                                         decoder_start_token_id=EOS, eos_token_id=EOS, pad_token_id=PAD,
                                         forced_bos_token_id=None, forced_eos_token_id=None, min_length=0)


def test_the_folder_is_detected_and_tokenises_as_transformers(fsmt):
    folder, _, tokenizer = fsmt
    assert detect_format(folder) == detect_format(folder / "model.safetensors") == "fsmt"
    checkpoint = convert(folder)
    config = checkpoint.config
    assert (config.positions, config.position_offset, config.share_embeddings, config.tie_output) == \
        ("fairseq", PAD + 1, False, False)
    assert (config.norm_position, config.final_norm, config.output_bias, config.src_append_eos) == \
        ("post", False, False, True)
    unknown = 0
    for text in [*ENGLISH, "The CAT's \"hat\" — it's AT&T…", "zebra quux", "Ｗhere， is it？"]:
        ours = checkpoint.source_tokenizer.encode(text, unknown="replace") + [config.eos_id]
        assert ours == tokenizer(text).input_ids, text
        unknown += ours.count(3)
    assert unknown > 0
    target_vocab = json.loads((folder / "vocab-tgt.json").read_text(encoding="utf-8"))
    for sentence in GERMAN[:4]:  # the target side: German Moses rules, the target vocabulary
        target = [target_vocab.get(piece, 3) for word in tokenizer.moses_tokenize(sentence, "de")
                  for piece in tokenizer.bpe(word).split(" ")]
        assert checkpoint.target_tokenizer.encode(sentence, unknown="replace") == target
        assert checkpoint.target_tokenizer.decode(target) == tokenizer.decode(target, skip_special_tokens=True)
    reloaded = load_checkpoint(save_checkpoint(folder.parent / "fsmt.safetensors", checkpoint.model,
                                               checkpoint.source_tokenizer, checkpoint.target_tokenizer,
                                               checkpoint.provenance))
    assert reloaded.source_tokenizer.encode(ENGLISH[3]) + [EOS] == tokenizer(ENGLISH[3]).input_ids


def test_logits_and_every_head_equal_transformers(fsmt):
    folder, original, tokenizer = fsmt
    assert_converted_forward_equal(convert(folder), original, [tokenizer(text).input_ids for text in ENGLISH[:3]],
                                   pad=PAD, start=[EOS], lowest=4, vocab=original.config.tgt_vocab_size)


def test_greedy_outputs_equal_generate(fsmt):
    folder, original, tokenizer = fsmt
    assert_greedy_equals_generate(convert(folder), original, ENGLISH, lambda sentence: tokenizer(sentence).input_ids,
                                  generation_config=generation(), max_new=MAX_NEW)


def test_an_extra_weight_or_missing_vocabularies_are_refused_by_name(fsmt, tmp_path):
    from safetensors.torch import save_file

    folder, original, _ = fsmt
    changed = tmp_path / "changed"
    shutil.copytree(folder, changed)
    state = {name: tensor.clone().contiguous() for name, tensor in original.state_dict().items()}
    save_file({**state, "model.decoder.adapter.weight": torch.zeros(2)}, changed / "model.safetensors")
    with pytest.raises(CheckpointError, match=r"unexpected weights, not part of the fsmt layout: "
                                              r"model.decoder.adapter.weight$"):
        convert(changed)
    (changed / "vocab-tgt.json").unlink()
    with pytest.raises(CheckpointError, match=r"the fsmt folder has no vocab-tgt.json$"):
        convert(changed)


def test_the_cli_converts_the_folder_and_translates_as_transformers(fsmt, tmp_path, capsys):
    from attnviz.cli import main

    folder, original, tokenizer = fsmt
    output = tmp_path / "fsmt.safetensors"
    assert main(["convert", str(folder), "-o", str(output)]) == 0
    assert "fsmt → transformer-postln" in capsys.readouterr().err
    text = ENGLISH[0]
    with torch.no_grad():
        expected = original.generate(torch.tensor([tokenizer(text).input_ids]), generation_config=generation())[0]
    assert len(expected) > 3  # a sentence with words
    assert main(["translate", "-c", str(output), "--max-len", str(MAX_NEW), text]) == 0
    assert capsys.readouterr().out == tokenizer.decode(expected, skip_special_tokens=True) + "\n"


def test_tied_embeddings_are_one_matrix(fsmt, tmp_path):
    """``tie_word_embeddings``: transformers ties the encoder's table and the output projection to the decoder's."""
    folder, _, tokenizer = fsmt
    tied = tmp_path / "tied"
    shutil.copytree(folder, tied)
    for name in ("model.safetensors", "config.json"):
        (tied / name).unlink()
    size = max(json.loads((folder / "config.json").read_text())[key] for key in ("src_vocab_size", "tgt_vocab_size"))
    config = transformers.FSMTConfig(langs=["en", "de"], src_vocab_size=size, tgt_vocab_size=size, d_model=16,
                                     encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
                                     decoder_attention_heads=2, encoder_ffn_dim=32, decoder_ffn_dim=32,
                                     max_position_embeddings=40, tie_word_embeddings=True, scale_embedding=False)
    torch.manual_seed(1)
    transformers.FSMTForConditionalGeneration(config).save_pretrained(tied)
    original = transformers.FSMTForConditionalGeneration.from_pretrained(str(tied), attn_implementation="eager").eval()
    checkpoint = convert(tied)
    assert checkpoint.config.share_embeddings and checkpoint.config.tie_output
    src = torch.tensor([tokenizer(ENGLISH[1]).input_ids])
    tgt = torch.tensor([[EOS, 7, 9, 11]])
    with torch.no_grad():
        expected = original(input_ids=src, decoder_input_ids=tgt, use_cache=False).logits
        assert (checkpoint.model(src, tgt)[0] - expected).abs().max() < 1e-4
