"""Import of fairseq checkpoints, against files fairseq itself wrote.

fairseq does not install on Python 3.11 from PyPI (0.12.2 fails at import); its ``fairseq-fixed`` 0.12.3.1 fork
does, but only by building from source, which is too heavy for every CI run. So the checkpoints under
tests/data/fairseq/ were written by that fork's own ``fairseq-preprocess`` and ``fairseq-train`` (a few hundred
updates on a tiny corpus, thousands for the narrow LSTM), with what fairseq's own code computed from them: logits,
every head of every attention layer (its MultiheadAttention modules, read through hooks), and greedy output from
its SequenceGenerator (beam 1). tests/data/fairseq/make_fixtures.py says exactly how; rerun it with fairseq to
renew them. Each folder holds what a user has after training: ``checkpoint_last.pt``, the data-bin's
``dict.src.txt``/``dict.tgt.txt`` and the sentencepiece model the text was split with.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from attnviz.cli import main
from models.errors import CheckpointError
from models.importers import MissingSettingsError, convert, detect_format
from models.importers.safe_load import TrustRequiredError
from models.inference.translator import Translator
from tests.helpers import fixture_copy, toolkit_outputs

DATA = Path(__file__).parent / "data" / "fairseq"
VARIANTS = ("transformer-postln", "transformer-preln", "lstm", "transformer-sides", "lstm-narrow-decoder")
SENTENCES = ["the cat sees a big house", "a small dog runs near the tree", "the bird eats a red fish"]
MAX_LEN = 40  # make_fixtures.py: SequenceGenerator(max_len_b=40)
KINDS = {"self_attn": {"encoder": "enc_self", "decoder": "dec_self"}, "encoder_attn": {"decoder": "cross"}}


def _reference(name: str) -> dict[str, np.ndarray]:
    return toolkit_outputs(DATA / name, "fairseq_outputs.npz")


def _copy(name: str, tmp_path: Path) -> Path:
    return fixture_copy(DATA / name, tmp_path, "fairseq_outputs.npz")


@pytest.mark.parametrize("name", VARIANTS)
def test_logits_and_every_head_equal_fairseq(name):
    checkpoint = convert(DATA / name)
    assert detect_format(DATA / name) == "fairseq" == detect_format(DATA / name / "checkpoint_last.pt")
    model, reference = checkpoint.model, _reference(name)
    compared = 0
    for index, sentence in enumerate(SENTENCES):
        src = reference[f"{index}/src"]
        # the sentencepiece model and fairseq's dictionary give the ids fairseq's own pipeline gave
        assert checkpoint.source_tokenizer.encode(sentence) + [checkpoint.model.config.eos_id] == src.tolist()
        with torch.no_grad():
            logits, intermediates = model(torch.tensor(src)[None], torch.tensor(reference[f"{index}/prev"])[None],
                                          need_weights=True)
        assert (logits[0] - torch.tensor(reference[f"{index}/logits"])).abs().max() < 1e-4
        for key, theirs in reference.items():
            if not key.startswith(f"{index}/attention/"):
                continue
            module = key.split("/")[2]
            if module == "cross":  # the LSTM decoder's one map [target, source]
                ours = intermediates.attention["cross"][0][0, 0]
            else:
                side, _, layer, block = module.split(".")
                ours = intermediates.attention[KINDS[block][side]][int(layer)][0]
            assert ours.shape == theirs.shape and (ours - torch.tensor(theirs)).abs().max() < 1e-5, key
            compared += 1
    expected = {"transformer-postln": 6, "transformer-preln": 4, "lstm": 1, "transformer-sides": 6,
                "lstm-narrow-decoder": 1}[name] * len(SENTENCES)
    assert compared == expected


def test_each_side_keeps_its_own_sizes():
    """fairseq's per-side options: encoder and decoder head counts and feed-forward widths, and an LSTM decoder
    narrower than the encoder's output (fairseq maps the encoder's final states to its width)."""
    config = convert(DATA / "transformer-sides").model.config
    assert (config.heads_of("encoder"), config.heads_of("decoder")) == (4, 2)
    assert (config.d_ff_of("encoder"), config.d_ff_of("decoder")) == (32, 24)
    lstm = convert(DATA / "lstm-narrow-decoder").model.config
    assert (lstm.hidden, lstm.annotation_width, lstm.init_hidden) == (14, 20, "encoder")


@pytest.mark.parametrize("name", VARIANTS)
def test_greedy_output_equals_the_sequence_generator(name):
    reference = _reference(name)
    translator = Translator(convert(DATA / name), device="cpu")
    outputs = []
    eos = translator.config.eos_id
    for index, sentence in enumerate(SENTENCES):
        # fairseq's generator (max_len_b=40) ends a hypothesis that reaches 40 tokens with a forced </s>
        theirs = reference[f"{index}/greedy"].tolist()
        result = translator.translate(sentence, max_len=MAX_LEN)
        ours = result.token_ids if len(theirs) <= MAX_LEN else [*result.token_ids[:MAX_LEN], eos]
        assert ours == theirs, sentence
        outputs.append(result.text)
    # a model that learned something: the reversed, upper-cased words, different per sentence
    assert len(set(outputs)) == len(SENTENCES)


@pytest.mark.parametrize("beam", [1, 4])
def test_no_search_ends_before_the_first_token_as_fairseqs_min_len(beam, tmp_path):
    """fairseq's SequenceGenerator (min_len 1) bans the end token at the first step, so fairseq-interactive
    never gives an empty output. "bird" is a source on which this model's most likely first token is the end
    token: ours must pick the best other token instead, in the converted and in the saved checkpoint. (Written
    from fairseq's rule, as no fairseq runs here; the fixtures' own outputs are compared above.)"""
    from models.storage.checkpoint import load_checkpoint, save_checkpoint
    from models.inference.decoding import Capture, beam_search, finish, greedy

    checkpoint = convert(DATA / "transformer-postln")
    path = save_checkpoint(tmp_path / "fairseq.safetensors", checkpoint.model, checkpoint.source_tokenizer,
                           checkpoint.target_tokenizer, checkpoint.provenance)
    model = load_checkpoint(path).model
    assert model.config.min_output_len == 1
    eos = model.config.eos_id
    src = checkpoint.source_tokenizer.encode("bird") + [eos]
    with torch.no_grad():
        first = model(torch.tensor([src]), torch.tensor([[model.config.bos_id]]))[0][0, 0]
    assert int(first.argmax()) == eos  # the case the rule is for
    first[eos] = float("-inf")
    capture = Capture(max_len=MAX_LEN)
    search = greedy(model, src, capture) if beam == 1 else beam_search(model, src, capture, beam=beam)
    ids = finish(search)[0].token_ids
    assert ids[-1] == eos and len(ids) > 1
    if beam == 1:
        assert ids[0] == int(first.argmax())


def test_the_cli_converts_a_folder_and_the_result_translates_alike(tmp_path, capsys):
    folder = _copy("transformer-preln", tmp_path)
    output = tmp_path / "fairseq.safetensors"
    assert main(["convert", str(folder), "-o", str(output)]) == 0
    assert main(["info", str(output)]) == 0
    shown = capsys.readouterr().out
    assert "fairseq" in shown and "sentencepiece model" in shown
    assert main(["translate", "-c", str(output), SENTENCES[0]]) == 0
    translated = capsys.readouterr().out.strip()
    assert translated == Translator(convert(folder), device="cpu").translate(SENTENCES[0]).text


def test_dictionaries_are_found_or_asked_for(tmp_path):
    folder = _copy("transformer-preln", tmp_path)
    for lang in ("src", "tgt"):  # fairseq's usual names: dict.<language>.txt
        (folder / f"dict.{lang}.txt").rename(folder / f"dict.{'en' if lang == 'src' else 'de'}.txt")
    with pytest.raises(MissingSettingsError, match=r"give --src-vocab FILE \(fairseq's source dictionary, "
                                                   r"dict\.<lang>\.txt; cannot tell which of dict\.de\.txt, "
                                                   r"dict\.en\.txt is the source dictionary \(the checkpoint names "
                                                   r"no languages\)\); --tgt-vocab FILE") as raised:
        convert(folder)
    assert set(raised.value.inspection.vocabularies) == {"src", "tgt"}  # the window's import dialog asks for both
    given = convert(folder, src_vocab=folder / "dict.en.txt", tgt_vocab=folder / "dict.de.txt")
    reference = convert(DATA / "transformer-preln")
    assert given.source_tokenizer.vocabulary == reference.source_tokenizer.vocabulary
    assert given.target_tokenizer.vocabulary == reference.target_tokenizer.vocabulary
    # the training's data-bin folder, which the checkpoint names (cfg.task.data), is the other place looked in
    data_bin = tmp_path / "data-bin"
    data_bin.mkdir()
    for lang in ("src", "tgt"):
        shutil.copy(DATA / "transformer-preln" / f"dict.{lang}.txt", data_bin / f"dict.{lang}.txt")
    for path in folder.glob("dict.*.txt"):
        path.unlink()
    payload = _payload("transformer-preln")
    payload["cfg"]["task"]["data"] = str(data_bin)
    torch.save(payload, folder / "checkpoint_last.pt")
    found = convert(folder / "checkpoint_last.pt")
    assert found.provenance["imported_from"]["vocabularies"] == {"src": str(data_bin / "dict.src.txt"),
                                                                 "tgt": str(data_bin / "dict.tgt.txt")}
    shutil.rmtree(data_bin)
    with pytest.raises(MissingSettingsError, match=r"give --src-vocab FILE \(fairseq's source dictionary, "
                                                   r"dict\.<lang>\.txt; no fairseq dictionaries \(dict\.<lang>\.txt\) "
                                                   r"beside it or in its data folder\)"):
        convert(folder / "checkpoint_last.pt")


def test_a_dictionary_larger_than_the_embedding_is_refused(tmp_path):
    folder = _copy("lstm", tmp_path)
    path = folder / "dict.tgt.txt"
    path.write_text(path.read_text(encoding="utf-8") + "".join(f"extra{n} 1\n" for n in range(200)),
                    encoding="utf-8")
    with pytest.raises(CheckpointError, match=r"dict\.tgt\.txt: has \d+ symbols with fairseq's four specials; the "
                                              r"model's embedding has \d+ rows$"):
        convert(folder)


def _payload(name: str) -> dict:
    import argparse

    with torch.serialization.safe_globals([argparse.Namespace]):
        return torch.load(DATA / name / "checkpoint_last.pt", weights_only=True)


def _with_payload(tmp_path: Path, name: str, payload: dict) -> Path:
    folder = _copy(name, tmp_path)
    torch.save(payload, folder / "checkpoint_last.pt")
    return folder


def test_other_fairseq_models_are_refused_in_one_line(tmp_path):
    payload = _payload("transformer-postln")
    state = payload["model"]
    for key in [key for key in state if ".self_attn.k_proj." in key]:  # the pre-2019 packed projection
        state[key.replace("k_proj.weight", "in_proj_weight").replace("k_proj.bias", "in_proj_bias")] = state.pop(key)
    folder = _with_payload(tmp_path / "packed", "transformer-postln", payload)
    with pytest.raises(CheckpointError, match=r"a pre-2019 transformer with packed q/k/v projections \(arch "
                                              r"transformer\) is not supported; this version imports the "
                                              r"transformer family"):
        convert(folder)
    payload = _payload("transformer-postln")
    payload["model"] = {"encoder.embed_tokens.weight": payload["model"]["encoder.embed_tokens.weight"],
                        "encoder.convolutions.0.weight": torch.zeros(4, 4, 3)}
    payload["cfg"]["model"].arch = "fconv"
    folder = _with_payload(tmp_path / "conv", "transformer-postln", payload)
    with pytest.raises(CheckpointError, match=r"arch fconv is not supported; this version imports the transformer"):
        convert(folder)


def test_an_omegaconf_config_is_read_without_running_its_code(tmp_path):
    """fairseq before 0.12 pickled its config as omegaconf objects. They are read as inert data, without --trust
    and without importing omegaconf (checked in a fresh interpreter)."""
    omegaconf = pytest.importorskip("omegaconf")
    payload = _payload("transformer-postln")
    cfg = payload["cfg"]
    cfg["model"] = vars(cfg["model"])
    payload["cfg"] = omegaconf.OmegaConf.create(cfg)
    folder = _with_payload(tmp_path, "transformer-postln", payload)
    probe = ("import sys, torch; from models.importers import convert\n"
             f"model = convert({str(folder)!r}).model\n"
             "print('omegaconf' in sys.modules, model.config.arch, model.config.encoder_layers)")
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120,
                            cwd=Path(__file__).parents[1])
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["False", "transformer-postln", "2"]
    converted, reference = convert(folder).model.state_dict(), convert(DATA / "transformer-postln").model.state_dict()
    assert all(torch.equal(converted[key], reference[key]) for key in reference)


def test_other_classes_in_the_config_still_need_trust(tmp_path):
    payload = _payload("transformer-postln")
    payload["extra_state"]["callback"] = Path("x")  # a class outside the allow-list, harmless but not data
    folder = _with_payload(tmp_path, "transformer-postln", payload)
    with pytest.raises(TrustRequiredError, match=r"needs arbitrary unpickling \(it contains pathlib\.PosixPath\)"):
        convert(folder)


def test_subword_nmt_codes_split_text_as_subword_nmt_does(tmp_path):
    """A checkpoint trained on subword-nmt output: its dictionary lists ``piece@@`` symbols, and typed text is
    split by the codes exactly as subword-nmt's apply_bpe splits it."""
    apply_bpe = pytest.importorskip("subword_nmt.apply_bpe")
    learn_bpe = pytest.importorskip("subword_nmt.learn_bpe")
    import io

    words = "lower lowest newer newest wider widest slower slowest the cat sees a big house".split()
    corpus = " ".join(words * 3) + "\n" + " ".join(reversed(words)) + "\n"
    codes = io.StringIO()
    learn_bpe.learn_bpe(io.StringIO(corpus), codes, num_symbols=20)
    codes_path = tmp_path / "bpecodes"
    codes_path.write_text(codes.getvalue(), encoding="utf-8")
    bpe = apply_bpe.BPE(io.StringIO(codes.getvalue()))
    text = "the slowest newer cat sees a wider house"
    pieces = bpe.process_line(text).split()
    assert any(piece.endswith("@@") for piece in pieces)
    symbols = sorted({piece for line in corpus.splitlines() for piece in bpe.process_line(line).split()})
    folder = _copy("transformer-postln", tmp_path)
    (folder / "sentencepiece.bpe.model").unlink()
    rows = convert(DATA / "transformer-postln").model.config.src_vocab_size
    assert len(symbols) + 4 <= rows
    (folder / "dict.src.txt").write_text("".join(f"{symbol} 1\n" for symbol in symbols), encoding="utf-8")
    shutil.copy(folder / "dict.src.txt", folder / "dict.tgt.txt")
    checkpoint = convert(folder, settings={"bpe": str(codes_path)})
    tokenizer = checkpoint.source_tokenizer
    vocabulary = tokenizer.vocabulary
    assert [vocabulary[token] for token in tokenizer.encode(text)] == pieces
    assert tokenizer.decode(tokenizer.encode(text)) == text
    record = checkpoint.provenance["imported_from"]
    assert record["supplied"] == {"bpe": str(codes_path)} and "subword-nmt codes" in record["tokenization"]
