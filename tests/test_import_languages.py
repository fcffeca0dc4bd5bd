"""Multilingual Hugging Face folders (mBART-50 style): language codes in the tokenizer, a source framed with
its language, every output started by the target language's code (``forced_bos_token_id``) — checked
against ``transformers`` itself, offline, on a tiny random model and a tokenizer.json trained here.
"""

from __future__ import annotations

import json
import os
from types import SimpleNamespace

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
transformers = pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")

from models.storage.checkpoint import load_checkpoint, save_checkpoint
from models.inference.decoding import finish
from models.errors import AttnvizError, CheckpointError
from models.importers import convert
from models.inference.translator import Translator
from tests.helpers import assert_same_forward  # noqa: E402
from tests.hf_fixtures import (
    TINY_SEQ2SEQ, assert_converted_forward_equal, saved_random_model, write_byte_level_bpe,
)

SENTENCES = ["the cat sat on the mat", "where is the house", "i like green apples", "the dog runs in the park",
             "we are going to the beach", "she reads a book every night"]
SPECIALS = ["<s>", "<pad>", "</s>", "<unk>"]
LANGUAGES = ["en_XX", "es_XX", "fr_XX"]
PAD, EOS = 1, 2
MAX_NEW = 10


@pytest.fixture(scope="module")
def mbart50(tmp_path_factory):
    """An mBART-50-style folder: sources framed ``en_XX … </s>``, outputs forced to start with es_XX."""
    folder = tmp_path_factory.mktemp("mbart50")
    tokenizer = write_byte_level_bpe(folder, SENTENCES, SPECIALS + LANGUAGES, ["en_XX", "$A", "</s>"])
    ids = {code: tokenizer.token_to_id(code) for code in LANGUAGES}
    config = transformers.MBartConfig(**TINY_SEQ2SEQ, vocab_size=tokenizer.get_vocab_size(), pad_token_id=PAD,
                                      bos_token_id=0, eos_token_id=EOS, decoder_start_token_id=EOS,
                                      scale_embedding=True, forced_eos_token_id=None)

    def into_spanish(model) -> None:
        model.generation_config.forced_bos_token_id = ids["es_XX"]

    original = saved_random_model(folder, transformers.MBartForConditionalGeneration, config,  # outputs depend on
                                  keep=("layer_norm", "layernorm"), end_bias=(EOS, 4.0), adjust=into_spanish)  # it
    return folder, original, tokenizer, ids


def generate(original, input_ids: list[int], forced: int) -> list[int]:
    settings = transformers.GenerationConfig(max_new_tokens=MAX_NEW, num_beams=1, do_sample=False,
                                             bad_words_ids=[[PAD]], decoder_start_token_id=EOS, eos_token_id=EOS,
                                             pad_token_id=PAD, forced_bos_token_id=forced, forced_eos_token_id=None)
    with torch.no_grad():
        return original.generate(torch.tensor([input_ids]), generation_config=settings)[0, 1:].tolist()


def framed(tokenizer, text: str, code_id: int) -> list[int]:
    return [code_id] + tokenizer.encode(text, add_special_tokens=False).ids + [EOS]


def greedy_ids(translator: Translator, text: str) -> list[int]:
    return finish(translator.decode(translator.source(text), mode="greedy", max_len=MAX_NEW))[0].token_ids


def test_languages_are_read_and_the_defaults_are_the_folders_own(mbart50):
    folder, _, _, ids = mbart50
    checkpoint = convert(folder)
    translator = Translator(checkpoint)
    assert translator.languages == LANGUAGES
    assert checkpoint.source_tokenizer.language == "en_XX" and checkpoint.target_tokenizer.language == "es_XX"
    assert checkpoint.target_tokenizer.first_tokens() == [ids["es_XX"]]
    assert checkpoint.provenance["imported_from"]["assumed"] == {"src_lang": "en_XX", "tgt_lang": "es_XX"}


def test_greedy_starts_with_the_target_language_and_equals_generate(mbart50):
    folder, original, tokenizer, ids = mbart50
    translator = Translator(convert(folder))
    outputs = set()
    for text in SENTENCES:
        expected = generate(original, tokenizer.encode(text).ids, ids["es_XX"])
        ours = greedy_ids(translator, text)
        assert ours == expected and ours[0] == ids["es_XX"], text
        outputs.add(tuple(ours))
    result = finish(translator.decode(translator.source(SENTENCES[0]), mode="greedy", max_len=MAX_NEW))[0]
    assert "es_XX" not in result.text and result.trace.tgt_tokens[:2] == ["</s>", "es_XX"]
    assert len(outputs) > 1


def test_both_languages_can_be_changed_at_conversion_or_at_run_time(mbart50, tmp_path):
    folder, original, tokenizer, ids = mbart50
    chosen = convert(folder, settings={"src_lang": "fr_XX", "tgt_lang": "fr_XX"})
    translator = Translator(chosen)
    changed = 0
    for text in SENTENCES[:4]:
        source = framed(tokenizer, text, ids["fr_XX"])
        assert translator.source(text).ids == source
        expected = generate(original, source, ids["fr_XX"])
        assert greedy_ids(translator, text) == expected
        changed += expected != generate(original, source, ids["es_XX"])
    assert changed  # the target language changes what the model writes
    path = save_checkpoint(tmp_path / "fr.safetensors", chosen.model, chosen.source_tokenizer,
                           chosen.target_tokenizer, chosen.provenance)
    reloaded = Translator(load_checkpoint(path))  # the choice is kept in the checkpoint
    assert (reloaded.source_tokenizer.language, reloaded.target_tokenizer.language) == ("fr_XX", "fr_XX")
    assert greedy_ids(reloaded, SENTENCES[0]) == greedy_ids(translator, SENTENCES[0])
    reloaded.set_languages(source="en_XX", target="es_XX")
    assert greedy_ids(reloaded, SENTENCES[0]) == generate(original, tokenizer.encode(SENTENCES[0]).ids, ids["es_XX"])


def test_forced_decoding_feeds_the_language_first_and_equals_the_forward(mbart50):
    folder, original, tokenizer, ids = mbart50
    translator = Translator(convert(folder))
    source = translator.source(SENTENCES[1])
    target = translator.target("la casa")
    result = finish(translator.decode(source, mode="forced", target_ids=target))[0]
    assert result.token_ids == [ids["es_XX"], *target, EOS]
    decoder_input = torch.tensor([[EOS, ids["es_XX"], *target]])
    with torch.no_grad():
        logits = original(input_ids=torch.tensor([source.ids]), decoder_input_ids=decoder_input).logits[0]
    expected = torch.log_softmax(logits, dim=-1).gather(1, torch.tensor(result.token_ids)[:, None])[:, 0]
    assert abs(result.log_prob - float(expected.sum())) < 1e-4
    beam = finish(translator.decode(source, mode="beam", beam=3, max_len=MAX_NEW))
    assert all(hypothesis.token_ids[0] == ids["es_XX"] for hypothesis in beam)


def test_unknown_languages_are_one_line_naming_the_known_ones(mbart50):
    folder, _, _, _ = mbart50
    with pytest.raises(CheckpointError, match=r"--set tgt_lang: unknown language 'de_DE'; this model knows "
                                              r"en_XX, es_XX, fr_XX$"):
        convert(folder, settings={"tgt_lang": "de_DE"})
    translator = Translator(convert(folder))
    with pytest.raises(AttnvizError, match=r"unknown language 'xx'"):
        translator.set_languages(source="xx")
    assert translator.source_tokenizer.language == "en_XX"  # nothing changed


def test_a_model_without_languages_refuses_a_language(tmp_path):
    from tests.test_import_hf_bart import build

    folder, _, _ = build(tmp_path, "bart")
    with pytest.raises(CheckpointError, match=r"--set src_lang: this model has no language codes"):
        convert(folder, settings={"src_lang": "en_XX"})
    with pytest.raises(AttnvizError, match=r"this model has no language codes; got 'en_XX'"):
        Translator(convert(folder)).set_languages(target="en_XX")


def test_the_cli_converts_with_languages_and_translates_into_another(mbart50, tmp_path, capsys):
    from attnviz.cli import main

    def run_cli(*args: str) -> SimpleNamespace:
        code = main([str(arg) for arg in args])
        captured = capsys.readouterr()
        return SimpleNamespace(returncode=code, stdout=captured.out, stderr=captured.err)

    folder, original, tokenizer, ids = mbart50
    out = tmp_path / "m.safetensors"
    done = run_cli("convert", folder, "-o", out, "--tgt-lang", "fr_XX")
    assert done.returncode == 0, done.stderr
    info = run_cli("info", out)
    assert "target       tokenizer-json tokenizer, 300 tokens, language fr_XX" in info.stdout
    assert "languages    en_XX, es_XX, fr_XX  (choose with --src-lang/--tgt-lang)" in info.stdout
    text = SENTENCES[2]
    french = Translator(load_checkpoint(out)).target_tokenizer.decode(
        generate(original, tokenizer.encode(text).ids, ids["fr_XX"]))
    spanish = Translator(load_checkpoint(out)).target_tokenizer.decode(
        generate(original, tokenizer.encode(text).ids, ids["es_XX"]))
    assert run_cli("translate", "-c", out, "--max-len", MAX_NEW, text).stdout.strip() == french
    assert run_cli("translate", "-c", out, "--max-len", MAX_NEW, "--tgt-lang", "es_XX", text).stdout.strip() == spanish
    wrong = run_cli("translate", "-c", out, "--tgt-lang", "klingon", text)
    assert wrong.returncode == 1 and wrong.stderr.strip().startswith("attnviz: error:") and "klingon" in wrong.stderr
    assert json.loads(json.dumps(load_checkpoint(out).provenance))["imported_from"]["supplied"] == {"tgt_lang": "fr_XX"}


def test_the_window_offers_the_languages_and_rewrites_in_the_one_chosen(qtbot, window, mbart50, tmp_path):
    folder, original, tokenizer, ids = mbart50
    text = SENTENCES[3]
    window.open_path(str(folder))
    qtbot.waitUntil(lambda: window.session.model is not None and window.session.model.path == folder, timeout=20_000)
    bar = window.views.input_bar
    assert bar.source_language.isVisibleTo(window) and bar.target_language.isVisibleTo(window)
    assert [bar.target_language.itemText(i) for i in range(bar.target_language.count())] == LANGUAGES
    assert (bar.source_language.currentText(), bar.target_language.currentText()) == ("en_XX", "es_XX")
    bar.max_len.setValue(MAX_NEW)
    bar.set_text(text)
    window.run()
    qtbot.waitUntil(lambda: bool(window.session.results) and window.session.request.settings.text == text,
                    timeout=20_000)
    assert window.session.results[0].token_ids == generate(original, tokenizer.encode(text).ids, ids["es_XX"])
    bar.target_language.setCurrentText("fr_XX")  # re-runs after the usual pause
    qtbot.waitUntil(lambda: bool(window.session.results) and window.session.request.settings.tgt_lang == "fr_XX",
                    timeout=20_000)
    assert window.session.results[0].token_ids == generate(original, tokenizer.encode(text).ids, ids["fr_XX"])
    assert window.session.results[0].trace.tgt_tokens[1] == "fr_XX"
    window.sessions.save_session(str(tmp_path / "lesson.attnviz"))  # a lesson keeps the languages too
    assert json.loads((tmp_path / "lesson.attnviz").read_text())["input"]["tgt_lang"] == "fr_XX"


NLLB_LANGUAGES = ["eng_Latn", "fra_Latn", "spa_Latn"]


@pytest.fixture(scope="module")
def nllb(tmp_path_factory):
    return build_nllb(tmp_path_factory.mktemp("nllb"))


def build_nllb(folder):
    """An NLLB-style M2M100 folder: fairseq sinusoidal positions, sources framed ``eng_Latn … </s>``."""
    tokenizer = write_byte_level_bpe(folder, SENTENCES, SPECIALS + NLLB_LANGUAGES, ["eng_Latn", "$A", "</s>"])
    ids = {code: tokenizer.token_to_id(code) for code in NLLB_LANGUAGES}
    original = tiny_m2m100(folder, tokenizer.get_vocab_size(), seed=1, forced=ids["spa_Latn"])
    return folder, original, tokenizer, ids


def tiny_m2m100(folder, vocab_size: int, seed: int, forced: int | None = None):
    """A small M2M100ForConditionalGeneration with seeded, widened random weights, saved to ``folder`` and read
    back with eager attention (so that it returns every head)."""
    config = transformers.M2M100Config(**TINY_SEQ2SEQ, vocab_size=vocab_size, pad_token_id=PAD, bos_token_id=0,
                                       eos_token_id=EOS, decoder_start_token_id=EOS, scale_embedding=True,
                                       forced_eos_token_id=None)

    def forcing(model) -> None:
        if forced is not None:
            model.generation_config.forced_bos_token_id = forced

    return saved_random_model(folder, transformers.M2M100ForConditionalGeneration, config, seed=seed, adjust=forcing)


def test_an_nllb_folder_computes_what_transformers_computes(nllb, tmp_path):
    from models.importers import detect_format

    folder, original, tokenizer, ids = nllb
    assert detect_format(folder) == "hf-bart"
    checkpoint = convert(folder)
    config = checkpoint.config
    assert (config.positions, config.position_offset, config.embedding_norm) == ("fairseq", 2, False)
    assert Translator(checkpoint).languages == NLLB_LANGUAGES
    assert_converted_forward_equal(checkpoint, original, [tokenizer.encode(text).ids for text in SENTENCES[:3]],
                                   pad=PAD, start=[EOS, ids["spa_Latn"]], lowest=7, vocab=config.tgt_vocab_size,
                                   saved=tmp_path / "nllb.safetensors")


def test_nllb_greedy_equals_generate_in_each_target_language(nllb):
    folder, original, tokenizer, ids = nllb
    translator = Translator(convert(folder))
    for code in ("spa_Latn", "fra_Latn"):
        translator.set_languages(target=code)
        for text in SENTENCES[:4]:
            assert greedy_ids(translator, text) == generate(original, tokenizer.encode(text).ids, ids[code]), text
    translator.set_languages(source="fra_Latn")
    assert translator.source(SENTENCES[0]).ids == framed(tokenizer, SENTENCES[0], ids["fra_Latn"])


@pytest.fixture(scope="module")
def m2m100(tmp_path_factory):
    return build_m2m100(tmp_path_factory.mktemp("m2m100"))


def build_m2m100(folder):
    """An M2M100 folder as facebook/m2m100_418M ships it: its own tokenizer (``sentencepiece.bpe.model`` +
    ``vocab.json``, the hundred ``__xx__`` language codes after the pieces), no tokenizer.json."""
    import sentencepiece as spm

    corpus = folder / "corpus.txt"
    corpus.write_text("\n".join(SENTENCES * 5) + "\n", encoding="utf-8")
    spm.SentencePieceTrainer.train(input=str(corpus), model_prefix=str(folder / "spm"), vocab_size=60,
                                   model_type="bpe", character_coverage=1.0)
    processor = spm.SentencePieceProcessor(model_file=str(folder / "spm.model"))
    vocab = {token: index for index, token in enumerate(SPECIALS)}
    for index in range(processor.get_piece_size()):
        vocab.setdefault(processor.id_to_piece(index), len(vocab))
    (folder / "vocab.json").write_text(json.dumps(vocab), encoding="utf-8")
    tokenizer = transformers.M2M100Tokenizer(str(folder / "vocab.json"), str(folder / "spm.model"), src_lang="en",
                                             tgt_lang="fr")
    saved = folder / "model"
    tokenizer.save_pretrained(saved)
    assert not (saved / "tokenizer.json").exists() and (saved / "sentencepiece.bpe.model").is_file()
    # its vocabulary: the pieces, the hundred language codes, eight "madeup" words
    original = tiny_m2m100(saved, len(vocab) + 100 + 8, seed=2)
    return saved, original, tokenizer


def test_m2m100s_own_tokenizer_encodes_as_transformers_does(m2m100, tmp_path):
    folder, _, tokenizer = m2m100
    checkpoint = convert(folder)
    source, target = checkpoint.source_tokenizer, checkpoint.target_tokenizer
    assert len(source.languages) == 100 and source.language == "__en__" and target.language == "__fr__"
    assert source.languages["__zu__"] == tokenizer.get_lang_id("zu") and target.first_tokens() == \
        [tokenizer.get_lang_id("fr")]
    for language in ("en", "de"):
        tokenizer.src_lang = language
        source.set_language(language)  # the bare code names the same language
        for text in SENTENCES:
            assert source.encode(text) + [EOS] == tokenizer(text).input_ids, (language, text)
    path = save_checkpoint(tmp_path / "m2m100.safetensors", checkpoint.model, source, target, checkpoint.provenance)
    reloaded = load_checkpoint(path)
    assert reloaded.source_tokenizer.languages == source.languages
    assert reloaded.target_tokenizer.first_tokens() == target.first_tokens()
    assert checkpoint.provenance["imported_from"]["assumed"] == {"src_lang": "__en__", "tgt_lang": "__fr__"}


def test_m2m100_greedy_and_attention_equal_transformers(m2m100):
    folder, original, tokenizer = m2m100
    translator = Translator(convert(folder))
    tokenizer.src_lang = "en"
    outputs = set()
    for language in ("fr", "es"):
        translator.set_languages(target=language)
        for text in SENTENCES[:4]:
            expected = generate(original, tokenizer(text).input_ids, tokenizer.get_lang_id(language))
            ours = greedy_ids(translator, text)
            assert ours == expected and ours[0] == tokenizer.get_lang_id(language), (language, text)
            outputs.add(tuple(ours))
    assert len(outputs) > 2
    result = finish(translator.decode(translator.source(SENTENCES[0]), mode="greedy", max_len=MAX_NEW))[0]
    assert "__es__" not in result.text and result.trace.tgt_tokens[:2] == ["</s>", "__es__"]
    src = torch.tensor([tokenizer(SENTENCES[1]).input_ids])
    tgt = torch.tensor([[EOS, tokenizer.get_lang_id("es"), 7, 9, 11]])
    with torch.no_grad():
        expected = original(input_ids=src, decoder_input_ids=tgt, output_attentions=True)
        logits, intermediates = translator.model(src, tgt, need_weights=True)
    assert_same_forward(expected, logits, intermediates)
