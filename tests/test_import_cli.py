"""``attnviz convert`` end to end: the output loads, ``translate`` runs on it, ``info`` shows the answers
the file could not give; missing answers are one line listing what to pass."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from attnviz.cli import main
from models.storage.checkpoint import load_checkpoint
from models.inference.translator import Translator
from tests.test_import_nn_transformer import HEADS, SRC_WORDS, TGT_WORDS, Seq2SeqTransformer, write_vocab
from tests.test_import_pytorch_seq2seq import HIDDEN, AttnDecoderRNN, EncoderRNN
from tests.test_import_pytorch_seq2seq import SRC_WORDS as FRENCH
from tests.test_import_pytorch_seq2seq import TGT_WORDS as ENGLISH
from tests.test_import_pytorch_seq2seq import write_vocab as write_lang

pytestmark = pytest.mark.filterwarnings("ignore:enable_nested_tensor")


def cli(capsys, *args) -> tuple[int, str, str]:
    code = main([str(arg) for arg in args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.fixture
def tutorial_file(tmp_path):
    torch.manual_seed(0)
    model = Seq2SeqTransformer(4 + len(SRC_WORDS), 4 + len(TGT_WORDS), norm_first=True)
    torch.save(model.state_dict(), tmp_path / "transformer.pt")
    vocabularies = write_vocab(tmp_path / "de.txt", SRC_WORDS), write_vocab(tmp_path / "en.txt", TGT_WORDS)
    return tmp_path / "transformer.pt", *vocabularies


def test_nn_transformer_converts_translates_and_remembers(tutorial_file, tmp_path, capsys):
    path, src_vocab, tgt_vocab = tutorial_file
    output = tmp_path / "converted.safetensors"
    code, _, err = cli(capsys, "convert", path, "-o", output, "--set", f"nhead={HEADS}", "--set", "norm_first=true",
                       "--src-vocab", src_vocab, "--tgt-vocab", tgt_vocab)
    assert code == 0 and "nn-transformer → transformer-preln" in err
    checkpoint = load_checkpoint(output)
    assert checkpoint.config.heads == HEADS and checkpoint.config.pre_norm_kv
    expected = Translator(checkpoint, "cpu").translate("ein mann läuft im park .", max_len=6).text
    code, out, _ = cli(capsys, "translate", "-c", output, "--max-len", "6", "ein mann läuft im park .")
    assert code == 0 and out == expected + "\n"
    code, out, _ = cli(capsys, "info", output, "--json")
    record = json.loads(out)["provenance"]["imported_from"]
    assert record["format"] == "nn-transformer" and record["supplied"] == {"nhead": HEADS, "norm_first": True}
    assert record["read_from_file"]["emb_size"] == 16 and record["vocabularies"]["src"] == str(src_vocab)
    assert record["details"] == {}  # a machine reader keeps one shape: the key stays, empty
    code, out, _ = cli(capsys, "info", output)
    assert code == 0 and "\n".join(["    supplied:", "      nhead:      4", "      norm_first: True"]) in out
    assert "details" not in out and "{}" not in out  # nothing format-specific: no empty section


def test_missing_answers_are_one_line_listing_what_to_pass(tutorial_file, tmp_path, capsys):
    path, src_vocab, _ = tutorial_file
    output = tmp_path / "never.safetensors"
    code, _, err = cli(capsys, "convert", path, "-o", output, "--src-vocab", src_vocab)
    lines = err.strip().splitlines()
    assert code == 1 and len(lines) == 1 and lines[0].startswith("attnviz: error: ")
    for fragment in ("--set nhead=N (one of 1, 2, 4, 8, 16)", "--set norm_first=true|false", "--tgt-vocab FILE",
                     "read from the file: emb_size=16, num_encoder_layers=2"):
        assert fragment in lines[0]
    assert "--src-vocab" not in lines[0] and not output.exists()


def test_pytorch_seq2seq_folder_converts_translates_and_remembers(tmp_path, capsys):
    torch.manual_seed(1)
    folder = tmp_path / "tutorial"
    folder.mkdir()
    torch.save(EncoderRNN(2 + len(FRENCH), HIDDEN).state_dict(), folder / "encoder.pt")
    torch.save(AttnDecoderRNN(HIDDEN, 2 + len(ENGLISH)).state_dict(), folder / "decoder.pt")
    src_vocab, tgt_vocab = write_lang(tmp_path / "fra.txt", FRENCH), write_lang(tmp_path / "eng.txt", ENGLISH)
    output = tmp_path / "gru.safetensors"
    code, _, err = cli(capsys, "convert", folder, "-o", output, "--src-vocab", src_vocab, "--tgt-vocab", tgt_vocab,
                       "--set", "MAX_LENGTH=8")
    assert code == 0 and "pytorch-seq2seq → gru-additive" in err
    checkpoint = load_checkpoint(output)
    assert (checkpoint.config.max_len, checkpoint.config.additive_activation) == (8, "tanh")
    code, out, err = cli(capsys, "translate", "-c", output, "Je suis content !", "il est grand")
    assert code == 0 and len(out.splitlines()) == 2, err
    code, out, _ = cli(capsys, "info", output)
    assert code == 0 and "    supplied:\n      MAX_LENGTH: 8" in out
    assert "    assumed:\n      tokenize: seq2seq-tutorial" in out


def test_the_cli_offers_every_format():
    from attnviz.cli import convert as command
    from models.importers import FORMATS

    assert command.FORMAT_NAMES == tuple(FORMATS)
    listed = [line.split()[0] for line in command.__doc__.splitlines() if line.startswith("  ") and line[2] != " "]
    assert listed == list(FORMATS)  # --help describes each format, in the registry's order


def test_every_format_is_detected_and_documented():
    from models.importers import FILE_ORDER, FOLDER_ORDER, FORMATS, HF_FOLDERS

    for order in (FILE_ORDER, FOLDER_ORDER, HF_FOLDERS):
        assert set(order) <= set(FORMATS) and len(set(order)) == len(order)
    assert set(FILE_ORDER) | set(FOLDER_ORDER) == set(FORMATS)
    for kind in ("file", "folder"):  # each format's declared rank is its own: no two tie
        ranks = [getattr(module.DETECTION, kind) for module in FORMATS.values()]
        ranks = [rank for rank in ranks if rank is not None]
        assert len(set(ranks)) == len(ranks), kind
    # Pinned: a change of rank changes which format a file is taken for.
    assert FILE_ORDER == ("joeynmt", "opennmt", "fairseq", "jadore", "nn-transformer", "annotated", "pytorch-seq2seq",
                          "marian")
    assert FOLDER_ORDER == ("marian", "hf-bart", "fsmt", "hf-t5", "joeynmt", "sockeye", "fairseq", "pytorch-seq2seq",
                            "hf-causal")
    assert HF_FOLDERS == ("marian", "hf-bart", "fsmt", "hf-t5", "hf-causal")
    guide = (Path(__file__).parents[1] / "docs" / "checkpoint-formats.md").read_text(encoding="utf-8")
    readme = (Path(__file__).parents[1] / "README.md").read_text(encoding="utf-8")
    for name in FORMATS:
        assert f"\n## {name}\n" in guide and f"| `{name}` |" in readme


def test_convert_refuses_a_bad_output_name(tutorial_file, tmp_path, capsys):
    path, *_ = tutorial_file
    code, _, err = cli(capsys, "convert", path, "-o", tmp_path / "out.pt")
    assert code == 1 and "must end in .safetensors" in err
