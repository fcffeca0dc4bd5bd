"""``attnviz stats``: the printed tables, the JSON document and the NPZ file agree, on a real checkpoint file;
bad input is one line and exit 1."""

from __future__ import annotations

import contextlib
import json
import subprocess

import numpy as np
import pytest
import torch

from attnviz.cli import main
from models import build_model
from models.storage.checkpoint import save_checkpoint
from tests.helpers import tiny_config
from tests.test_cli import assert_one_line_error, cli

CORPUS = "abc\tba\na\thgfedcba\n\nabcdefgh abc\tc\nab\tab\n"


@pytest.fixture
def corpus(tmp_path):
    path = tmp_path / "pairs.tsv"
    path.write_text(CORPUS, encoding="utf-8")
    return path


def test_tables_json_and_npz_agree(capsys, tmp_path, random_checkpoint, corpus):
    output = tmp_path / "stats.npz"
    code, out, err = cli(capsys, "stats", "-c", random_checkpoint, "--data", corpus, "--batch-size", "3", "-o", output)
    assert code == 0 and err == ""
    assert out.startswith("4 sentences")
    assert "reference · cross-attention · diagonal" in out and "reference · decoder self-attention · bos" in out
    assert "padding: no weight on any padded key" in out
    arrays = np.load(output)
    assert arrays["reference.cross.entropy"].shape == (2, 4) and arrays["reference.cross.entropy"].dtype == np.float32
    assert "reference.cross.same" not in arrays and "reference.enc_self.diagonal" not in arrays
    assert not any(name.startswith("decoded.") for name in arrays)
    table = out.split("reference · cross-attention · entropy")[1].splitlines()
    assert table[1].split() == ["H0", "H1", "H2", "H3"]
    assert [float(value) for value in table[3].split()[1:]] == pytest.approx(arrays["reference.cross.entropy"][1],
                                                                             abs=1e-3)

    code, out, _ = cli(capsys, "stats", "-c", random_checkpoint, "--data", corpus, "--json", "--limit", "3", "--decode")
    document = json.loads(out)
    assert document["sentences"] == 3 and set(document["runs"]) == {"reference", "decoded"}
    assert len(document["outputs"]) == 3
    cross = document["runs"]["reference"]["cross"]
    assert np.array(cross["diagonal"]).shape == (2, 4)
    typical = cross["typical"][1][2]
    assert sorted(typical["most"]) == sorted(typical["least"]) == [0, 1, 2]


@pytest.mark.parametrize("content, fragment", [
    ("", "no sentence pairs"),
    ("\n\n", "no sentence pairs"),
    ("abc ba\n", ":1: expected source<TAB>target"),
    ("abc\tba\nab\t\n", ":2: the target side is empty"),
])
def test_empty_or_malformed_corpus(capsys, tmp_path, random_checkpoint, content, fragment):
    path = tmp_path / "pairs.tsv"
    path.write_text(content, encoding="utf-8")
    code, out, err = cli(capsys, "stats", "-c", random_checkpoint, "--data", path)
    assert_one_line_error(code, err, str(path), fragment)
    assert out == ""


def test_missing_corpus_and_bad_options(capsys, tmp_path, random_checkpoint, corpus):
    code, _, err = cli(capsys, "stats", "-c", random_checkpoint, "--data", tmp_path / "none.tsv")
    assert_one_line_error(code, err, "none.tsv", "no such file")
    code, _, err = cli(capsys, "stats", "-c", random_checkpoint, "--data", corpus, "--batch-size", "0")
    assert_one_line_error(code, err, "--batch-size")
    with pytest.raises(SystemExit) as exit:  # --limit is the corpus tools' one option: a usage error in each
        main(["stats", "-c", str(random_checkpoint), "--data", str(corpus), "--limit", "0"])
    assert exit.value.code == 2 and "--limit: must be at least 1" in capsys.readouterr().err
    code, _, err = cli(capsys, "stats", "-c", random_checkpoint, "--data", corpus, "-o", tmp_path / "stats.txt")
    assert_one_line_error(code, err, "stats.txt", ".npz")


def test_a_model_without_attention(capsys, tmp_path, char_tokenizer, corpus):
    torch.manual_seed(0)
    path = save_checkpoint(tmp_path / "none.safetensors", build_model(tiny_config("gru-none")), char_tokenizer,
                           char_tokenizer, {})
    code, out, err = cli(capsys, "stats", "-c", path, "--data", corpus)
    assert_one_line_error(code, err, "has no attention")
    assert out == ""


def test_an_archive_the_disk_has_no_room_for_is_one_line_and_leaves_no_partial_file(capsys, tmp_path,
                                                                                       random_checkpoint, corpus):
    """``-o`` is written like every export (models/storage/files.py): a full disk leaves nothing half-written."""
    folder = tmp_path / "full"
    folder.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(folder)], check=False).returncode != 0:
        pytest.skip("needs a small file system of its own (mount -t tmpfs, as root)")
    try:
        with open(folder / "filler", "wb", buffering=0) as filler, contextlib.suppress(OSError):
            while True:  # every block taken; a new, empty file still fits (tmpfs counts files apart)
                filler.write(b"\0" * 4096)
        code, _, err = cli(capsys, "stats", "-c", random_checkpoint, "--data", corpus, "-o", folder / "stats.npz")
        assert sorted(path.name for path in folder.iterdir()) == ["filler"]
        assert_one_line_error(code, err, "stats.npz", "could not write it")
    finally:
        subprocess.run(["umount", str(folder)], check=True)
