"""``attnviz contributions`` and ``attnviz export --contributions`` on the bundled demos: the ranking, the JSON
layout, the NPZ arrays, and what a GRU cannot give as one line."""

from __future__ import annotations

import json

import numpy as np
import pytest

from attnviz.state.demos import demo_reference_pairs
from models.storage.checkpoint import load_checkpoint
from models.analysis.contributions import alti, source_coverage, value_norms, value_zeroing
from models.analysis.gradients import input_x_gradient, integrated_gradients
from models.analysis.importance import encode_references
from models.inference.translator import Translator
from tests.test_cli import assert_one_line_error, cli
from tests.helpers import write_pairs

DEMO = "en-es-transformer"


@pytest.fixture(scope="module")
def mixed_pairs(tmp_path_factory):
    """The demo's references, then each source forced to another sentence's reference (planted hallucinations)."""
    pairs = demo_reference_pairs(DEMO)[:4]
    planted = [(source, pairs[(index + 1) % len(pairs)][1]) for index, (source, _) in enumerate(pairs)]
    path = tmp_path_factory.mktemp("pairs") / "mixed.tsv"
    write_pairs(path, pairs + planted)
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


def test_a_gru_exports_what_it_can_give_and_nothing_it_cannot(capsys, tmp_path):
    output = tmp_path / "gru.npz"
    code, _, _ = cli(capsys, "export", "-c", "piglatin-gru-additive", "--contributions", "--ig-steps", "4", "hello",
                     "-o", output)
    assert code == 0
    translator = Translator(load_checkpoint("resources/checkpoints/piglatin-gru-additive.safetensors"), "cpu")
    src, out = translator.source("hello").ids, translator.translate("hello").token_ids
    with np.load(output) as arrays:
        contributed = {name for name in arrays.files if name.split("_")[0] in ("norm", "alti", "zeroing", "ixg", "ig")}
        assert contributed == {"norm_cross_L0", "ixg_source", "ixg_target", "ig_source", "ig_target",
                               "ig_completeness", "ig_steps"}
        assert "source_contribution" not in arrays.files
        norms = value_norms(translator.model, src, out)
        np.testing.assert_array_equal(arrays["norm_cross_L0"], norms.layers["cross"][0])
        ig = integrated_gradients(translator.model, src, out, steps=4)
        np.testing.assert_allclose(arrays["ig_source"], ig.source, rtol=1e-5, atol=1e-7)
        np.testing.assert_array_equal(arrays["ig_steps"], [4] * len(out))


@pytest.mark.parametrize("steps", ["0", "100000"])
def test_an_integrated_gradients_step_count_out_of_range_is_one_line(capsys, tmp_path, steps):
    for command in (["contributions", "-c", DEMO, "--limit", "1", "--ig-steps", steps],
                    ["export", "-c", DEMO, "--contributions", "--ig-steps", steps, "The cat.",
                     "-o", tmp_path / "a.npz"],
                    ["render", "-c", DEMO, "--kind", "cross", "--show", "integrated_gradients", "--ig-steps", steps,
                     "The cat.", "-o", tmp_path / "a.png"]):
        code, _, err = cli(capsys, *command)
        assert_one_line_error(code, err, f"integrated gradients take 1 to 1024 steps; got {steps}")
    assert not any(tmp_path.iterdir())


def test_contributions_name_the_steps_whose_integrated_gradients_miss_completeness(capsys):
    code, out, err = cli(capsys, "contributions", "-c", "en-es-transformer-postln", "--limit", "2", "--json", "--ig")
    document = json.loads(out)
    assert code == 0 and document["ig_tolerance"] == 0.05
    for entry in document["pairs"]:
        assert len(entry["ig_completeness"]) == len(entry["ig_steps"]) and max(entry["ig_completeness"]) <= 0.05
        assert entry["ig_missed"] == [] and min(entry["ig_steps"]) == 16
    code, out, err = cli(capsys, "contributions", "-c", "en-es-transformer-postln", "--limit", "2", "--ig-steps", "2")
    lines = out.splitlines()
    assert code == 0 and lines[1].split()[4:6] == ["ig_error", "missed"]
    missed = [line.split()[5] for line in lines[2:4]]
    assert any(steps != "-" for steps in missed) and lines[-1].startswith("missed: output steps")


def test_export_writes_every_method_as_the_methods_give_it(capsys, tmp_path):
    output, text = tmp_path / "cat.npz", "The cat sits on the mat."
    code, _, _ = cli(capsys, "export", "-c", DEMO, "--contributions", "--ig-steps", "8", text, "-o", output)
    assert code == 0
    translator = Translator(load_checkpoint(f"resources/checkpoints/{DEMO}.safetensors"), "cpu")
    src, out = translator.source(text).ids, translator.translate(text).token_ids
    with np.load(output) as arrays:
        zeroing = value_zeroing(translator.model, src, out)
        for kind, layers in zeroing.layers.items():
            for layer, expected in enumerate(layers):
                np.testing.assert_allclose(arrays[f"zeroing_{kind}_L{layer}"], expected, atol=1e-6)
                rounding = arrays[f"zeroing_rounding_{kind}_L{layer}"]
                assert rounding.dtype == bool and (rounding == zeroing.rounding_rows[kind][layer]).all()
        ixg = input_x_gradient(translator.model, src, out)
        ig = integrated_gradients(translator.model, src, out, steps=8)
        for prefix, maps in (("ixg", ixg), ("ig", ig)):
            np.testing.assert_allclose(arrays[f"{prefix}_source"], maps.source, rtol=1e-5, atol=1e-7)
            np.testing.assert_allclose(arrays[f"{prefix}_target"], maps.target, rtol=1e-5, atol=1e-7)
        assert arrays["ixg_source"].shape == (len(out), len(src)) and arrays["ig_target"].shape == (len(out),) * 2
        np.testing.assert_allclose(arrays["ig_completeness"], ig.completeness, rtol=1e-4, atol=1e-6)
        assert arrays["ig_completeness"].shape == (len(out),) and (arrays["ig_steps"] == 8).all()
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
