"""Import of Hugging Face Marian (opus-mt) folders, checked against ``transformers`` itself, offline.

A tiny ``MarianMTModel`` is built from a ``MarianConfig`` with random weights and written with
``save_pretrained``; the two sentencepiece models are trained here on a few sentences; ``vocab.json``
(ids deliberately unlike the sentencepiece ids) and ``tokenizer_config.json`` are written by hand.

Decoding settings are aligned with ours, and why:
- ``bad_words_ids=[[pad]]``: our decoders never emit padding (real opus-mt configs ban it the same way);
- ``forced_eos_token_id=None``: ours does not force ``</s>`` at the length limit;
- beam search with ``length_penalty=0.0``: transformers divides by ``length ** α``, we by GNMT's
  ``((5 + length) / 6) ** α``; only α = 0 (rank by summed log-probability) is the same rule in both.
  With α = 0 the early-stopping variants agree; ours keeps finished hypotheses in the beam where
  transformers sets them aside, which can in principle pick a different best hypothesis, but not on
  these inputs (greedy and beam differ on several, so the beams are really searched).
"""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys

import pytest
import sentencepiece as spm
import torch
from safetensors.torch import save_file

os.environ.setdefault("HF_HUB_OFFLINE", "1")
transformers = pytest.importorskip("transformers")  # a test extra: pip install -e ".[test]"

from models.storage.checkpoint import load_checkpoint, save_checkpoint
from models.inference.decoding import Capture, beam_search, finish, greedy
from models.errors import CheckpointError
from models.importers import convert, detect_format
from tests.helpers import assert_same_forward  # noqa: E402
from tests.hf_fixtures import saved_random_model

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")  # "Recommended: pip install sacremoses."

SOURCE = ["the cat sat on the mat", "where is the house", "i like green apples", "the dog runs in the park",
          "we are going to the beach", "she reads a book every night", "the water is cold"]
TARGET = ["el gato se sentó en la alfombra", "dónde está la casa", "me gustan las manzanas verdes",
          "el perro corre en el parque", "vamos a la playa", "ella lee un libro cada noche", "el agua está fría"]
SENTENCES = ["the cat is on the house", "green water", "i like the beach", "she reads", "where is the dog",
             "the sun", "we need more time", "open the window"]
MAX_NEW = 15


def train_spm(texts: list[str]) -> bytes:
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(texts), model_writer=model, vocab_size=40,
                                   hard_vocab_limit=False, character_coverage=1.0, num_threads=1, minloglevel=2)
    return model.getvalue()


def write_folder(folder) -> int:
    """Tokenizer files of an opus-mt folder; returns the vocabulary size."""
    pieces = set()
    for name, texts in (("source.spm", SOURCE), ("target.spm", TARGET)):
        proto = train_spm(texts)
        (folder / name).write_bytes(proto)
        processor = spm.SentencePieceProcessor(model_proto=proto)
        pieces |= {processor.id_to_piece(i) for i in range(processor.get_piece_size())} - {"<unk>", "<s>", "</s>"}
    ordered = sorted(pieces, reverse=True)  # unlike either sentencepiece model's own ids
    vocab = {"</s>": 0, "<unk>": 1, ">>es<<": 2, **{piece: index + 3 for index, piece in enumerate(ordered)}}
    vocab["<pad>"] = len(vocab)
    (folder / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False), encoding="utf-8")
    (folder / "tokenizer_config.json").write_text(json.dumps({"source_lang": "en", "target_lang": "es",
                                                              "separate_vocabs": False}), encoding="utf-8")
    return len(vocab)


def write_separate_folder(folder) -> tuple[int, int]:
    """Tokenizer files of an opus-mt folder with a vocabulary per side (``separate_vocabs``), the target's
    larger than the source's and ending with its ``<pad>``; returns both sizes."""
    sizes = []
    for name, texts, vocab_file in (("source.spm", SOURCE, "vocab.json"), ("target.spm", TARGET, "target_vocab.json")):
        proto = train_spm(texts)
        (folder / name).write_bytes(proto)
        processor = spm.SentencePieceProcessor(model_proto=proto)
        pieces = sorted({processor.id_to_piece(i) for i in range(processor.get_piece_size())}
                        - {"<unk>", "<s>", "</s>"})
        vocab = {"</s>": 0, "<unk>": 1, **{piece: index + 2 for index, piece in enumerate(pieces)}}
        if sizes:  # the target: ids the source has not, so that the sizes differ
            vocab.update({f"<extra {index}>": len(vocab) + index for index in range(sizes[0] + 3 - len(vocab))})
        vocab["<pad>"] = len(vocab)
        (folder / vocab_file).write_text(json.dumps(vocab, ensure_ascii=False), encoding="utf-8")
        sizes.append(len(vocab))
    (folder / "tokenizer_config.json").write_text(json.dumps({"source_lang": "en", "target_lang": "es",
                                                              "separate_vocabs": True}), encoding="utf-8")
    return sizes[0], sizes[1]


def build_marian(folder, separate: bool = False, **overrides) -> tuple:
    """A tiny MarianMTModel with random weights far from the init, saved into ``folder`` with its tokenizer
    files, reloaded with eager attention; ``overrides``: MarianConfig settings such as tie_word_embeddings;
    ``separate``: a vocabulary per side, of unequal sizes (decoding starts from the target's ``<pad>``)."""
    if separate:
        vocab_size, decoder_vocab_size = write_separate_folder(folder)
        overrides = {"share_encoder_decoder_embeddings": False, **overrides}
    else:
        vocab_size = decoder_vocab_size = write_folder(folder)
    start = decoder_vocab_size - 1  # the target's <pad>; the model's pad id is the source's
    settings = dict(vocab_size=vocab_size, decoder_vocab_size=decoder_vocab_size, d_model=16, encoder_layers=2,
                    decoder_layers=2, encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=32,
                    decoder_ffn_dim=32, activation_function="swish", max_position_embeddings=64,
                    pad_token_id=vocab_size - 1, decoder_start_token_id=start, eos_token_id=0, forced_eos_token_id=0,
                    scale_embedding=True)
    config = transformers.MarianConfig(**{**settings, **overrides})
    original = saved_random_model(folder, transformers.MarianMTModel, config, keep=("embed_positions", "layer_norm"),
                                  end_bias=(0, 3.0))  # </s>
    original.generation_config.forced_eos_token_id = None
    tokenizer = transformers.MarianTokenizer.from_pretrained(str(folder))
    return folder, original, tokenizer, start


@pytest.fixture(scope="module")
def marian(tmp_path_factory):
    return build_marian(tmp_path_factory.mktemp("opus-mt-en-es"))


UNTIED = {"untied-output": {"tie_word_embeddings": False},
          "unshared-sides": {"share_encoder_decoder_embeddings": False},
          "untied-and-unshared": {"tie_word_embeddings": False, "share_encoder_decoder_embeddings": False}}


@pytest.fixture(scope="module", params=list(UNTIED))
def untied_marian(request, tmp_path_factory):
    return build_marian(tmp_path_factory.mktemp(request.param), **UNTIED[request.param])


def generation(config, beams: int):
    """``config``: the model's, whose pad id is banned and whose start token starts decoding."""
    pad = config.pad_token_id
    return transformers.GenerationConfig(max_new_tokens=MAX_NEW, num_beams=beams, do_sample=False,
                                         bad_words_ids=[[pad]],
                                         decoder_start_token_id=config.decoder_start_token_id, eos_token_id=0,
                                         pad_token_id=pad,
                                         length_penalty=0.0)


def test_detects_the_folder_and_reads_everything_from_it(marian):
    folder, *_ = marian
    assert detect_format(folder) == "marian" and detect_format(folder / "model.safetensors") == "marian"
    checkpoint = convert(folder)
    config = checkpoint.config
    assert (config.norm_position, config.final_norm) == ("post", False)
    assert (config.activation, config.positions) == ("swish", "half_split")
    assert config.scale_embedding and config.share_embeddings and config.tie_output and config.bos_id == config.pad_id
    assert checkpoint.provenance["imported_from"]["details"]["tokenizer_config"]["target_lang"] == "es"


def test_token_ids_come_from_vocab_json(marian):
    folder, _, tokenizer, _ = marian
    checkpoint = convert(folder)
    for text in [*SENTENCES, "zebra quux", ">>es<< the cat"]:
        expected = tokenizer(text).input_ids
        assert checkpoint.source_tokenizer.encode(text, unknown="replace") + [checkpoint.config.eos_id] == expected
    ids = tokenizer(SENTENCES[0]).input_ids
    assert checkpoint.target_tokenizer.decode(ids) == tokenizer.decode(ids, skip_special_tokens=True)


def assert_logits_and_every_head_equal(model, original, start: int) -> None:
    config = original.config
    pad = config.pad_token_id
    generator = torch.Generator().manual_seed(3)
    src = torch.randint(3, pad, (3, 9), generator=generator)
    src[:, -1], src[1, 5], src[1, 6:] = 0, 0, pad
    tgt = torch.randint(3, start, (3, 7), generator=generator)
    tgt[:, 0] = start  # decoding starts from the start token (the target's pad token)
    with torch.no_grad():
        expected = original(input_ids=src, attention_mask=(src != pad).long(), decoder_input_ids=tgt,
                            output_attentions=True)
        logits, intermediates = model(src, tgt, need_weights=True)
    heads = {"enc_self": config.encoder_attention_heads, "dec_self": config.decoder_attention_heads,
             "cross": config.decoder_attention_heads}
    assert_same_forward(expected, logits, intermediates, heads=heads)


def greedy_pairs(model, original, tokenizer, pad: int) -> list[tuple[list[int], list[int]]]:
    """(ours, transformers') greedy outputs for every test sentence."""
    pairs = []
    for text in SENTENCES:
        ids = tokenizer(text).input_ids
        with torch.no_grad():
            expected = original.generate(torch.tensor([ids]),
                                         generation_config=generation(original.config, 1))[0, 1:].tolist()
        pairs.append((finish(greedy(model, ids, Capture(max_len=MAX_NEW)))[0].token_ids, expected))
    return pairs


def test_logits_and_every_head_equal_transformers(marian):
    folder, original, _, pad = marian
    assert_logits_and_every_head_equal(convert(folder).model, original, pad)


def test_greedy_and_beam_outputs_equal_generate(marian):
    folder, original, tokenizer, pad = marian
    model = convert(folder).model
    differs, ended = False, False
    for text, (ours_greedy, expected_greedy) in zip(SENTENCES, greedy_pairs(model, original, tokenizer, pad)):
        ids = tokenizer(text).input_ids
        with torch.no_grad():
            expected_beam = original.generate(torch.tensor([ids]),
                                              generation_config=generation(original.config, 4))[0, 1:].tolist()
        ours_beam = finish(beam_search(model, ids, Capture(max_len=MAX_NEW), beam=4, length_penalty=0.0))[0].token_ids
        assert ours_greedy == expected_greedy, text
        assert ours_beam == expected_beam, text
        differs |= ours_beam != ours_greedy
        ended |= 0 in ours_beam[:-1] or (ours_beam[-1] == 0 and len(ours_beam) < MAX_NEW)
    assert differs and ended  # the comparison exercised real beams and early ends


def test_an_older_folder_with_every_tied_key_in_pytorch_model_bin(marian, tmp_path):
    folder, original, _, pad = marian
    older = tmp_path / "older"
    shutil.copytree(folder, older)
    (older / "model.safetensors").unlink()
    torch.save(original.state_dict(), older / "pytorch_model.bin")  # lm_head, embed_tokens, embed_positions too
    checkpoint = convert(older)
    path = save_checkpoint(tmp_path / "marian.safetensors", checkpoint.model, checkpoint.source_tokenizer,
                           checkpoint.target_tokenizer, checkpoint.provenance)
    reloaded = load_checkpoint(path)
    src = torch.tensor([[7, 9, 11, 13, 0]])
    tgt = torch.tensor([[pad, 5, 6]])
    with torch.no_grad():
        expected = original(input_ids=src, decoder_input_ids=tgt).logits
        assert (reloaded.model(src, tgt)[0] - expected).abs().max() < 1e-4
    assert reloaded.source_tokenizer.encode("the cat") == checkpoint.source_tokenizer.encode("the cat")


def test_a_marian_weights_file_away_from_its_folder_is_named(marian, tmp_path):
    folder, *_ = marian
    alone = tmp_path / "weights.safetensors"
    shutil.copy(folder / "model.safetensors", alone)
    with pytest.raises(CheckpointError, match="convert the folder that holds them with config.json"):
        convert(alone)


def test_untied_embeddings_convert_exactly(untied_marian, tmp_path):
    """Fine-tuned models saved with tie_word_embeddings=False or share_encoder_decoder_embeddings=False keep
    their own encoder, decoder and output tables: each must be the one the conversion computes with."""
    folder, original, tokenizer, pad = untied_marian
    checkpoint = convert(folder)
    assert not (checkpoint.config.share_embeddings and checkpoint.config.tie_output)
    assert_logits_and_every_head_equal(checkpoint.model, original, pad)
    pairs = greedy_pairs(checkpoint.model, original, tokenizer, pad)
    assert all(ours == expected for ours, expected in pairs), pairs
    path = save_checkpoint(tmp_path / "untied.safetensors", checkpoint.model, checkpoint.source_tokenizer,
                           checkpoint.target_tokenizer, checkpoint.provenance)
    assert_logits_and_every_head_equal(load_checkpoint(path).model, original, pad)  # untied tensors stored apart


def test_an_extra_weight_or_a_differing_tied_copy_is_refused_by_name(marian, tmp_path):
    folder, original, _, _ = marian
    changed = tmp_path / "changed"
    shutil.copytree(folder, changed)
    state = {name: tensor.clone().contiguous() for name, tensor in original.state_dict().items()}
    save_file({**state, "model.decoder.adapter.weight": torch.zeros(2, 2)}, changed / "model.safetensors")
    with pytest.raises(CheckpointError, match=r"unexpected weights, not part of the marian layout: "
                                              r"model.decoder.adapter.weight$"):
        convert(changed)
    # config.json ties lm_head to the shared table: a different saved lm_head would be dropped unseen
    save_file({**state, "lm_head.weight": state["lm_head.weight"] + 1.0}, changed / "model.safetensors")
    with pytest.raises(CheckpointError, match=r"weight lm_head.weight differs from model.shared.weight"):
        convert(changed)


def test_heads_and_feed_forward_widths_may_differ_per_side(tmp_path):
    folder, original, tokenizer, pad = build_marian(tmp_path, encoder_attention_heads=4,
                                                    decoder_attention_heads=2, encoder_ffn_dim=32, decoder_ffn_dim=24)
    checkpoint = convert(folder)
    config = checkpoint.config
    assert (config.heads, config.decoder_heads, config.d_ff, config.decoder_d_ff) == (4, 2, 32, 24)
    assert checkpoint.model.attention_shape() == {"enc_self": (2, 4), "dec_self": (2, 2), "cross": (2, 2)}
    assert_logits_and_every_head_equal(checkpoint.model, original, pad)
    pairs = greedy_pairs(checkpoint.model, original, tokenizer, pad)
    assert all(ours == expected for ours, expected in pairs), pairs
    path = save_checkpoint(tmp_path / "sided.safetensors", checkpoint.model, checkpoint.source_tokenizer,
                           checkpoint.target_tokenizer, checkpoint.provenance)
    assert_logits_and_every_head_equal(load_checkpoint(path).model, original, pad)


def test_separate_vocabularies_of_unequal_size_keep_the_target_ids(tmp_path):
    """opus-mt folders with ``separate_vocabs``: the decoder's table, the output and the start token (the
    target's ``<pad>``) are the target vocabulary's, beyond the source vocabulary's last id."""
    folder, original, tokenizer, start = build_marian(tmp_path, separate=True)
    hf = original.config
    assert hf.vocab_size <= start < hf.decoder_vocab_size  # the start token exists on the target side only
    checkpoint = convert(folder)
    config = checkpoint.config
    assert (config.src_vocab_size, config.tgt_vocab_size) == (hf.vocab_size, hf.decoder_vocab_size)
    assert (config.pad_id, config.bos_id) == (hf.pad_token_id, start)
    assert_logits_and_every_head_equal(checkpoint.model, original, start)
    pairs = greedy_pairs(checkpoint.model, original, tokenizer, start)
    assert all(ours == expected for ours, expected in pairs), pairs
    for text in SENTENCES:
        assert checkpoint.source_tokenizer.encode(text, unknown="replace") + [0] == tokenizer(text).input_ids
    for _, expected in pairs:
        assert checkpoint.target_tokenizer.decode(expected) == tokenizer.decode(expected, skip_special_tokens=True)


def test_a_gelu_new_model_converts_exactly(tmp_path):
    folder, original, tokenizer, start = build_marian(tmp_path, activation_function="gelu_new")
    checkpoint = convert(folder)
    assert checkpoint.config.activation == "gelu_tanh"
    assert_logits_and_every_head_equal(checkpoint.model, original, start)
    pairs = greedy_pairs(checkpoint.model, original, tokenizer, start)
    assert all(ours == expected for ours, expected in pairs), pairs


CONVERT_PEAK = """
import sys
from attnviz.cli import main


def status(key):
    return next(int(line.split()[1]) * 1024 for line in open("/proc/self/status") if line.startswith(key))


small, wide, folder = sys.argv[1:4]
main(["convert", small, "-o", folder + "/small.safetensors"])  # every module a conversion imports, imported
open("/proc/self/clear_refs", "w").write("5")  # the high-water mark starts again from what is resident now
before = status("VmRSS:")
main(["convert", wide, "-o", folder + "/wide.safetensors"])
print(status("VmHWM:") - before)
"""


@pytest.mark.skipif(not os.path.exists("/proc/self/clear_refs"), reason="reads Linux's peak resident memory")
def test_convert_holds_one_copy_of_the_weights(marian, tmp_path):
    """attnviz convert, in a fresh process, grows by less than 1.5× the weights: the foreign tensors become the
    model's (no initialised model to copy them into) and the file is written from them (no copy of its bytes).
    Initialising the model, copying into it and writing through safetensors' save_file took 2.2×."""
    (tmp_path / "wide").mkdir()
    wide = build_marian(tmp_path / "wide", d_model=768, encoder_ffn_dim=3072, decoder_ffn_dim=3072)[0]
    weights = (wide / "model.safetensors").stat().st_size
    repository = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    result = subprocess.run([sys.executable, "-c", CONVERT_PEAK, str(marian[0]), str(wide), str(tmp_path)],
                            capture_output=True, text=True, env={**os.environ, "PYTHONPATH": repository}, check=False)
    assert result.returncode == 0, result.stderr[-2000:]
    grown = int(result.stdout.split()[-1])
    assert grown < 1.5 * weights, f"convert grew by {grown / weights:.2f}× the weights ({weights / 2**20:.0f} MB)"
    converted = load_checkpoint(tmp_path / "wide.safetensors")
    assert converted.model.parameter_count() * 4 == pytest.approx(weights, rel=0.01)
