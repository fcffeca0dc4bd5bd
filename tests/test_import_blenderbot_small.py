"""Import of Hugging Face BlenderbotSmall folders, checked against ``transformers`` itself, offline.

A tiny ``BlenderbotSmallForConditionalGeneration`` with seeded random weights is written with
``save_pretrained`` beside the ``vocab.json`` + ``merges.txt`` of its BPE tokenizer: merges learned here
(``tests.helpers.learn_bpe``), written as BlenderbotSmall's files are (lower case, ``@@`` on every piece but a
word's last, ``#version`` first line), with a few merge results left out of vocab.json as real vocabularies
do. transformers' own ``BlenderbotSmallTokenizer`` reads them for the reference. Decoding settings as in the
BART tests: padding banned, no forced tokens.
"""

from __future__ import annotations

import json
import os
import re
import shutil

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
transformers = pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

from models.storage.checkpoint import load_checkpoint, save_checkpoint
from models.errors import CheckpointError
from models.importers import convert, detect_format
from tests.helpers import assert_greedy_equals_generate, learn_bpe  # noqa: E402
from tests.hf_fixtures import TINY_SEQ2SEQ, assert_converted_forward_equal, saved_random_model

SENTENCES = ["the cat sat on the mat.", "where is the house?", "i like green apples!", "the dog's ball (red)",
             "we are going to the beach, now", "she reads a book every night", "the water is cold"]
SPECIALS = ["__null__", "__start__", "__end__", "__unk__"]
PAD, START, END, UNK = 0, 1, 2, 3
MAX_NEW = 12
LEFT_OUT = 3  # merge results missing from vocab.json


def write_bpe_files(folder) -> int:
    """vocab.json + merges.txt in BlenderbotSmall's form; returns the vocabulary size."""
    words = [word for text in SENTENCES for word in re.findall(r"[a-z]+|[^\sa-z]", text.lower())]
    learned, symbols = learn_bpe(words, 60)
    merges = [" ".join(merge) for merge in learned]
    results = {"".join(merge.split()) for merge in merges}
    dropped = [symbol for symbol in symbols if symbol in results][5: 5 + LEFT_OUT]
    pieces = SPECIALS + [symbol[:-4] if symbol.endswith("</w>") else symbol + "@@" for symbol in symbols
                         if symbol not in dropped]
    (folder / "vocab.json").write_text(json.dumps({piece: index for index, piece in enumerate(pieces)}),
                                       encoding="utf-8")
    (folder / "merges.txt").write_text("\n".join(["#version: 0.2", *merges]) + "\n", encoding="utf-8")
    return len(pieces)


@pytest.fixture(scope="module")
def blenderbot(tmp_path_factory):
    return build_blenderbot(tmp_path_factory.mktemp("blenderbot_small"))


def build_blenderbot(folder):
    """A tiny BlenderbotSmall folder with random weights far from the init, read back with eager attention."""
    vocab_size = write_bpe_files(folder)
    tokenizer = transformers.BlenderbotSmallTokenizer(str(folder / "vocab.json"), str(folder / "merges.txt"))
    tokenizer.save_pretrained(folder)
    config = transformers.BlenderbotSmallConfig(**TINY_SEQ2SEQ, vocab_size=vocab_size + 2,  # ids beyond the tokenizer's
                                                scale_embedding=True, forced_eos_token_id=None)
    original = saved_random_model(folder, transformers.BlenderbotSmallForConditionalGeneration, config,
                                  keep=("layer_norm", "layernorm"), end_bias=(END, 3.0))
    return folder, original, tokenizer


def generation():
    return transformers.GenerationConfig(max_new_tokens=MAX_NEW, num_beams=1, do_sample=False, bad_words_ids=[[PAD]],
                                         decoder_start_token_id=START, eos_token_id=END, pad_token_id=PAD,
                                         forced_bos_token_id=None, forced_eos_token_id=None, min_length=0)


def test_the_folder_is_detected_and_tokenises_as_transformers(blenderbot):
    folder, _, tokenizer = blenderbot
    assert detect_format(folder) == detect_format(folder / "model.safetensors") == "hf-bart"
    checkpoint = convert(folder)
    config = checkpoint.config
    assert (config.positions, config.position_offset, config.embedding_norm, config.tgt_norm_before_positions) == \
        ("learned", 0, True, True)
    assert (config.norm_position, config.final_norm, config.src_append_eos) == ("post", False, False)
    unknown = 0
    for text in [*SENTENCES, "The CAT's (hat)... sat!?", "zebra quux", "hello, world"]:
        ours = checkpoint.source_tokenizer.encode(text, unknown="replace")
        assert ours == tokenizer(text).input_ids, text
        unknown += ours.count(UNK)
    assert unknown > 0  # pieces vocab.json lacks, merged or not
    ids = tokenizer(SENTENCES[0]).input_ids
    assert checkpoint.target_tokenizer.decode(ids) == tokenizer.decode(ids)
    assert checkpoint.target_tokenizer.tokens(ids) == tokenizer.convert_ids_to_tokens(ids)
    reloaded = load_checkpoint(save_checkpoint(folder.parent / "bb.safetensors", checkpoint.model,
                                               checkpoint.source_tokenizer, checkpoint.target_tokenizer,
                                               checkpoint.provenance))
    assert reloaded.source_tokenizer.encode("zebra quux", unknown="replace") == tokenizer("zebra quux").input_ids


def test_logits_and_every_head_equal_transformers(blenderbot):
    folder, original, tokenizer = blenderbot
    assert_converted_forward_equal(convert(folder), original, [tokenizer(text).input_ids for text in SENTENCES[:3]],
                                   pad=PAD, start=[START], lowest=4)


def test_greedy_outputs_equal_generate(blenderbot):
    folder, original, tokenizer = blenderbot
    assert_greedy_equals_generate(convert(folder), original, SENTENCES, lambda sentence: tokenizer(sentence).input_ids,
                                  generation_config=generation(), max_new=MAX_NEW)


def test_an_extra_weight_or_missing_tokenizer_files_are_refused_by_name(blenderbot, tmp_path):
    from safetensors.torch import save_file

    folder, original, _ = blenderbot
    changed = tmp_path / "changed"
    shutil.copytree(folder, changed)
    state = {name: tensor.clone().contiguous() for name, tensor in original.state_dict().items()}
    save_file({**state, "model.encoder.adapter.weight": torch.zeros(2)}, changed / "model.safetensors")
    with pytest.raises(CheckpointError, match=r"unexpected weights, not part of the blenderbot-small layout: "
                                              r"model.encoder.adapter.weight$"):
        convert(changed)
    (changed / "merges.txt").unlink()
    with pytest.raises(CheckpointError, match=r"the blenderbot-small folder has no merges.txt$"):
        convert(changed)


def test_the_cli_converts_the_weights_file_of_the_folder(blenderbot, tmp_path, capsys):
    from attnviz.cli import main

    folder, original, tokenizer = blenderbot
    output = tmp_path / "blenderbot.safetensors"
    assert main(["convert", str(folder / "model.safetensors"), "-o", str(output)]) == 0
    assert "hf-bart → transformer-postln" in capsys.readouterr().err
    text = SENTENCES[1]
    with torch.no_grad():
        expected = original.generate(torch.tensor([tokenizer(text).input_ids]), generation_config=generation())[0]
    assert len(expected) > 3  # a sentence with words
    assert main(["translate", "-c", str(output), "--max-len", str(MAX_NEW), text]) == 0
    assert capsys.readouterr().out == tokenizer.decode(expected, skip_special_tokens=True) + "\n"
