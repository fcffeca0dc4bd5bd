"""The headless CLI as scripts use it (the README's command list): outputs, the NPZ layout, and one-line errors."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import numpy as np
import pytest

from attnviz.cli import main
from models.storage.checkpoint import load_checkpoint
from models.inference.decoding import finish
from models.inference.translator import Translator


def cli(capsys, *args: str) -> tuple[int, str, str]:
    code = main([str(arg) for arg in args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def assert_error(code: int, err: str, message: str) -> None:
    """Exit 1 and exactly ``attnviz: error: MESSAGE`` on stderr: scripts match these lines."""
    assert (code, err.strip().splitlines()) == (1, [f"attnviz: error: {message}"]), err


def assert_one_line_error(code: int, err: str, *fragments: str) -> None:
    assert code != 0
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("attnviz: error: ")
    assert "Traceback" not in err
    for fragment in fragments:
        assert fragment in lines[0]


def test_info_describes_the_checkpoint(capsys, random_checkpoint):
    code, out, _ = cli(capsys, "info", random_checkpoint)
    assert code == 0
    assert "transformer-preln" in out and "enc_self, dec_self, cross" in out and "random weights" in out
    code, out, _ = cli(capsys, "info", random_checkpoint, "--json")
    summary = json.loads(out)
    assert summary["config"]["d_model"] == 32 and summary["source_tokenizer"]["vocab_size"] == 13


def test_translate_prints_one_line_per_input(capsys, random_checkpoint):
    translator = Translator(load_checkpoint(random_checkpoint), "cpu")
    expected = [translator.translate(text, max_len=6).text for text in ("abc", "hag", "bed")]
    code, out, _ = cli(capsys, "translate", "-c", random_checkpoint, "--max-len", "6", "abc", "hag", "bed")
    assert code == 0
    assert out.split("\n")[:-1] == expected


def test_translate_reads_standard_input(monkeypatch, capsys, random_checkpoint):
    import io

    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"abc\nhag\n")))
    code, out, _ = cli(capsys, "translate", "-c", random_checkpoint, "--max-len", "4", "--beam", "3")
    assert code == 0 and len(out.split("\n")) == 3


@pytest.mark.parametrize("options, text, message", [
    ([], "", "input 1: the text is empty"),
    ([], "   \t ", "input 1: the text is empty"),
    (["--strict"], "abc xyz", "input 1: the model's vocabulary has no token for 'x' 'y' 'z'"),
])
def test_translate_rejects_bad_text(capsys, random_checkpoint, options, text, message):
    code, out, err = cli(capsys, "translate", "-c", random_checkpoint, *options, text)
    assert_error(code, err, message)
    assert out == ""


def test_unknown_characters_become_the_unknown_token_with_a_warning(capsys, random_checkpoint):
    code, out, err = cli(capsys, "translate", "-c", random_checkpoint, "--max-len", "3", "abc xyz")
    assert code == 0 and len(out.splitlines()) == 1
    assert err.splitlines() == ["attnviz: warning: input 1: the model's vocabulary has no token for 'x' 'y' 'z'; "
                                "each became its unknown token (--strict refuses such text)"]
    code, out, _ = cli(capsys, "translate", "-c", random_checkpoint, "--max-len", "3", "--replace-unknown", "abc xyz")
    assert code == 0 and len(out.splitlines()) == 1  # the old switch is still accepted


def test_too_long_text_is_truncated_with_a_notice(capsys, random_checkpoint):
    code, out, err = cli(capsys, "translate", "-c", random_checkpoint, "--max-len", "3", "ab" * 100)
    assert code == 0 and len(out.splitlines()) == 1
    assert "input 1 has 201 tokens; only the first 64 are used" in err


@pytest.mark.parametrize("content, message", [
    (None, "no such file"),
    (b"", "the file is empty"),
    (b"not a checkpoint at all", "not a readable safetensors file (its header length is wrong)"),
])
def test_bad_checkpoint_files(capsys, tmp_path, content, message):
    path = tmp_path / "model.safetensors"
    if content is not None:
        path.write_bytes(content)
    code, _, err = cli(capsys, "translate", "-c", path, "abc")
    assert_error(code, err, f"{path}: {message}")


@pytest.mark.parametrize("options, fragment", [
    (["--beam", "0"], "between 1 and 64"), (["--beam", "5000"], "between 1 and 64"),
    (["--beam", "x"], "not an integer"),
    (["--max-len", "-1"], "--max-len"), (["--max-len", "0"], "between 1"),
    (["--length-penalty", "nan"], "finite"), (["--encoding", "klingon"], "unknown text encoding"),
])
def test_bad_options_are_usage_errors(capsys, random_checkpoint, options, fragment):
    with pytest.raises(SystemExit) as exit:
        main(["translate", "-c", str(random_checkpoint), *options, "abc"])
    err = capsys.readouterr().err
    assert exit.value.code == 2 and fragment in err and "Traceback" not in err


def test_export_writes_the_documented_npz_layout(capsys, tmp_path, random_checkpoint):
    output = tmp_path / "trace.npz"
    code, _, err = cli(capsys, "export", "-c", random_checkpoint, "--max-len", "5", "abc", "-o", output)
    assert code == 0, err
    arrays = np.load(output)
    translator = Translator(load_checkpoint(random_checkpoint), "cpu")
    trace = finish(translator.decode(translator.source("abc"), max_len=5))[0].trace
    assert list(arrays["src_tokens"]) == ["a", "b", "c", "</s>"]
    assert list(arrays["tgt_tokens"]) == trace.tgt_tokens and arrays["tgt_tokens"][0] == "<s>"
    for kind in ("enc_self", "dec_self", "cross"):
        for layer in range(2):
            weights = arrays[f"{kind}_L{layer}"]
            assert weights.dtype == np.float32
            np.testing.assert_allclose(weights, trace.attention[kind][layer], atol=1e-6)
        assert arrays[f"{kind}_mask"].dtype == bool
    steps = len(trace.tgt_tokens)
    assert arrays["enc_self_L0"].shape == (4, 4, 4)
    assert arrays["dec_self_L1"].shape == (4, steps, steps) and arrays["cross_L0"].shape == (4, steps, 4)
    assert np.array_equal(arrays["dec_self_mask"], np.tril(np.ones((steps, steps), dtype=bool)))


def test_export_forced_to_a_target(capsys, tmp_path, random_checkpoint):
    output = tmp_path / "forced.npz"
    code, _, err = cli(capsys, "export", "-c", random_checkpoint, "--target", "cba", "abc", "-o", output)
    assert code == 0, err
    arrays = np.load(output)
    assert list(arrays["tgt_tokens"]) == ["<s>", "c", "b", "a"]
    assert list(arrays["output_tokens"]) == ["c", "b", "a", "</s>"]
    assert arrays["cross_L0"].shape == (4, 4, 4)


def test_export_refuses_a_bad_output_path(capsys, tmp_path, random_checkpoint):
    code, _, err = cli(capsys, "export", "-c", random_checkpoint, "abc", "-o", tmp_path / "trace.txt")
    assert_error(code, err, f"{tmp_path / 'trace.txt'}: the file name must end in .npz or .csv")
    code, _, err = cli(capsys, "export", "-c", random_checkpoint, "abc", "-o", tmp_path / "absent" / "t.npz")
    assert_error(code, err, f"{tmp_path / 'absent' / 't.npz'}: the folder {tmp_path / 'absent'} does not exist")


def test_the_installed_entry_point_runs_as_a_process(random_checkpoint):
    script = shutil.which("attnviz")  # the console script pip installed, as a user runs it
    assert script is not None, "attnviz is not installed (pip install -e .)"
    result = subprocess.run([script, "translate", "-c", str(random_checkpoint), ""], capture_output=True, text=True,
                            timeout=120)
    assert (result.returncode, result.stderr.strip()) == (1, "attnviz: error: input 1: the text is empty")
    version = subprocess.run([script, "--version"], capture_output=True, text=True, timeout=120)
    assert version.stdout.strip().startswith("attnviz ")


def test_train_from_the_command_line_then_translate(capsys, tmp_path):
    import random

    rng = random.Random(0)
    words = sorted({"".join(rng.choice("abcdefgh") for _ in range(rng.randint(3, 5))) for _ in range(300)})
    data = tmp_path / "pairs.tsv"
    data.write_text("".join(f"{word}\t{word[::-1]}\n" for word in words), encoding="utf-8")
    out = tmp_path / "reverse.safetensors"
    code, _, err = cli(capsys, "train", "--data", data, "--arch", "transformer-preln", "--out", out,
                       "--steps", "300", "--seed", "3", "--tokenizer", "char", "--batch-size", "16", "--lr", "5e-3",
                       "--warmup", "30", "--no-progress", "--eval-every", "0", "--valid-sentences", "5",
                       "--set", "d_model=32", "--set", "heads=2", "--set", "d_ff=64", "--set", "encoder_layers=1",
                       "--set", "decoder_layers=1", "--set", "max_len=16", "--set", "dropout=0.0")
    assert code == 0, err
    assert f"saved {out} after 300 steps" in err
    info = load_checkpoint(out)
    assert info.config.d_model == 32 and info.provenance["corpus"] == str(data)
    code, out_text, _ = cli(capsys, "translate", "-c", out, *words[:10])
    correct = sum(line == word[::-1] for line, word in zip(out_text.splitlines(), words[:10]))
    assert correct >= 8, out_text


@pytest.mark.parametrize("content, options, message", [
    ("abc\tcba\nno tab here\n", [], "{data}:2: expected source<TAB>target, found no TAB"),
    ("abc\tcba\n", ["--set", "d_model"], "--set takes KEY=VALUE; got 'd_model'"),
    ("abc\tcba\n", ["--set", "colour=blue"], "gru-additive has no settings named colour; its --set keys: hidden, "
     "dropout, max_len, attention_query, additive_activation, decoder_layers, decoder_heads, positions, pad_id, "
     "bos_id, eos_id, src_append_eos, bidirectional, embedding_size, luong_score, rnn_cell, input_feeding, "
     "init_hidden, attentional_bias, suppress_bos, min_output_len, annotation_size"),
])
def test_train_rejects_bad_data_and_settings(capsys, tmp_path, content, options, message):
    data = tmp_path / "pairs.tsv"
    data.write_text(content, encoding="utf-8")
    code, _, err = cli(capsys, "train", "--data", data, "--arch", "gru-additive", "--tokenizer", "char",
                       "--out", tmp_path / "m.safetensors", *options)
    assert_error(code, err, message.format(data=data))
    assert not (tmp_path / "m.safetensors").exists()


def test_out_of_device_memory_is_one_line_with_the_way_out(capsys, monkeypatch, random_checkpoint):
    import torch

    from models.inference.translator import Translator

    def out_of_memory(*args, **kwargs):  # what a GPU says; there is none here to run out
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB")

    monkeypatch.setattr(Translator, "decode", out_of_memory)
    monkeypatch.setattr(Translator, "decode_batch", out_of_memory)  # a corpus is decoded in batches
    code, _, err = cli(capsys, "translate", "-c", random_checkpoint, "abc")
    assert_error(code, err, "the device ran out of memory (CUDA out of memory. Tried to allocate 20.00 GiB); "
                            "try --device cpu")


def test_train_takes_the_rnn_luong_options_joeynmt_models_use(capsys, tmp_path):
    """rnn-luong's JoeyNMT options (no input feeding, a bridge, a biased attentional layer, no <s> output) train."""
    data = tmp_path / "pairs.tsv"
    data.write_text("".join(f"{word}\t{word[::-1]}\n" for word in ("abc", "bca", "cab", "abcd", "dcba", "bad")),
                    encoding="utf-8")
    out = tmp_path / "luong.safetensors"
    code, _, err = cli(capsys, "train", "--data", data, "--arch", "rnn-luong", "--out", out, "--steps", "3",
                       "--tokenizer", "char", "--batch-size", "4", "--no-progress", "--eval-every", "0",
                       "--valid-sentences", "2", "--set", "hidden=16", "--set", "decoder_layers=1",
                       "--set", "bidirectional=true", "--set", "rnn_cell=lstm", "--set", "input_feeding=false",
                       "--set", "init_hidden=bridge", "--set", "attentional_bias=true", "--set", "suppress_bos=true")
    assert code == 0, err
    config = load_checkpoint(out).config
    assert (config.input_feeding, config.init_hidden, config.attentional_bias, config.suppress_bos) == (
        False, "bridge", True, True)
    code, _, err = cli(capsys, "translate", "-c", out, "abc")
    assert code == 0, err
