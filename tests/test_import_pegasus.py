"""Import of Hugging Face Pegasus folders, checked against ``transformers`` itself, offline.

A tiny ``PegasusForConditionalGeneration`` with seeded random weights is written with ``save_pretrained``
beside the tokenizer.json of a ``PegasusTokenizer`` (and the ``spiece.model`` older folders carry alone) whose
vocabulary comes from a sentencepiece model trained here, laid out as Pegasus lays it out: ``<pad>``, ``</s>``, two
mask tokens and ``<unk_2>``..``<unk_102>`` first, the sentencepiece pieces after them (offset 103). Decoding settings
as in the BART tests: padding banned, no forced tokens.
"""

from __future__ import annotations

import io
import os
import shutil

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
transformers = pytest.importorskip("transformers")
spm = pytest.importorskip("sentencepiece")

from models.inference.decoding import Capture, finish, greedy
from models.errors import CheckpointError
from models.importers import convert, detect_format
from models.inference.translator import Translator
from tests.helpers import assert_greedy_equals_generate  # noqa: E402
from tests.hf_fixtures import TINY_SEQ2SEQ, assert_converted_forward_equal, saved_random_model

SENTENCES = ["the cat sat on the mat", "where is the house", "i like green apples", "the dog runs in the park",
             "we are going to the beach", "she reads a book every night", "the water is cold"]
PAD, EOS, OFFSET = 0, 1, 103
MAX_NEW = 12


def pegasus_tokenizer():
    """transformers' tokenizer, and the sentencepiece model its vocabulary comes from (as spiece.model)."""
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(SENTENCES * 5), model_writer=model, vocab_size=40,
                                   model_type="unigram", pad_id=0, eos_id=1, unk_id=2, bos_id=-1, minloglevel=2)
    processor = spm.SentencePieceProcessor(model_proto=model.getvalue())
    vocab = [("<pad>", 0.0), ("</s>", 0.0), ("<mask_1>", 0.0), ("<mask_2>", 0.0)]
    vocab += [(f"<unk_{index}>", -100.0) for index in range(2, OFFSET)]
    vocab += [(processor.id_to_piece(index), processor.get_score(index)) for index in range(2, len(processor))]
    return transformers.PegasusTokenizer(vocab=vocab, offset=OFFSET), model.getvalue()


@pytest.fixture(scope="module")
def pegasus(tmp_path_factory):
    return build_pegasus(tmp_path_factory.mktemp("pegasus"))


def build_pegasus(folder):
    """A tiny Pegasus folder with random weights far from the init; the model read back with eager attention."""
    tokenizer, spiece = pegasus_tokenizer()
    tokenizer.save_pretrained(folder)
    (folder / "spiece.model").write_bytes(spiece)
    config = transformers.PegasusConfig(**TINY_SEQ2SEQ, vocab_size=len(tokenizer) + 2,  # ids beyond the tokenizer's
                                        scale_embedding=True, forced_eos_token_id=None)
    original = saved_random_model(folder, transformers.PegasusForConditionalGeneration, config,
                                  keep=("layer_norm", "embed_positions"), end_bias=(EOS, 4.0))
    return folder, original, tokenizer


def generation():
    return transformers.GenerationConfig(max_new_tokens=MAX_NEW, num_beams=1, do_sample=False, bad_words_ids=[[PAD]],
                                         decoder_start_token_id=PAD, eos_token_id=EOS, pad_token_id=PAD,
                                         forced_bos_token_id=None, forced_eos_token_id=None, min_length=0)


def test_the_folder_is_detected_and_tokenises_as_transformers(pegasus):
    folder, _, tokenizer = pegasus
    assert detect_format(folder) == detect_format(folder / "model.safetensors") == "hf-bart"
    checkpoint = convert(folder)
    config = checkpoint.config
    assert (config.positions, config.position_offset, config.embedding_norm) == ("half_split", 0, False)
    assert (config.norm_position, config.final_norm, config.pre_norm_kv, config.scale_embedding) == \
        ("pre", True, True, True)
    for text in [*SENTENCES, "zebra quux", "The  Cat"]:
        assert checkpoint.source_tokenizer.encode(text, unknown="replace") == tokenizer(text).input_ids, text
    assert checkpoint.source_tokenizer.unk_id == tokenizer.unk_token_id == 2 + OFFSET
    ids = tokenizer(SENTENCES[0], add_special_tokens=False).input_ids
    assert checkpoint.target_tokenizer.decode(ids) == tokenizer.decode(ids)
    assert checkpoint.target_tokenizer.token(2) == "<mask_1>"


def test_logits_and_every_head_equal_transformers(pegasus, tmp_path):
    folder, original, tokenizer = pegasus
    assert_converted_forward_equal(convert(folder), original, [tokenizer(text).input_ids for text in SENTENCES[:3]],
                                   pad=PAD, start=[PAD], lowest=2, saved=tmp_path / "pegasus.safetensors")


def test_greedy_outputs_equal_generate(pegasus):
    folder, original, tokenizer = pegasus
    assert_greedy_equals_generate(convert(folder), original, SENTENCES, lambda sentence: tokenizer(sentence).input_ids,
                                  generation_config=generation(), max_new=MAX_NEW)


def test_an_extra_weight_or_an_altered_position_table_is_refused_by_name(pegasus, tmp_path):
    from safetensors.torch import save_file

    folder, original, _ = pegasus
    changed = tmp_path / "changed"
    shutil.copytree(folder, changed)
    state = {name: tensor.clone().contiguous() for name, tensor in original.state_dict().items()}
    save_file({**state, "model.decoder.adapter.weight": torch.zeros(2)}, changed / "model.safetensors")
    with pytest.raises(CheckpointError, match=r"unexpected weights, not part of the pegasus layout: "
                                              r"model.decoder.adapter.weight$"):
        convert(changed)
    positions = "model.encoder.embed_positions.weight"
    save_file({**state, positions: state[positions] + 0.5}, changed / "model.safetensors")
    with pytest.raises(CheckpointError, match=rf"{positions} is not the sinusoid this format uses"):
        convert(changed)
    for name in ("tokenizer.json", "spiece.model"):
        (changed / name).unlink()
    with pytest.raises(CheckpointError, match=r"the pegasus folder has no tokenizer.json$"):
        convert(changed)


def test_a_folder_with_spiece_model_alone_tokenises_and_computes_the_same(pegasus, tmp_path):
    """Older folders carry only the sentencepiece model: ids are its pieces' ids + 103 after Pegasus' specials,
    and the model ends each source with </s> itself."""
    folder, original, tokenizer = pegasus
    older = tmp_path / "older"
    shutil.copytree(folder, older)
    (older / "tokenizer.json").unlink()
    checkpoint = convert(older)
    assert checkpoint.config.src_append_eos and checkpoint.source_tokenizer.kind == "sentencepiece-vocab"
    translator = Translator(checkpoint)
    for text in [*SENTENCES, "zebra quux"]:
        assert translator.source(text, unknown="replace").ids == tokenizer(text).input_ids, text
    assert checkpoint.target_tokenizer.token(2) == "<mask_1>" and checkpoint.source_tokenizer.unk_id == 2 + OFFSET
    ids = tokenizer(SENTENCES[1], add_special_tokens=False).input_ids
    assert checkpoint.target_tokenizer.decode(ids) == tokenizer.decode(ids)
    ids = tokenizer(SENTENCES[2]).input_ids
    with torch.no_grad():
        expected = original.generate(torch.tensor([ids]), generation_config=generation())[0, 1:].tolist()
    assert finish(greedy(checkpoint.model, ids, Capture(max_len=MAX_NEW)))[0].token_ids == expected
