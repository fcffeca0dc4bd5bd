"""``attnviz contributions`` and ``attnviz export --contributions`` on the bundled demos: the ranking, the JSON
layout, the NPZ arrays, and what a GRU cannot give as one line."""

from __future__ import annotations

import json

import numpy as np
import pytest

from attnviz.state.demos import demo_reference_pairs
from models.storage.checkpoint import load_checkpoint
from models.analysis.contributions import alti, source_coverage
from models.analysis.importance import encode_references
from models.inference.translator import Translator
from tests.test_cli import assert_one_line_error, cli

DEMO = "en-es-transformer"


@pytest.fixture(scope="module")
def mixed_pairs(tmp_path_factory):
    """The demo's references, then each source forced to another sentence's reference (planted hallucinations)."""
    pairs = demo_reference_pairs(DEMO)[:4]
    planted = [(source, pairs[(index + 1) % len(pairs)][1]) for index, (source, _) in enumerate(pairs)]
    path = tmp_path_factory.mktemp("pairs") / "mixed.tsv"
    path.write_text("".join(f"{source}\t{target}\n" for source, target in pairs + planted), encoding="utf-8")
    return path, pairs + planted


def test_pairs_are_listed_lowest_source_contribution_first_with_each_pairs_alti_signal(capsys, mixed_pairs):
    path, pairs = mixed_pairs
    code, out, err = cli(capsys, "contributions", "-c", DEMO, "--data", path, "--json")
    assert code == 0 and err == ""
    document = json.loads(out)
    assert (document["method"], document["scored"]) == ("alti", "references")
    listed = document["pairs"]
    assert sorted(entry["pair"] for entry in listed) == list(range(1, len(pairs) + 1))
    assert [entry["avg_source"] for entry in listed] == sorted(entry["avg_source"] for entry in listed)
    translator = Translator(load_checkpoint(f"resources/checkpoints/{DEMO}.safetensors"), "cpu")
    (source_ids, target, _), = encode_references(translator, [pairs[5]])[0]
    coverage = source_coverage(alti(translator.model, source_ids, target))
    entry = next(entry for entry in listed if entry["pair"] == 6)
    assert entry["source"] == pairs[5][0] and entry["output"] == pairs[5][1]
    assert entry["avg_source"] == pytest.approx(coverage.avg_source, abs=1e-5)
    assert entry["min_source_token"] == pytest.approx(coverage.min_source_token, abs=1e-5)


def test_the_table_and_the_models_own_outputs(capsys):
    code, out, _ = cli(capsys, "contributions", "-c", DEMO, "--limit", "3", "--decoded")
    lines = out.splitlines()
    assert code == 0 and "3 reference pairs of the bundled demo" in lines[0] and "greedy outputs" in lines[0]
    assert lines[1].split()[:4] == ["rank", "pair", "avg_source", "min_source_token"] and len(lines) == 5
    values = [float(line.split()[2]) for line in lines[2:]]
    assert values == sorted(values) and all(0 < value < 1 for value in values)


def test_a_gru_is_refused_in_one_line_naming_what_it_lacks(capsys, tmp_path):
    code, _, err = cli(capsys, "contributions", "-c", "piglatin-gru-additive", "--limit", "2")
    assert_one_line_error(code, err, "needs Transformer blocks", "gru-additive model has none")
    code, _, err = cli(capsys, "export", "-c", "piglatin-gru-additive", "--contributions", "hello",
                       "-o", tmp_path / "gru.npz")
    assert_one_line_error(code, err, "needs Transformer blocks")
    assert not (tmp_path / "gru.npz").exists()


def test_export_writes_norms_alti_blocks_and_the_rolled_out_shares(capsys, tmp_path):
    output = tmp_path / "cat.npz"
    code, _, _ = cli(capsys, "export", "-c", DEMO, "--contributions", "The cat sits on the mat.", "-o", output)
    assert code == 0
    with np.load(output) as arrays:
        target_len, source_len = len(arrays["tgt_tokens"]), len(arrays["src_tokens"])
        for layer in range(3):
            assert arrays[f"norm_cross_L{layer}"].shape == arrays[f"cross_L{layer}"].shape
            assert arrays[f"alti_enc_self_L{layer}"].shape == (source_len, source_len)
            assert arrays[f"alti_dec_self_L{layer}"].shape == (target_len, target_len)
            assert arrays[f"alti_cross_L{layer}"].shape == (target_len, source_len)
        shares = arrays["alti_source"].sum(1) + arrays["alti_target"].sum(1)
        assert np.abs(shares - 1).max() < 1e-5
        np.testing.assert_allclose(arrays["source_contribution"], arrays["alti_source"].sum(1), atol=1e-6)
    code, _, err = cli(capsys, "export", "-c", DEMO, "--contributions", "--ablate", "cross:0:1", "The cat.",
                       "-o", output)
    assert_one_line_error(code, err, "leave out --ablate")
