"""``attnviz patch`` on the bundled demos: the JSON document's shape and values against the patching it reports, the
readable tables, a decoder-only prompt, and bad input as one line each."""

from __future__ import annotations

import json

import numpy as np
import pytest

from attnviz.state.demos import demo_path
from models.analysis.patching import activation_patching
from models.inference.decoding import finish
from models.inference.translator import Translator
from models.storage.checkpoint import load_checkpoint
from tests.test_cli import assert_one_line_error, cli

DEMO = "en-es-transformer"
CLEAN, CORRUPT = "The Lord is my shepherd.", "The Lord is my father."


def test_json_has_every_table_in_its_shape(capsys):
    code, out, err = cli(capsys, "patch", "-c", DEMO, "--clean", CLEAN, "--corrupt", CORRUPT, "--json")
    assert code == 0 and err == ""
    document = json.loads(out)
    translator = Translator(load_checkpoint(demo_path(DEMO), "cpu"), "cpu")
    clean, corrupt = translator.source(CLEAN), translator.source(CORRUPT)
    output = finish(translator.decode(clean, need_weights=False))[0]
    other = finish(translator.decode(corrupt, need_weights=False))[0]
    step = next(index for index, (a, b) in enumerate(zip(output.token_ids, other.token_ids)) if a != b)
    metric = document["metric"]
    assert (metric["name"], metric["step"], metric["normalised"]) == ("logit_difference", step, True)
    assert (metric["clean_token"], metric["corrupt_token"]) == (output.tokens[step], other.tokens[step])
    assert document["clean"]["output"] == output.tokens and document["corrupt"]["output"] == other.tokens
    assert document["clean"]["tokens"] == translator.source_labels(clean)
    layers, heads, source, fed = 3, 4, len(clean.ids), len(output.token_ids)
    assert np.shape(document["encoder"]) == (layers + 1, source)
    assert np.shape(document["decoder"]) == (layers + 1, fed)
    assert np.shape(document["encoder_all"]) == (layers + 1,)
    assert {kind: np.shape(table) for kind, table in document["heads"].items()} == {
        kind: (layers, heads) for kind in ("enc_self", "dec_self", "cross")}
    for tables in (document["atp"], document["raw"], document["raw"]["atp"]):
        assert np.shape(tables["encoder"]) == (layers + 1, source)
        assert np.shape(tables["heads"]["cross"]) == (layers, heads)
    result = activation_patching(translator.model, clean.ids, corrupt.ids, output.token_ids, step=step)
    assert document["clean"]["value"] == pytest.approx(result.clean, abs=1e-5)
    assert document["corrupt"]["value"] == pytest.approx(result.corrupt, abs=1e-5)
    np.testing.assert_allclose(document["raw"]["encoder"], result.exact.encoder, atol=1e-4)
    span = result.clean - result.corrupt
    np.testing.assert_allclose(document["heads"]["cross"], (result.exact.heads["cross"] - result.corrupt) / span,
                               atol=1e-5)
    assert document["encoder_all"][-1] == pytest.approx(1.0, abs=1e-5)  # the clean run's encoder output: clean
    assert set(document["spearman"]) >= {"encoder", "decoder", "encoder_all", "heads_cross", "all"}


def test_text_output_and_the_nll_metric(capsys):
    code, out, err = cli(capsys, "patch", "-c", DEMO, "--clean", CLEAN, "--corrupt", CORRUPT, "--nll")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].startswith("NLL of the clean output: clean ")
    assert "encoder residual stream:" in lines and "cross-attention heads:" in lines
    row = lines[lines.index("encoder residual stream:") + 2]
    assert row.startswith("emb") and len(row.split()) == 1 + 7 + 1  # the label, 7 positions, all of them


def test_a_decoder_only_prompt_is_the_source(capsys):
    code, out, err = cli(capsys, "patch", "-c", "piglatin-decoder-only", "--clean", "hello world", "--corrupt",
                         "hello wurld", "--json")
    assert code == 0, err
    document = json.loads(out)
    assert document["encoder"] == [] and document["encoder_all"] == [] and list(document["heads"]) == ["dec_self"]
    prompt = len(document["clean"]["tokens"])
    assert document["prompt_len"] == prompt
    assert np.shape(document["decoder"]) == (5, prompt + len(document["clean"]["output"]) - 1)
    assert np.shape(document["heads"]["dec_self"]) == (4, 4)


@pytest.mark.parametrize("args, fragments", [
    (["--clean", CLEAN, "--corrupt", "The Lord is my good shepherd."], ["same number of tokens", "has 7"]),
    (["--clean", CLEAN, "--corrupt", CORRUPT, "--step", "40"], ["step 40 is beyond the output: it has steps 0 to 6"]),
    (["--clean", CLEAN, "--corrupt", CLEAN], ["the same tokens"]),
    (["--clean", CLEAN, "--corrupt", CORRUPT, "--nll", "--step", "1"], ["--step chooses"]),
])
def test_bad_input_is_one_line(capsys, args, fragments):
    code, _, err = cli(capsys, "patch", "-c", DEMO, *args)
    assert_one_line_error(code, err, *fragments)


def test_a_recurrent_model_is_refused_in_one_line(capsys):
    code, _, err = cli(capsys, "patch", "-c", "piglatin-gru-additive", "--clean", "hello", "--corrupt", "hullo")
    assert_one_line_error(code, err, "recurrent (GRU) layers")


def test_patching_is_an_entry_of_the_interventions_catalogue():
    from attnviz.cli import COMMANDS
    from models.analysis.catalogue import INTERVENTION_METHODS, PATCH_METRICS, PATCHING

    method = INTERVENTION_METHODS[PATCHING]
    assert method.command in COMMANDS and set(method.metrics) == set(PATCH_METRICS)
    assert method.label.startswith("activation patching")
